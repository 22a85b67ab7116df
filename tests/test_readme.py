"""The documentation's examples are real: in README.md and every docs/**/*.md page, console blocks match
fresh runs, Python blocks execute, relative links resolve; and the README stays a short front door."""

import importlib.util
import re
from pathlib import Path

import pytest

from script_module import load_script

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _load_tool():
    return load_script("tools/readme.py", "shardwise_readme_tool")


readme = _load_tool()
FILES = readme.markdown_files()
NAMES = [readme.relative(path) for path in FILES]
TEXTS = {name: path.read_text(encoding="utf-8") for name, path in zip(NAMES, FILES, strict=True)}


@pytest.fixture(scope="module")
def outputs():
    """Every command of every file, each run once, in subprocesses several at a time, the slowest
    first (`readme.run_all`). Run one after another in this process (`in_process`, which saves the
    0.3 s of an interpreter start a command) the setup took 195 s against 78 s on 2 CPUs: the
    minutes of `validate --calibrated` then run alone."""
    return readme.run_all(c for name, text in TEXTS.items() for c in readme.commands_in(text, name))


@pytest.mark.parametrize(
    "command",
    [
        "shardwise presets show rtx4090-8x",  # a rich table, COLUMNS wide
        "shardwise crossover --cost-model textbook --no-plot --vary batch=1,4,16",  # a crossover table with its notes
    ],
)
def test_a_command_run_in_process_prints_what_its_subprocess_prints(command):
    assert readme.run_in_process(command) == readme.run(command)


def test_a_command_that_fails_in_process_is_refused_as_in_a_subprocess():
    with pytest.raises(SystemExit, match="exited with status 2"):
        readme.run_in_process("shardwise presets show no-such-preset")


@pytest.mark.parametrize("name", NAMES)
def test_no_block_shows_a_crash(name):
    """A console block is what a command prints; the CLI and the examples never print a traceback
    (bad input is one line), so one in the docs is a crash that was written down as output."""
    assert "Traceback (most recent call last)" not in TEXTS[name]


def test_regenerating_refuses_a_crash(monkeypatch):
    """tools/readme.py stops at a command that crashes instead of writing its traceback."""
    crash = "Traceback (most recent call last):\n  ...\nTypeError: boom"
    monkeypatch.setattr(readme.subprocess, "run", lambda *a, **k: readme.subprocess.CompletedProcess(a, 1, "", crash))
    with pytest.raises(SystemExit, match="crashed"):
        readme.run("python examples/microbatch_trend.py")


def test_regenerating_refuses_a_failing_command(monkeypatch):
    """A command that exits non-zero (a flag the CLI no longer has) is refused, not written down:
    its error line would read as the block's output and match on every later check."""
    error = "error: No such option '--first-stage-layers'."
    monkeypatch.setattr(readme.subprocess, "run", lambda *a, **k: readme.subprocess.CompletedProcess(a, 2, "", error))
    with pytest.raises(SystemExit, match="exited with status 2"):
        readme.run("shardwise plan --first-stage-layers 7")


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_console_blocks_are_up_to_date(name, outputs):
    stale = readme.stale_blocks(TEXTS[name], outputs, name)
    if stale:
        titles = "\n".join(block.title() for block in stale)
        pytest.fail(
            f"{len(stale)} block(s) out of date (run python tools/readme.py):\n{titles}\n\n"
            f"the first one, as in the file (-) and as a fresh run prints it (+):\n{stale[0].diff()}",
            pytrace=False,
        )


@pytest.mark.parametrize("name", NAMES)
def test_prose_that_quotes_the_output_quotes_numbers_a_block_prints(name):
    """Review 36: brief.md's prose said 4.76 s and 15% where the block above it printed 4.8 s and
    14%. Prose marked as quoting the output may only hold numbers (with a unit) that a block of its
    page prints, rounded as printed; with the blocks up to date (the test above), it is up to date."""
    assert readme.unquoted_numbers(TEXTS[name], name) == []


def test_the_prose_check_catches_a_number_the_block_no_longer_prints():
    page = (
        "```console\n$ shardwise crossover\ntp=8: 4.8 s = compute 4.04 s (84%), 693 ms; 12% to 32%; 0.108 us\n```\n"
        "- a list\n  <!-- numbers from the output -->\n  TP=8 takes 4.76 s, 4.04 against 3.37 s, 14%, 12-32%,\n"
        "  0.108 µs on 8 x a100 in 8 stages\n  <!-- end numbers -->\nOutside: 4.76 s.\n"
    )
    found = [q for _, q in readme.quantities("12-31% and 4 against 3.34 s, 2 x h, 8 stages, 14.6x")]
    assert found == ["12%", "31%", "4 s", "3.34 s", "14.6x"]
    bad = readme.unquoted_numbers(page, "p.md")
    assert [b.split(": ", 1)[0] for b in bad] == ["p.md:7", "p.md:7", "p.md:7"]
    assert [b.split("quotes ")[1].split(",")[0] for b in bad] == ["4.76 s", "3.37 s", "14%"]


def _python_blocks(text):
    return re.findall(r"```python\n(.*?)```", text, re.S)


@pytest.mark.parametrize("name", [n for n in NAMES if _python_blocks(TEXTS[n])])
def test_python_blocks_run(name, tmp_path, monkeypatch):
    """Each page's Python blocks run as written, in a scratch folder (what they write lands there)
    that sees the repository's examples/ as a reader's checkout does."""
    (tmp_path / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    without_torch = importlib.util.find_spec("torch") is None
    skipped = 0
    for code in _python_blocks(TEXTS[name]):
        if without_torch and "shardwise.measure" in code:  # the measure extra (PyTorch) is not installed
            skipped += 1
            continue
        exec(compile(code, name, "exec"), {})
    if skipped:
        pytest.skip(f"{skipped} block(s) use shardwise.measure, which needs PyTorch (pip install torch==2.13.0)")


def test_the_readme_has_python():
    assert _python_blocks(README)


# Links: [text](target) and ![alt](target), outside code; the target relative to the file.
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.S | re.M)
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)


def _prose(text):
    """The text without fenced code blocks, indented code and inline code."""
    text = FENCE.sub("", text)
    text = re.sub(r"^(?: {4}|\t).*$", "", text, flags=re.M)
    return INLINE_CODE.sub("", text)


def _slug(heading):
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path):
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    seen: dict[str, int] = {}
    anchors = set(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", text))
    for heading in re.findall(r"^#{1,6}\s+(.*?)\s*#*\s*$", text, re.M):
        slug = _slug(heading)
        anchors.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return anchors


@pytest.mark.parametrize("name", NAMES)
def test_relative_links_resolve(name):
    source = ROOT / name
    bad = []
    for target in LINK.findall(_prose(TEXTS[name])):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto:, ...
            continue
        file_part, _, anchor = target.partition("#")
        path = (source.parent / file_part).resolve() if file_part else source
        if not path.exists():
            bad.append(f"{target}: no such file")
            continue
        if ROOT not in path.parents and path != ROOT:
            bad.append(f"{target}: outside the repository")
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            bad.append(f"{target}: no heading or anchor #{anchor} in {readme.relative(path)}")
    assert not bad, f"{name}: broken links:\n" + "\n".join(bad)


def test_the_readme_is_a_front_door():
    lines = README.count("\n")
    assert lines < 250, f"README.md has {lines} lines; move detail into docs/"
    assert "../" not in README, "the README links outside the repository"


def test_the_two_commands_are_there():
    assert "python3 -m venv .venv && . .venv/bin/activate && pip install -e . && shardwise crossover" in README
    assert "pip install -e '.[test]' && python -m pytest -q" in README
    ci = (ROOT / ".ci" / "run").read_text()
    assert "python -m pytest -q\n" in ci
    assert "python -m pytest -q -m slow" in ci, ".ci/run must run the tests the default run leaves out"


def test_the_readme_quotes_the_current_accuracy():
    """The README's accuracy sentence quotes the holdout row of the generated table in docs/validation.md."""
    row = re.search(r"^\| all public sources \| holdout[^|]*\|(.*)$", TEXTS["docs/validation.md"], re.M)
    assert row, "docs/validation.md has no 'all public sources | holdout' row"
    runs, mape, _bias, base_mape, _base_bias, _spearman, pairs, base_pairs = (
        cell.strip() for cell in row.group(1).strip(" |").split("|")
    )
    quoted = [runs, mape, base_mape, pairs.split(" of ")[0], base_pairs.split(" of ")[0]]
    paragraph = next(p for p in README.split("\n\n") if "shardwise validate public" in p)
    words = set(re.findall(r"[\d.,]+%?", paragraph))
    missing = [value for value in quoted if value not in words]
    assert not missing, f"update the README's accuracy sentence: {missing} not in\n{paragraph}"
    for name in ("mixture of experts", "LoRA fine-tuning"):  # the rows reported apart
        row = re.search(rf"^\| {name} \(all sources\) \| holdout[^|]*\|(.*)$", TEXTS["docs/validation.md"], re.M)
        assert row, f"docs/validation.md has no '{name} | holdout' row"
        cells = [cell.strip() for cell in row.group(1).strip(" |").split("|")]
        mape, base_mape = cells[1], cells[3]
        assert mape in words and base_mape in words, f"update the README's {name} numbers: {cells}"


def test_the_readme_quotes_the_current_calibration_gain():
    """The README's calibration sentence quotes the holdout 'mean over stacks' row of docs/calibration.md."""
    rows = re.findall(r"^\| \*\*mean over stacks\*\* \| \|(.*)$", TEXTS["docs/calibration.md"], re.M)
    assert len(rows) >= 2, "docs/calibration.md has no dev and holdout 'mean over stacks' rows"
    cells = [c.strip(" *") for c in rows[1].strip(" |").split("|")]
    uncalibrated, k4 = cells[0].split()[0], cells[3].split()[0]  # columns: uncalibrated, k=1, 2, 4, 8
    paragraph = next(p for p in README.split("\n\n") if "shardwise validate --calibrated" in p)
    assert uncalibrated in paragraph and k4 in paragraph, f"update the README's calibration sentence: {cells}"
