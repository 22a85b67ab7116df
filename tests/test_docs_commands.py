"""tools/check_docs_commands.py: the commands the docs show outside console blocks (```bash and plain
fenced blocks) run as shown, their shown output still matches, and what cannot run here says why.
(Console blocks and generated regions are compared by tests/test_readme.py.)"""

from dataclasses import replace
from pathlib import Path

import pytest

from script_module import load_script

ROOT = Path(__file__).resolve().parent.parent


def _load_tool():
    return load_script("tools/check_docs_commands.py", "shardwise_docs_commands_tool")


tool = _load_tool()

PAGE = """# A page

```console
$ shardwise presets systems
a table
$ shardwise validate korthikanti22_table4
another
```

```bash
shardwise calibrate examples/calibration/h100_runs.csv -o mine.yaml   # fit
shardwise predict --model llama3-8b --system dgx-h100 \\
    --calibration mine.yaml
shardwise calibrate theirs.csv -o x.yaml
```

```
shardwise plan --model llama3-8b --system dgx-h100 --global-batch 64 --top 1 --emit megatron
```

prints, under the table,

```bash
torchrun --nproc-per-node 8 ...
```

```
command     median s
shardwise --help   0.06
```

```bash
pip install -e . && shardwise crossover
python benchmarks/bench_planner.py
shardwise presets show NAME
shardwise measure micro -o machine.yaml
```

Inline: `shardwise validate memory`, `shardwise serve --with-frontier`, `shardwise predict --model gpt3-175b`.
"""


def _by_command(commands):
    return {c.command: c for c in commands}


def test_finds_console_and_shell_commands_with_their_lines():
    found = tool.commands_in(PAGE, "page.md")
    assert [c.kind for c in found].count("console") == 2
    console = _by_command(found)["shardwise presets systems"]
    assert (console.line, console.shown) == (4, "a table")
    shell = [c for c in found if c.kind == "bash"]
    assert [c.command for c in shell][:3] == [
        "shardwise calibrate examples/calibration/h100_runs.csv -o mine.yaml",  # the comment dropped
        "shardwise predict --model llama3-8b --system dgx-h100 --calibration mine.yaml",  # continuation joined
        "shardwise calibrate theirs.csv -o x.yaml",
    ]
    assert [c.line for c in shell][:3] == [11, 12, 14]
    assert len({c.group for c in shell[:3]}) == 1  # one block: run in order in one directory
    assert "median" not in " ".join(c.command for c in found)  # an unlabelled table is not a command block


def test_a_block_under_an_emit_command_is_its_shown_output():
    emit = _by_command(tool.commands_in(PAGE))[
        "shardwise plan --model llama3-8b --system dgx-h100 --global-batch 64 --top 1 --emit megatron"
    ]
    assert emit.shown == "torchrun --nproc-per-node 8 ..."
    assert not any(c.command.startswith("torchrun") for c in tool.commands_in(PAGE))


def test_what_cannot_run_here_says_why():
    found = _by_command(tool.commands_in(PAGE, inline=True))
    assert found["shardwise predict --model llama3-8b --system dgx-h100 --calibration mine.yaml"].skip is None
    assert "theirs.csv" in found["shardwise calibrate theirs.csv -o x.yaml"].skip  # no file, no earlier command
    assert "network" in found["pip install -e . && shardwise crossover"].skip
    assert "benchmark" in found["python benchmarks/bench_planner.py"].skip
    assert "placeholder" in found["shardwise presets show NAME"].skip
    assert "PyTorch" in found["shardwise measure micro -o machine.yaml"].skip
    assert found["shardwise validate memory"].skip is None
    assert found["shardwise predict --model gpt3-175b"].skip is None
    assert "prose" in found["shardwise serve --with-frontier"].skip
    assert all(c.skip is None or c.skip.strip() for c in found.values())


@pytest.mark.parametrize(
    ("shown", "matches"),
    [
        ("b\nc", True),
        ("b\n...\nd", True),  # lines left out
        ("a lo ...\nb", True),  # the rest of a line left out
        ("b\nd", False),  # shown together, apart in the output
        ("c\nb", False),  # out of order
        ("b\nx", False),  # a line the output no longer has
    ],
)
def test_an_excerpt_matches_only_lines_the_output_has_in_order(shown, matches):
    assert tool.excerpt_matches(shown, "a long line\nb\nc\nd") is matches


def test_a_failing_or_changed_command_is_reported():
    c = tool.DocCommand("p.md", 3, "bash", "shardwise plan", 1, shown="x\n...")
    assert tool.verdict(c, tool.Run(2, "error: No such option '--first-stage-layers'.", 0.1)).status == "failed"
    assert tool.verdict(c, tool.Run(0, "y", 0.1)).status == "stale"
    assert tool.verdict(c, tool.Run(0, "header\nx\ny", 0.1)).status == "ok"
    console = tool.DocCommand("p.md", 3, "console", "shardwise plan", 1, shown="x")
    assert tool.verdict(console, tool.Run(0, "x\ny", 0.1)).status == "stale"  # console blocks: exact
    assert tool.verdict(replace(c, skip="a placeholder, not a full command"), None).status == "skipped"


def test_commands_run_in_a_scratch_directory_in_order():
    """A file the first command writes is there for the next, beside copies of examples/ and tools/,
    and the file it writes lands there, not in the repository."""
    runs = tool.run_sequence(
        (
            "python -c \"open('written.txt', 'w').write('hi')\"",
            "python -c \"import os; print(open('written.txt').read(), sorted(os.listdir()))\"",
            "shardwise presets show no-such-preset",
        )
    )
    assert [r.exit_code for r in runs[:2]] == [0, 0]
    assert runs[1].output == "hi ['docs', 'examples', 'tools', 'written.txt']"
    assert runs[2].exit_code == 2 and runs[2].output.startswith("error:")  # bad input: one line, exit 2
    assert not (ROOT / "written.txt").exists()  # written in the scratch folder, not the repository


@pytest.mark.slow
def test_the_docs_shell_commands_run_as_shown():
    """Every command of the docs' ```bash and plain blocks that can run here (a few seconds) exits 0, and the
    output shown under it (the --emit launches) is still what it prints."""
    commands = [
        c
        for path in tool.markdown_files()
        for c in tool.commands_in(path.read_text(encoding="utf-8"), tool.relative(path))
    ]
    shell = [c for c in commands if c.kind == "bash"]
    assert sum(c.skip is None for c in shell) >= 8 and sum(c.shown is not None for c in shell) >= 3
    # `calibrate` runs (10 s each here) are tested by test_calibration*.py; one process: the suite's
    # workers already hold the cores
    calibrating = {(c.path, c.group) for c in shell if "shardwise calibrate" in c.command}
    shell = [c for c in shell if (c.path, c.group) not in calibrating]
    results = tool.run_all(shell, jobs=1)
    bad = [r for r in results if r.status in ("failed", "stale")]
    assert not bad, "run python tools/check_docs_commands.py --kind bash:\n" + tool.report(bad)
