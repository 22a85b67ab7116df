"""What the commands write holds for any valid configuration: `predict --json` (every number
finite, the units its keys name, the parts that add up adding up, its `command` giving its
numbers again) and the CSV files of `sweep -o` and `plan --csv` (the columns
docs/commands/sweep.md and plan.md name, each row's terms adding to its time).
"""

from __future__ import annotations

import csv
import io
import json
import math
from typing import Any

import numpy as np
import pytest

from invariant_cases import training_cases


def _strict_json(text: str) -> Any:
    """JSON with NaN or Infinity refused (Python's json takes them by default)."""

    def refuse(word: str) -> None:
        raise AssertionError(f"{word} in the JSON")

    return json.loads(text, parse_constant=refuse)


def _leaves(x: Any, path: str = "") -> list[tuple[str, Any]]:
    if isinstance(x, dict):
        return [leaf for k, v in x.items() for leaf in _leaves(v, f"{path}.{k}")]
    if isinstance(x, list):
        return [leaf for i, v in enumerate(x) for leaf in _leaves(v, f"{path}[{i}]")]
    return [(path, x)]


def _unit_check(path: str, value: Any) -> str | None:
    """A number is finite; one under a key in seconds or bytes (the unit in its name, or in the
    name of its mapping: `breakdown_s`, `memory_bytes`) is not negative."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if not math.isfinite(value):
        return f"{path} = {value}"
    parts = path.lstrip(".").split(".")
    named = [p for p in parts if p.endswith(("_s", "_bytes", "_bytes_per_s", "_flops_per_s"))]
    if named and value < 0 and not parts[-1].startswith("bias"):
        return f"{path} = {value} < 0"
    return None


@pytest.mark.slow  # 40 commands in-process
def test_predict_json_is_finite_in_its_units_and_adds_up(cli):
    from shardwise.requests import PredictRequest

    bad = []
    for case in training_cases(41, 40):
        code, out, err = cli(["predict", *case.request.to_argv(), "--json"])
        assert code == 0, f"{case}: {err}"
        d = _strict_json(out)
        why = [w for path, v in _leaves(d) if (w := _unit_check(path, v))]
        step = d["step_time_s"]
        if abs(sum(d["breakdown_s"].values()) - step) > 1e-9 * step:
            why.append(f"breakdown_s adds to {sum(d['breakdown_s'].values())}, step {step}")
        memory = d["memory_bytes"]
        summed = sum(v for k, v in memory.items() if k not in ("total", "cached"))  # cached: beside the total
        if abs(summed - memory["total"]) > 1e-9 * memory["total"]:
            why.append(f"memory_bytes do not add to their total: {memory}")
        if d["fits_in_memory"] != (memory["total"] <= d["gpu_memory_bytes"]):
            why.append("fits_in_memory disagrees with memory_bytes.total and gpu_memory_bytes")
        if not d["step_time_s_low"] <= step <= d["step_time_s_high"]:
            why.append(f"the interval {d['step_time_s_low']}..{d['step_time_s_high']} misses {step}")
        plan, model = d["scenario"]["plan"], d["scenario"]["model"]
        tokens = plan["global_batch"] * model["seq_len"] / step
        if not np.isclose(d["tokens_per_s"], tokens, rtol=1e-12):
            why.append(f"tokens_per_s {d['tokens_per_s']} is not global batch x seq_len / step = {tokens}")
        if not 0 < d["mfu"] <= d["hfu"] <= 1:
            why.append(f"mfu {d['mfu']}, hfu {d['hfu']}")
        again = PredictRequest.from_argv(d["command"]).run()  # the command gives the same numbers
        # the JSON's bytes are whole (walkthrough8): the estimate's total, rounded
        if again.step_time_s != step or round(float(again.estimate.memory.total_bytes)) != memory["total"]:
            why.append(f"its command gives {again.step_time_s} s, {float(again.estimate.memory.total_bytes)} B")
        if why:
            bad.append(f"{case}: {'; '.join(why)}")
    assert not bad, "\n".join(bad[:10])


def test_predict_json_of_a_few_cases(cli):
    """The same as the slow test above on three cases: finite, in its units, adding up."""
    for case in training_cases(41, 3):
        code, out, err = cli(["predict", *case.request.to_argv(), "--json"])
        assert code == 0, err
        d = _strict_json(out)
        assert not [w for path, v in _leaves(d) if (w := _unit_check(path, v))]
        assert sum(d["breakdown_s"].values()) == pytest.approx(d["step_time_s"], rel=1e-9)


def _rows(text: str) -> tuple[list[str], list[dict[str, str]]]:
    reader = csv.DictReader(io.StringIO(text))
    rows = list(reader)
    return list(reader.fieldnames or []), rows


TERMS = (
    "compute", "tp_comm", "ep_comm", "offload", "pp_p2p", "pp_bubble", "dp_comm", "embedding_sync", "optimizer",
    "overhead",
)  # fmt: skip


@pytest.mark.parametrize(
    "argv",
    [
        ["--vary", "batch=1..32:6", "--vary", "bandwidth=10GB/s..600GB/s:4"],
        ["--vary", "layers=8,24,96", "--system", "dgx-h100", "--plan", "tp=8", "--plan", "tp=2,pp=4"],
    ],
)
def test_sweep_csv_has_the_documented_columns_and_its_terms_add_up(cli, tmp_path, argv):
    """docs/commands/sweep.md: a row per link and grid point with each plan's `time_s[PLAN]`
    (and `time_s_low`, `time_s_high`: docs/calibration.md), `fits_in_memory[PLAN]`, the `winner_plan` and its
    `margin`; with --breakdown each plan's `TERM_s[PLAN]`, which add up to `time_s[PLAN]`."""
    path = tmp_path / "grid.csv"
    code, _, err = cli(["sweep", *argv, "--breakdown", "-o", str(path), "--no-progress"])
    assert code == 0, err
    header, rows = _rows(path.read_text())
    plans = [h[len("time_s[") : -1] for h in header if h.startswith("time_s[")]
    assert plans and rows
    assert all(None not in row and len(row) == len(header) for row in rows)  # as many cells as columns
    for plan in plans:
        for column in ("time_s_low", "time_s_high", "fits_in_memory", *(f"{t}_s" for t in TERMS)):
            assert f"{column}[{plan}]" in header, column
    assert "winner_plan" in header and "margin" in header and "winner" not in header
    for row in rows:
        for plan in plans:
            if row[f"time_s[{plan}]"] == "":  # a plan invalid at this point: empty, as documented
                assert row[f"time_s_low[{plan}]"] == row[f"time_s_high[{plan}]"] == ""
                continue
            time = float(row[f"time_s[{plan}]"])
            terms = sum(float(row[f"{t}_s[{plan}]"]) for t in TERMS)
            assert terms == pytest.approx(time, rel=1e-9), (plan, row)  # written in full (tables.cell)
            assert float(row[f"time_s_low[{plan}]"]) <= time <= float(row[f"time_s_high[{plan}]"])
        assert row["winner_plan"] in plans or (row["winner_plan"] == "" and row["margin"] == "")


def test_plan_csv_rows_add_up_and_are_finite(cli, tmp_path):
    """`plan --csv` (docs/commands/plan.md): every evaluated plan, one row each; its time terms
    (`compute_s` ... `overhead_s`) add to `step_time_s`, `tokens_per_s` is `tokens_per_s_per_gpu`
    x `gpus`, every number finite."""
    path = tmp_path / "plans.csv"
    argv = ["plan", "--model", "llama3-8b", "--system", "dgx-h100", "--nodes", "2", "--global-batch", "128"]
    code, _, err = cli([*argv, "--csv", str(path)])
    assert code == 0, err
    header, rows = _rows(path.read_text())
    for column in ("tp", "pp", "dp", "step_time_s", "tokens_per_s", "memory_bytes", "fits_in_memory"):
        assert column in header
    assert len(rows) > 10
    numeric = [h for h in header if h.endswith(("_s", "_bytes", "_per_gpu", "mfu")) or h in ("tp", "pp", "dp", "gpus")]
    for row in rows:
        assert None not in row and len(row) == len(header)  # no row with more cells than its header
        assert all(math.isfinite(float(row[k])) for k in numeric), row
        assert row["fits_in_memory"] in ("true", "false")
        terms = sum(float(row[f"{t}_s"]) for t in TERMS)
        assert terms == pytest.approx(float(row["step_time_s"]), rel=1e-5)
        per_gpu = float(row["tokens_per_s_per_gpu"]) * float(row["gpus"])
        assert per_gpu == pytest.approx(float(row["tokens_per_s"]), rel=1e-5)
