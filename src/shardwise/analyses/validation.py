"""Predicted against published: the accuracy tables of the README.

Published runs live in `data/training_measured.csv` (each row with its
source) and how each was executed in `data/validation_runs.yaml`. One set of constants
serves every row: nothing here is fitted per run.

Tables:
- `narayanan21_table1`: Narayanan et al. 2021 Table 1, TFLOP/s per GPU as the paper counts
  them (Eq. 3: GEMM FLOPs with the recomputation forward pass), i.e. our hardware TFLOP/s.
- `korthikanti22_table5`: Korthikanti et al. 2022 Table 5, seconds per iteration.
- `korthikanti22_table4`: Korthikanti et al. 2022 Table 4, forward and backward time of one
  GPT-22B layer at tp = 8 (a kernel-level check of the layer model).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import numpy as np

from shardwise import loaders
from shardwise.engines.training import estimate_training_step, layer_times_s
from shardwise.specs import Plan, Scenario

TABLES = ("narayanan21_table1", "korthikanti22_table5", "korthikanti22_table4")
CITATIONS = {
    "narayanan21_table1": "Narayanan et al. 2021, Efficient Large-Scale Language Model Training on GPU Clusters "
    "Using Megatron-LM (SC21, arXiv 2104.04473), Table 1",
    "korthikanti22_table5": "Korthikanti et al. 2022, Reducing Activation Recomputation in Large Transformer "
    "Models (arXiv 2205.05198), Table 5",
    "korthikanti22_table4": "Korthikanti et al. 2022 (arXiv 2205.05198), Table 4",
}


@dataclass(frozen=True)
class ValidationRow:
    run_id: str
    table: str
    label: str  # model and plan, short
    metric: str  # what was measured, with its unit
    predicted: float
    measured: float
    source: str

    @property
    def error(self) -> float:
        """Signed relative error (predicted - measured) / measured."""
        return (self.predicted - self.measured) / self.measured


@cache
def measured_runs() -> dict[str, dict[str, str]]:
    text = resources.files("shardwise.data").joinpath("training_measured.csv").read_text(encoding="utf-8")
    return {row["id"]: row for row in csv.DictReader(text.splitlines())}


@cache
def _run_config() -> dict[str, Any]:
    path = resources.files("shardwise.data").joinpath("validation_runs.yaml")
    with resources.as_file(path) as p:
        return loaders.load_yaml(p)


def request_for(run_id: str) -> Any:
    """The `TrainingRequest` of a published run: the table's row and the run's stated settings
    (`data/validation_runs.yaml`), with the request layer's defaults for the rest."""
    from shardwise.requests.training import TrainingRequest

    row = measured_runs()[run_id]
    cfg = _run_config()
    extra = {**cfg["defaults"][row["group"]], **cfg["runs"][run_id]}
    n_gpus, per_node = int(row["num_gpus"]), int(row["gpus_per_node"])
    return TrainingRequest.from_mapping(
        {
            "nodes": max(1, n_gpus // per_node),
            "tp": row["tp"],
            "pp": row["pp"],
            "dp": row["dp"],
            "global_batch": row["global_batch_seqs"],
            "vpp": row.get("vpp") or 1,
            "micro_batch": row["micro_batch"].split()[0],
            "zero": 0,  # the Selene runs predate Megatron's distributed optimizer
            **extra,
        },
        run_id,
    )


def scenario_for(run_id: str) -> Scenario:
    """The Scenario of a published run: its model, cluster and plan."""
    return request_for(run_id).scenario()


def plan_label(p: Plan, sep: str = ", ") -> str:
    """'tp8 pp8 dp1, v3, mb1, selective +sp' (with `sep` between the parts)."""
    parts = [f"tp{int(np.asarray(p.tp))} pp{int(np.asarray(p.pp))} dp{int(np.asarray(p.dp))}"]
    if int(np.asarray(p.cp)) > 1:
        parts[0] += f" cp{int(np.asarray(p.cp))}"
    if int(p.vpp) > 1:
        parts.append(f"v{int(p.vpp)}")
    parts.append(f"mb{int(np.asarray(p.micro_batch))}")
    parts.append(p.recompute.label + (" +sp" if bool(p.sequence_parallel) else ""))
    return sep.join(parts)


def _label(scn: Scenario) -> str:
    return f"{scn.model.name}, {int(np.asarray(scn.plan.num_gpus))} GPUs, {plan_label(scn.plan)}"


def validate(table: str) -> list[ValidationRow]:
    """Predicted and measured figures of every run of one table."""
    if table not in TABLES:
        raise ValueError(f"unknown table {table!r}; choose one of {', '.join(TABLES)}")
    if table == "korthikanti22_table4":
        return _table4()
    rows = []
    for run_id, row in measured_runs().items():
        if row["group"] != table:
            continue
        scn = scenario_for(run_id)
        est = estimate_training_step(scn)
        source = f"{row['source']}, {row['locator'] or ''}".strip(", ")
        if table == "narayanan21_table1":
            rows.append(
                ValidationRow(
                    run_id,
                    table,
                    _label(scn),
                    "TFLOP/s per GPU (Eq. 3)",
                    float(est.hardware_tflops_per_gpu),
                    float(row["tflops_per_gpu"]),
                    source,
                )
            )
        else:
            rows.append(
                ValidationRow(
                    run_id,
                    table,
                    _label(scn),
                    "iteration time (s)",
                    float(est.step_time_s),
                    float(row["step_time_s"]),
                    source,
                )
            )
    return rows


def _table4() -> list[ValidationRow]:
    """One GPT-22B layer at tp = 8, micro-batch 4 (Korthikanti et al. 2022 Table 4)."""
    base = scenario_for("KOR22-T5-1")
    settings = {  # row id -> (recompute, sequence parallel)
        "KOR22-T4-1": ("none", False),
        "KOR22-T4-2": ("none", True),
        "KOR22-T4-3": ("full", False),
        "KOR22-T4-4": ("selective", False),
        "KOR22-T4-5": ("selective", True),
    }
    rows = []
    for run_id, (rc, sp) in settings.items():
        row = measured_runs()[run_id]
        plan = base.plan.with_(recompute=rc, sequence_parallel=sp)
        fwd_s, bwd_s = layer_times_s(Scenario(base.model, base.cluster, plan))
        # The notes column reads "forward 7.7 ms, backward 11.9 ms, ..."
        notes = row["notes"].replace(",", " ").split()
        fwd_meas, bwd_meas = float(notes[notes.index("forward") + 1]), float(notes[notes.index("backward") + 1])
        source = f"{row['source'] or 'Korthikanti et al. 2022'} Table 4"
        label = f"gpt-22b layer, tp8 mb4, {row['recompute']}"
        for suffix, predicted, measured in (("fwd", fwd_s, fwd_meas), ("bwd", bwd_s, bwd_meas)):
            phase = "forward" if suffix == "fwd" else "backward"
            rows.append(
                ValidationRow(
                    f"{run_id}-{suffix}",
                    "korthikanti22_table4",
                    f"{label}, {phase}",
                    "layer time (ms)",
                    float(predicted) * 1e3,
                    measured,
                    source,
                )
            )
    return rows


def mean_absolute_error(rows: list[ValidationRow]) -> float:
    return float(np.mean([abs(r.error) for r in rows]))
