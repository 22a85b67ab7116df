"""Shared fixtures and Hypothesis strategies (one place, as attrs does)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import strategies as st

from shardwise import presets
from shardwise.specs import Cluster, Model, Plan, Scenario


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The files with the most tests marked `slow` first, then those with the most tests (what
    xdist's --loadscope-reorder did alone; pyproject turns it off for this order): a worker takes
    one file at a time (--dist loadfile), and a long file taken last would finish alone."""
    from collections import Counter

    slow = Counter(item.path for item in items if item.get_closest_marker("slow"))
    count = Counter(item.path for item in items)
    items.sort(key=lambda item: (-slow[item.path], -count[item.path]))  # stable: a file's own order kept


@pytest.fixture(autouse=True, scope="session")
def _columns() -> None:
    """Output to a pipe is COLUMNS wide (`cli.render.piped_width`): 80, as pytest-xdist's workers
    set it, so a test reads the same wrapped lines under -n 0 as under -n 2."""
    import os

    os.environ.setdefault("COLUMNS", "80")


@pytest.fixture(autouse=True, scope="session")
def _reuse_freed_memory() -> None:
    """What the `shardwise` command does at start (`shardwise.allocator`): numpy's temporaries take
    freed heap memory instead of fresh pages, each a page fault and a zeroing. It changes no result
    (tests/test_allocator.py); without it a worker ran the library at glibc's defaults until its first
    test that ran a command through `cli`, so a file's speed depended on what ran before it."""
    from shardwise.allocator import reuse_freed_memory

    reuse_freed_memory()


@pytest.fixture()
def cli(capsys: pytest.CaptureFixture[str]):
    """Run the `shardwise` entry point in-process: cli([...]) -> (exit code, stdout, stderr)."""
    from shardwise.cli import main

    def run(args: list[str]) -> tuple[int, str, str]:
        code = 0
        try:
            main(args)
        except SystemExit as exc:
            code = int(exc.code or 0)
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


@pytest.fixture(scope="session")
def gpt3() -> Model:
    return presets.model("gpt3-175b")


@pytest.fixture(scope="session")
def dgx_a100_8() -> Cluster:
    return presets.system("dgx-a100", nodes=8)


@pytest.fixture()
def gpt3_scenario(gpt3: Model, dgx_a100_8: Cluster) -> Scenario:
    plan = Plan(tp=8, pp=8, dp=1, global_batch=64, micro_batch=1, recompute="full")
    return Scenario(gpt3, dgx_a100_8, plan)


# Plans for a 96-layer, 32-head model on 64 GPUs (8 nodes of 8): every (tp, pp) split with
# tp in a node, and batch settings that keep the plan valid.
tp_values = st.sampled_from([1, 2, 4, 8])
pp_values = st.sampled_from([1, 2, 4, 8])
micro_batches = st.sampled_from([1, 2, 4])
recompute_modes = st.sampled_from(["none", "selective", "full"])
schedules = st.sampled_from(["gpipe", "1f1b"])


@st.composite
def small_plans(draw: st.DrawFn, gpus: int = 64) -> Plan:
    tp, pp = draw(tp_values), draw(pp_values)
    dp = gpus // (tp * pp)
    mb = draw(micro_batches)
    m = draw(st.integers(1, 16))
    return Plan(
        tp=tp,
        pp=pp,
        dp=dp,
        micro_batch=mb,
        global_batch=dp * mb * m,
        recompute=draw(recompute_modes),
        schedule=draw(schedules),
        sequence_parallel=draw(st.booleans()) and tp > 1,
        zero_stage=draw(st.integers(0, 3)),
    )


@pytest.fixture
def small_hf_config(tmp_path: Path) -> Path:
    """A Hugging Face config.json of a small Llama (16 layers, hidden 2048, grouped-query attention)."""
    import json

    path = tmp_path / "config.json"
    path.write_text(
        json.dumps(
            {
                "model_type": "llama",
                "hidden_size": 2048,
                "num_hidden_layers": 16,
                "num_attention_heads": 16,
                "num_key_value_heads": 8,
                "intermediate_size": 8192,
                "vocab_size": 32000,
                "max_position_embeddings": 4096,
            }
        )
    )
    return path
