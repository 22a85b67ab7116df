"""tools/calibration_showcase.py: the split of one public stack into the runs to calibrate on (small
jobs) and the runs to predict (large ones), and the example CSVs of docs/calibration.md's worked
example, which must be what the tool writes from the public table."""

from pathlib import Path

import pytest

from script_module import load_script
from shardwise.calibration.runs import read_runs

ROOT = Path(__file__).resolve().parent.parent
tool = load_script("tools/calibration_showcase.py")


def test_the_split_is_by_gpu_count_and_keeps_each_run_once():
    rows = tool.public_rows()
    for name, candidate in tool.CANDIDATES.items():
        fit, held = tool.split(candidate, rows)
        assert fit and held, name
        assert max(int(r["num_gpus"]) for r in fit) <= candidate.fit_max_gpus < min(int(r["num_gpus"]) for r in held)
        keys = [tuple(r[c] for c in tool.SAME_RUN) for r in fit + held]
        assert len(keys) == len(set(keys)), name  # `calibrate` refuses a run given twice
        assert all(candidate.source in r["source"] and r["system"] == candidate.system for r in fit + held)


def test_a_run_published_twice_is_kept_once():
    """The public table repeats a run that two releases of one README list: the split keeps the first."""
    rows = tool.public_rows()
    candidate = tool.CANDIDATES["dgxc-llama3.1-70b-h100"]
    mine = [r for r in rows if candidate.source in r["source"] and r["system"] == candidate.system]
    kept = tool.rows_of(candidate, rows)
    assert len(kept) < len(mine)
    assert {r["id"] for r in kept} <= {r["id"] for r in mine}


@pytest.mark.parametrize(
    ("name", "fit_gpus", "held_gpus"),
    [
        ("maxtext-h100", {64: 2, 128: 4}, {256: 4, 512: 4, 1024: 4, 2048: 4}),
        ("dgxc-llama3.1-8b-h100", {8: 4, 16: 4, 32: 4}, {64: 4, 128: 4}),
    ],
)
def test_the_example_csvs_are_what_the_tool_writes(tmp_path, name, fit_gpus, held_gpus):
    """examples/calibration/NAME_*.csv (docs/calibration.md's worked example, dgxc Llama 3.1 8B, and
    the MaxText runs it names): the small runs to fit, the large ones to predict, read by
    `calibrate` as they stand (a step time each, grouped by GPU count)."""
    tool.main([name, "--write", str(tmp_path)])
    for part, gpus in (("fit", fit_gpus), ("held_out", held_gpus)):
        shipped = ROOT / "examples" / "calibration" / f"{name}_{part}.csv"
        assert shipped.read_text(encoding="utf-8") == (tmp_path / shipped.name).read_text(encoding="utf-8")
        runs = read_runs(shipped)
        counts: dict[int, int] = {}
        for r in runs:
            counts[int(r.scenario.cluster.num_gpus)] = counts.get(int(r.scenario.cluster.num_gpus), 0) + 1
        assert counts == gpus
        assert {r.group for r in runs} == {f"{g} GPUs" for g in gpus}
        assert all(r.metric == "step_time_s" and r.measured > 0 for r in runs)


def test_each_run_written_is_priced_as_validate_public_prices_it(tmp_path):
    """calfix: the MaxText runs were written without their remat policies (and other stacks' runs
    without their hybrid-sharding group, network or kernels), so `calibrate` priced other runs than
    `validate public` did. Every candidate's run, as written, has validate public's step and
    measurement."""
    from shardwise.analyses.public_validation import validate_public
    from shardwise.engines.training import estimate_training_step

    public = {p.run_id: p for p in validate_public()}
    rows = tool.public_rows()
    for name, candidate in tool.CANDIDATES.items():
        fit, held = tool.split(candidate, rows)
        path = tmp_path / f"{name}.csv"
        tool.write(path, fit + held)
        for run in read_runs(path):
            p = public[run.run_id]
            step = float(estimate_training_step(run.scenario).step_time_s)
            assert step == pytest.approx(p.predicted_step_s, rel=1e-9), (name, run.run_id)
            assert run.measured == pytest.approx(p.measured_step_s, rel=1e-9), (name, run.run_id)


def test_the_maxtext_runs_are_written_with_their_remat_policies():
    """dgxc-benchmarking's MaxText launch (`public_stacks.JAX_LAUNCH_FACTS`): Llama 2 70B
    save_dot_except_mlpwi (BF16) and save_dot_except_mlp (FP8), Llama 3 70B save_qkv_proj."""
    runs = {
        r.run_id: r
        for part in ("fit", "held_out")
        for r in read_runs(ROOT / "examples" / "calibration" / f"maxtext-h100_{part}.csv")
    }
    policy = {
        (r.scenario.model.name, str(r.scenario.plan.precision)): r.scenario.plan.selective_policy for r in runs.values()
    }
    assert all(r.scenario.plan.recompute.name == "SELECTIVE" for r in runs.values())
    assert policy == {
        ("llama2-70b", "bf16"): "save_dot_except_mlpwi",
        ("llama2-70b", "fp8"): "save_dot_except_mlp",
        ("llama3-70b", "bf16"): "save_qkv_proj",
        ("llama3-70b", "fp8"): "save_qkv_proj",
    }
