#!/usr/bin/env python3
"""Long-context training as shardwise prices it, beside the long-sequence rows it can read.

Two tables, no GPU and no network:

1. NVIDIA NeMo's `performance_long_sequence.md` rows with context parallelism (Llama 2 7B on DGX
   H100, NeMo 24.03; Llama 3 8B on DGX B200, NeMo 25.04; FP8; 4K to 1M tokens). `validate public`
   skips them ("layout incomplete": the table states no micro-batch, and on B200 a data-parallel
   size that does not multiply out). Here they are priced with micro-batch 1 and dp = GPUs / (tp
   pp cp), a diagnostic reading of the table, not a validated row: the error's trend with the
   sequence length is what it shows (how much of the step is attention), not its level.
2. torchtitan's Llama 3.1 8B on one DGX H100 with context parallelism (PyTorch's
   `context_parallel`, FP8 through torchao, torch.compile), 8K at cp 2 and 64K-262K at cp 8, under
   each recomputation mode, with the memory call: which mode can run at all.

    PYTHONPATH=src python tools/long_context_check.py
"""

from __future__ import annotations

from shardwise.analyses import public_moe
from shardwise.analyses.public_runs import measured_step_s, raw_rows, scenario_for, source_flops_per_step
from shardwise.engines.training import estimate_training_step
from shardwise.errors import SpecError
from shardwise.requests.training import TrainingRequest

NEMO_LONG = "performance_long_sequence"
TORCHTITAN_CASES = ((8192, 2, 4), (65536, 8, 1), (131072, 8, 1), (262144, 8, 1))  # seq, cp, global batch
RECOMPUTE = ("none", "selective", "full")


def nemo_rows() -> list[str]:
    """One line per NeMo long-sequence row with its layout (micro-batch 1 assumed)."""
    lines = []
    for raw in raw_rows():
        if NEMO_LONG not in raw["source"] or not raw["tp"]:
            continue  # the "without CP" columns publish no layout
        row = dict(public_moe.resolved(raw))
        n, tp, pp, cp = (int(row[k]) for k in ("num_gpus", "tp", "pp", "cp"))
        row["mbs"], row["dp"] = "1", str(n // (tp * pp * cp))
        head = f"{row['id']} {row['model']:10s} {row['system']:9s} {int(row['seq_len']) // 1024:5d}K tp{tp} cp{cp:<2d}"
        try:
            scn = scenario_for(row)
            est = estimate_training_step(scn)
        except SpecError as exc:
            lines.append(f"{head} not priced: {exc}")
            continue
        meas = measured_step_s(row, source_flops_per_step(row, scn, float(est.model_flops_per_step)))
        pred = float(est.step_time_s)
        lines.append(f"{head} published {meas:7.2f} s  predicted {pred:7.2f} s  {100 * (pred / meas - 1):+6.1f}%")
    return lines


def torchtitan_rows() -> list[str]:
    """One line per (sequence, recomputation) of torchtitan's long-context Llama 3.1 8B."""
    lines = []
    for seq, cp, gbs in TORCHTITAN_CASES:
        for mode in RECOMPUTE:
            req = TrainingRequest(
                model="llama3.1-8b",
                system="dgx-h100",
                cp=cp,
                seq_len=seq,
                global_batch=gbs,
                framework="torchtitan-compile",
                precision="fp8",
                recompute=mode,
            )
            est = estimate_training_step(req.scenario())
            fits = "fits" if bool(est.fits_in_memory) else "does not fit"
            lines.append(f"{seq // 1024:4d}K cp{cp} recompute {mode:9s} {float(est.step_time_s):7.2f} s  {fits}")
    return lines


def main() -> None:
    print("NeMo performance_long_sequence.md, with CP (micro-batch 1 assumed):")
    print("\n".join(nemo_rows()))
    print("\ntorchtitan Llama 3.1 8B, 8 H100, FP8, torch.compile:")
    print("\n".join(torchtitan_rows()))


if __name__ == "__main__":
    main()
