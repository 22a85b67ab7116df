"""A serving plan's side answers (`ServeResult`): what would make a plan that does not fit fit, and
each plan's 80% interval width."""

from __future__ import annotations

from typing import Any

from shardwise.errors import SpecError
from shardwise.requests.serve_plans import scenario

# how a serving interval's basis begins where no published serving run measured the case (the
# interval's number then says "unmeasured", `cli.serve_report`)
UNMEASURED = "unmeasured: "
# narrower weight formats a fit hint may suggest, in the order it tries them within one width
NARROWER = ("fp8", "int8", "q8_0", "int4", "q4_k", "q4_0", "nvfp4", "mxfp4")


def _width(precision: str) -> float:
    """A weight format's class: 2, 1 or 0.5 bytes an element (`specs.serving.STORAGE_BYTES`, scales
    rounded away: q8_0's 34 bytes per 32 is an 8-bit format)."""
    from shardwise.specs.serving import STORAGE_BYTES

    return round(2.0 * STORAGE_BYTES[precision]) / 2.0


def fit_hint(s: Any, est: Any) -> str:
    """What would make a plan that does not fit fit: narrower weights or KV cache, or more TP or PP
    on the same GPUs (the first few that do, cheapest change first)."""
    from dataclasses import replace

    from shardwise.engines.engine_formats import weight_formats_on
    from shardwise.engines.serving import estimate_serving
    from shardwise.loaders import parse_plan_spec

    wl, plan = est.workload, est.scenario.plan
    tp, pp = int(plan.tp), int(plan.pp)
    tries: list[tuple[str, Any, Any]] = []
    # narrower weights the engine runs on this GPU (review 39: llama.cpp was told fp8, which it refuses):
    # of each narrower width, the first format `engines.engine_formats` allows
    runs = [f for f in NARROWER if f in weight_formats_on(wl.engine, s.cluster.gpu)]
    for width in sorted({_width(f) for f in runs if _width(f) < _width(wl.weight_precision)}, reverse=True):
        w = next(f for f in runs if _width(f) == width)
        tries.append((f"--weight-precision {w}", f"tp={tp},pp={pp}", replace(wl, weight_precision=w)))
    from shardwise.engines.engine_formats import kv_formats_on

    if wl.kv_precision in ("bf16", "fp16") and "fp8" in kv_formats_on(wl.engine, s.cluster.gpu, s.model):
        tries.append(("--kv-precision fp8", f"tp={tp},pp={pp}", replace(wl, kv_precision="fp8")))
    tries += [
        (f"tp={tp * 2},pp={pp}", f"tp={tp * 2},pp={pp}", wl),
        (f"tp={tp},pp={pp * 2}", f"tp={tp},pp={pp * 2}", wl),
    ]
    found = []
    for text, plan_text, workload in tries:
        try:
            scn = scenario(s.model, s.cluster, parse_plan_spec(plan_text), s.stages, s.workload.engine)
            other = estimate_serving(scn, workload)
        except SpecError:
            continue
        # the batch asked must fit (review 35: a static batch of 5,000 was told fp8 weights would fit
        # it, which hold 2,343); in flight the requests beyond the KV cache wait, so one must fit
        inflight = getattr(est, "batching", "static") == "inflight"
        if int(other.max_batch) >= 1 if inflight else bool(other.fits_in_memory):
            found.append(text)
        if len(found) == 2:
            break
    return " or ".join(found)


def spreads(rows: list[tuple[str, Any]], calibration: str | None) -> dict[str, tuple[float, str]]:
    """Each plan's 80% interval width (log sd) and where it comes from: a calibration fitted on
    serving runs (its spread and the plan's sensitivity to the fitted parameters, for the time per
    output token), else the serving model's measured spread."""
    from shardwise.calibration.spreads import model_family, serving_basis, serving_log_sd, serving_unmeasured
    from shardwise.requests.build import load_calibration

    cal = load_calibration(calibration)
    if cal is None or not cal.serving_runs:
        out = {}
        for label, est in rows:  # validate inference's rows are all dense, on SERVING_GPUS
            gpu, family = est.scenario.cluster.gpu.name, model_family(est.scenario.model)
            basis = serving_basis(est.workload.engine, moe=bool(family))
            unmeasured = serving_unmeasured(gpu, family)
            basis = f"{UNMEASURED}{unmeasured}; {basis}" if unmeasured else basis
            if cal is not None:
                basis += f" ({cal.path} has no serving runs)"
            out[label] = (serving_log_sd(gpu, family), basis)
        return out
    from shardwise.calibration.cases import ServingCase
    from shardwise.calibration.intervals import spread

    cases = [ServingCase(est.scenario, est.workload, "tpot_s") for _, est in rows]
    # (the GPUs the calibration's runs measured, training and serving alike: the store keeps one list)
    fitted = spread(cases, cal.fit, f"calibration {cal.path} ({cal.serving_runs} serving run(s))", tuple(cal.gpus))
    return {label: (float(x), fitted.basis) for (label, _), x in zip(rows, fitted.log_sd, strict=True)}
