"""The code base stays ruff-clean (the style standard of the project)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(
    shutil.which("ruff") is None and not (Path(sys.executable).parent / "ruff").exists(),
    reason="ruff is not installed (pip install -e '.[test]')",
)
def test_ruff_is_clean():
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    paths = [str(ROOT / p) for p in ("src", "tests", "examples", "tools", "benchmarks")]
    proc = subprocess.run([ruff, "check", *paths], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.skipif(
    shutil.which("ruff") is None and not (Path(sys.executable).parent / "ruff").exists(),
    reason="ruff is not installed (pip install -e '.[test]')",
)
def test_ruff_format_is_clean():
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    paths = [str(ROOT / p) for p in ("src", "tests", "examples", "tools", "benchmarks")]
    proc = subprocess.run([ruff, "format", "--check", *paths], capture_output=True, text=True)
    assert proc.returncode == 0, "run `ruff format`:\n" + proc.stdout + proc.stderr


def test_the_layers_import_only_downwards():
    """presets/loaders -> specs -> physics -> engines -> analyses -> edges (cli, plots, export):
    a module never imports a layer above its own (docs/architecture.md)."""
    import ast

    order = ["specs", "physics", "engines", "analyses"]
    above = {layer: set(order[i + 1 :]) | {"cli", "plots"} for i, layer in enumerate(order)}
    above["specs"] |= {"loaders", "presets", "units", "hf_config"}  # parsing happens above the value types
    allowed: set[tuple[str, str]] = set()  # known debt would be listed here
    bad = []
    for layer in order:
        for path in (ROOT / "src" / "shardwise" / layer).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = []
                if isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
                elif isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                for name in names:
                    parts = name.split(".")
                    upward = parts[0] == "shardwise" and len(parts) > 1 and parts[1] in above[layer]
                    if upward and (layer, parts[1]) not in allowed:
                        bad.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not bad, "\n".join(sorted(set(bad)))


def test_the_faces_import_rules():
    """The explorer never imports the command line, the analyses never import a face (cli, explore,
    plots), the request layer (`shardwise.requests`) never imports a face, and no two modules
    import each other (an import circle). Known debt: the explorer's worker (explore/runner.py)
    answers `plan` through its request but still runs the command line for the other pages."""
    import ast

    src = ROOT / "src" / "shardwise"
    imports: dict[str, set[str]] = {}
    for path in src.rglob("*.py"):
        module = ".".join(("shardwise", *path.relative_to(src).with_suffix("").parts)).removesuffix(".__init__")
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("shardwise"):
                names.add(node.module)
                names |= {f"{node.module}.{a.name}" for a in node.names}
            elif isinstance(node, ast.Import):
                names |= {a.name for a in node.names if a.name.startswith("shardwise")}
        imports[module] = names
    bad = []
    for module, names in imports.items():
        for name in names:
            top = name.split(".")[1] if name.count(".") else ""
            if module.startswith("shardwise.explore") and top == "cli" and module != "shardwise.explore.runner":
                bad.append(f"{module} imports {name}")
            if module.startswith("shardwise.analyses") and top in ("cli", "explore", "plots"):
                bad.append(f"{module} imports {name}")
            if module.startswith("shardwise.requests") and top in ("cli", "explore"):
                bad.append(f"{module} imports {name}")
    for a, names in imports.items():
        for b in names & set(imports):
            if a != b and a in imports[b] and not b.startswith(a + ".") and not a.startswith(b + "."):
                bad.append(f"{a} and {b} import each other")
    assert not bad, "\n".join(sorted(set(bad)))


def test_figures_and_printing_never_rerun_the_model():
    """plots/ and the terminal rendering draw what an analysis returned; they import no engine and
    no evaluating analysis (a figure that recomputed a number could disagree with the table)."""
    import ast

    runs_the_model = ("estimate_", "simulate", "search", "times_s", "evaluate", "run_", "frontier", "at_max_batch")
    paths = [*(ROOT / "src" / "shardwise" / "plots").rglob("*.py"), ROOT / "src" / "shardwise" / "cli" / "render.py"]
    bad = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("shardwise"):
                bad += [
                    f"{path.relative_to(ROOT)} imports {a.name}"
                    for a in node.names
                    if a.name.startswith(runs_the_model)
                ]
    assert not bad, "\n".join(bad)
