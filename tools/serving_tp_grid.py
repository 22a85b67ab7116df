"""TP(k) / TP(k/2) and pipeline serving throughput ratios at TensorRT-LLM's perf-overview settings (#37).

For each GPU, model and prompt/output length pair of the perf-overview tables (trtllm-bench's
offline max-throughput runs), every TP size the server holds is priced as `shardwise serve
--max-throughput --framework tensorrt-llm` prices it (in-flight batching, the KV cache kept full,
at most trtllm-bench's `max_batch_size`), and the ratio of one replica's generated tokens/s at TP k
against TP k/2 is printed, with the median per GPU and pair. Nothing is fitted here; the measured
ratios (#37's held-out tables) are not in the project.

    PYTHONPATH=src python tools/serving_tp_grid.py [--gpus l40s-8x,a100-pcie-8x] [--models llama3-70b]
        [--static | --burst N] [--pp] [--csv out.csv] [--against before.csv]

`--static` prices one full batch (`analyses.serving.at_max_batch`, as `validate inference` does)
instead of the in-flight simulation; `--burst N` sends N requests at once and counts every
generated token over the whole run, ramp and tail included, as trtllm-bench's throughput mode
reports it (`engines.inflight.Simulated.run_tokens_per_s`; the request count of each perf-overview
run is not in the project). `--pp` adds pipelines of 2, 4 and 8 stages: PP(k) / PP(1) against one
GPU's replica (tp=1) and PP(k) / TP(k) against TP on as many GPUs (docs/serving.md, "Pipelines at
the perf-overview settings"). `--against` prints each median beside the one of an earlier run's
`--csv` (the same cases), for a before/after of a model change.
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
import sys
from dataclasses import replace

# the perf-overview's ISL/OSL pairs (#37)
LENGTHS = ((128, 128), (128, 2048), (2048, 128), (500, 2000), (1000, 1000), (2048, 2048), (5000, 500), (20000, 2000))
# system preset -> weight precision TensorRT-LLM's tables run it in (A100 has no FP8: BF16)
SYSTEMS = {
    "l40s-8x": "fp8",
    "a100-pcie-8x": "bf16",
    "dgx-h100": "fp8",
    "dgx-h200": "fp8",
    "dgx-b200": "fp8",
    # other PCIe layouts (not in the default run): behind PCIe switches
    "l40s-8x-switch": "fp8",
    "a100-pcie-8x-direct": "bf16",
    "h100-pcie-8x-switch": "fp8",
}
DEFAULT_SYSTEMS = ("l40s-8x", "a100-pcie-8x", "dgx-h100", "dgx-h200", "dgx-b200")
MODELS = ("llama3-8b", "llama3-70b", "mixtral-8x7b", "llama3-405b")
TPS = (1, 2, 4, 8)
PPS = (2, 4, 8)  # with --pp: pipeline plans, against one GPU's replica (tp=1) and TP on as many GPUs


def replica_rates(
    model: str, system: str, weights: str, isl: int, osl: int, static: bool, burst: int = 0, pp: bool = False
) -> dict[str, float]:
    """Generated tokens/s of one replica of each plan that fits (`shardwise serve`'s pricing), by
    plan label ("tp=4", "pp=8"): every TP size, and with `pp` every pipeline depth of `PPS`."""
    from shardwise.analyses.serving import at_max_batch
    from shardwise.analyses.serving_scaling import whole_run_tokens_per_s
    from shardwise.engines.inflight import Traffic
    from shardwise.requests.serve import ServeRequest

    labels = [f"tp={t}" for t in TPS] + ([f"pp={p}" for p in PPS] if pp else [])
    plans = " ".join(f"--plan {label}" for label in labels)
    batching = "--batching static" if static else "--max-throughput"
    request = ServeRequest.from_argv(
        f"--model {model} --system {system} {plans} {batching} --framework tensorrt-llm "
        f"--weight-precision {weights} --kv-precision {weights} --input-len {isl} --output-len {osl}"
    )
    result = request.run()
    s = result.setting
    specs = {spec.label: spec for spec in s.specs}
    out = {}
    for label, est in result.rows:
        if not bool(est.fits_in_memory):
            continue
        dp = int(est.scenario.plan.dp)
        if burst:  # all replicas, each sent `burst` requests at once (dp a power of 2: / dp exact)
            rate = whole_run_tokens_per_s(s, specs[label], Traffic(rate_per_s=math.inf, requests=burst))
        else:
            if static:
                est = at_max_batch(est.scenario, replace(est.workload, batch=1))
            rate = float(est.throughput_tokens_per_s)
        out[label] = rate / dp
    return out


def ratio_pairs(pp: bool) -> list[tuple[str, str, str]]:
    """(pair name, the larger plan, the smaller or other plan) of every ratio printed."""
    pairs = [(f"TP{k}/TP{k // 2}", f"tp={k}", f"tp={k // 2}") for k in TPS[1:]]
    if pp:
        pairs += [(f"PP{k}/PP1", f"pp={k}", "tp=1") for k in PPS]
        pairs += [(f"PP{k}/TP{k}", f"pp={k}", f"tp={k}") for k in PPS]
    return pairs


def case(row: dict[str, object]) -> tuple[str, ...]:
    """One ratio's case (system, model, lengths, pair), as a run's rows or its --csv hold it."""
    return tuple(str(row[k]) for k in ("system", "model", "isl", "osl", "pair"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", default=",".join(DEFAULT_SYSTEMS))
    parser.add_argument("--models", default=",".join(MODELS))
    how = parser.add_mutually_exclusive_group()
    how.add_argument("--static", action="store_true")
    how.add_argument("--burst", type=int, default=0)
    parser.add_argument("--pp", action="store_true", help="also PP(k)/PP(1) and PP(k)/TP(k) (pp = 2, 4, 8)")
    parser.add_argument("--csv", default="")
    parser.add_argument("--against", default="", help="an earlier --csv: its medians beside these")
    args = parser.parse_args(argv)
    before: list[dict[str, str]] = []
    if args.against:
        try:
            with open(args.against, newline="", encoding="utf-8") as f:
                before = list(csv.DictReader(f))
        except OSError as e:
            print(f"--against: cannot read {args.against!r}: {e.strerror}", file=sys.stderr)
            return 2
    rows: list[dict[str, object]] = []
    for system in args.gpus.split(","):
        if system not in SYSTEMS:
            print(f"--gpus: {system!r} is not one of {', '.join(SYSTEMS)}", file=sys.stderr)
            return 2
        for model in args.models.split(","):
            for isl, osl in LENGTHS:
                rates = replica_rates(model, system, SYSTEMS[system], isl, osl, args.static, args.burst, args.pp)
                for pair, big_plan, small_plan in ratio_pairs(args.pp):
                    if big_plan in rates and small_plan in rates:
                        small, big = rates[small_plan], rates[big_plan]
                        rows.append(
                            {"system": system, "model": model, "isl": isl, "osl": osl, "pair": pair,
                             "small_tok_s": small, "big_tok_s": big, "ratio": big / small}
                        )  # fmt: skip
    for r in rows:
        print(f"{r['system']:14s} {r['model']:13s} {r['isl']:>5}/{r['osl']:<5} {r['pair']:9s} "
              f"{r['small_tok_s']:9.0f} -> {r['big_tok_s']:9.0f}  {r['ratio']:.2f}")  # fmt: skip
    print("\nmedian ratio per GPU and pair (cases, range)")
    for system in dict.fromkeys(str(r["system"]) for r in rows):
        for pair, _, _ in ratio_pairs(args.pp):
            xs = [float(r["ratio"]) for r in rows if r["system"] == system and r["pair"] == pair]  # type: ignore[arg-type]
            cases = {case(r) for r in rows if r["system"] == system and r["pair"] == pair}
            was = [float(r["ratio"]) for r in before if case(r) in cases]
            then = f", was {statistics.median(was):.2f} ({len(was)})" if was else ""
            if xs:
                spread = f"{min(xs):.2f}-{max(xs):.2f}"
                print(f"{system:14s} {pair}: {statistics.median(xs):.2f} ({len(xs)}, {spread}){then}")
    if args.csv:
        with open(args.csv, "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
