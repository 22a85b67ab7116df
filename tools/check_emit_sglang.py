"""Parse what `serve --emit sglang` writes with SGLang's own flag definitions (a development-time
check, not a test; docs/emit/sglang.md).

SGLang's `server_args.py` cannot be imported without its GPU stack, so this reads the file of a
wheel (`pip download sglang==0.5.6.post2 --no-deps`) and builds an argparse parser from its
`parser.add_argument(...)` calls: every flag name, its int/float type, store_true actions, and its
choices where they are a literal or a module-level list (QUANTIZATION_CHOICES, ...). Each layout
below is emitted (`shardwise serve ... --emit sglang --json`) and every server's command parsed.

    python tools/check_emit_sglang.py path/to/sglang-0.5.6.post2-py3-none-any.whl
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import json
import shlex
import subprocess
import sys
import zipfile

CASES = (
    "--model deepseek-v3 --system dgx-h200 --plan tp=1,ep=8 --plan tp=8 --plan tp=8,ep=8 --concurrency 64 "
    "--weight-precision fp8",
    "--model llama3-70b --system dgx-h100 --num-gpus 16 --plan tp=8,pp=2 --plan tp=2,pp=2 --kv-precision fp8 "
    "--no-custom-all-reduce --runtime pytorch-eager --weight-precision fp8",
    "--model llama3.1-8b --system dgx-h100 --plan tp=1 --input-len 200000 --output-len 100",
    "--model qwen3-30b-a3b --system dgx-h100 --num-gpus 16 --plan tp=2,ep=16 --concurrency 256",
)


def parser_of(source: str) -> argparse.ArgumentParser:
    tree = ast.parse(source)
    lists: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            with contextlib.suppress(ValueError):
                lists[node.targets[0].id] = ast.literal_eval(node.value)
    p = argparse.ArgumentParser(allow_abbrev=False, exit_on_error=False)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument"):
            continue
        names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        if not names or not names[0].startswith("--"):
            continue
        kw: dict[str, object] = {}
        for k in node.keywords:
            if k.arg == "type" and isinstance(k.value, ast.Name) and k.value.id in ("int", "float"):
                kw["type"] = {"int": int, "float": float}[k.value.id]
            elif k.arg == "action" and isinstance(k.value, ast.Constant) and k.value.value == "store_true":
                kw["action"] = "store_true"
            elif k.arg == "choices":
                try:
                    kw["choices"] = ast.literal_eval(k.value)
                except ValueError:
                    if isinstance(k.value, ast.Name) and k.value.id in lists:
                        kw["choices"] = lists[k.value.id]
            elif k.arg == "nargs" and isinstance(k.value, ast.Constant):
                kw["nargs"] = k.value.value
        if "action" not in kw and "nargs" not in kw and any(k.arg == "action" for k in node.keywords):
            kw["nargs"] = "?"  # a custom action (deprecations): takes a value or none
        with contextlib.suppress(argparse.ArgumentError):  # a flag declared twice (aliases)
            p.add_argument(*names, **kw)
    return p


def main() -> int:
    with zipfile.ZipFile(sys.argv[1]) as wheel:
        parser = parser_of(wheel.read("sglang/srt/server_args.py").decode())
    failed = 0
    for case in CASES:
        run = subprocess.run(
            [sys.executable, "-m", "shardwise", "serve", *case.split(), "--emit", "sglang", "--json"],
            capture_output=True,
            text=True,
        )
        if run.returncode:
            print(f"refused: {case}: {run.stderr.strip()}")
            continue
        for plan in json.loads(run.stdout)["plans"]:
            launch = plan["launch"]
            commands = [n["command"] for n in launch["nodes"]]
            if not commands:  # the shell's one command, continuation lines joined
                shell = launch["shell"]
                commands = [shell[shell.index("python -m sglang.launch_server") :]]
            for r, command in enumerate(commands):
                words = shlex.split(command.replace("\\\n", " "))[3:]
                try:
                    parser.parse_args(words)
                    print(f"ok      {plan['plan']} server {r}: {' '.join(words)}")
                except (argparse.ArgumentError, SystemExit) as exc:
                    failed += 1
                    print(f"FAILED  {plan['plan']} server {r}: {exc}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
