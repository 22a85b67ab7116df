"""The `--vary` names the command pages list are the ones the CLI accepts (review 36: crossover.md
left out peak_flops and hbm_bandwidth), and varying the micro-batch is refused with the fix."""

import re
from pathlib import Path

import pytest

from shardwise.analyses.experiment import VARIABLES
from shardwise.analyses.vary import parse_vary
from shardwise.errors import SpecError

ROOT = Path(__file__).resolve().parent.parent


def listed_names(page: str) -> list[str]:
    """The names at the head of the page's `--vary NAME=VALUES` bullet, before its first "(" or "as `LO"."""
    text = (ROOT / "docs" / "commands" / page).read_text(encoding="utf-8")
    bullet = text[text.index("- `--vary NAME=VALUES`") :].split("\n- ", 1)[0]
    head = re.split(r"\(|as `LO", bullet.split(":", 1)[1], maxsplit=1)[0]
    return re.findall(r"`([a-z_]+)`", head)


@pytest.mark.parametrize("page", ["crossover.md", "sweep.md"])
def test_each_page_lists_every_vary_name_the_cli_accepts(page):
    assert listed_names(page) == list(VARIABLES)


@pytest.mark.parametrize("text", ["micro_batch=1,2", "micro-batch=1..4", "mb=2"])
def test_varying_the_micro_batch_says_to_vary_the_batch(text):
    with pytest.raises(SpecError, match=r"m = batch / micro-batch.*--vary batch="):
        parse_vary(text)
