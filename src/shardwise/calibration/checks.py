"""What a calibration's fitted values mean on the runs' hardware, and what to check before using it.

- `physical`: a fitted scale's absolute value on each GPU the runs name, beside the factor: the GEMM
  efficiency as a share of the GPU's dense peak, the sustained HBM bandwidth in TB/s beside the
  datasheet's, a link's sustained rate per GPU in GB/s (across servers at
  `parameters.REFERENCE_NODES` servers), so that a factor which means a physically odd machine (HBM
  at 0.41 x is an H100 sustaining 1.2 TB/s of its 3.35, below an A100's 1.4 of 1.6) shows.
- `at_limit`: a fitted value at a limit of its physical range (`Parameter.low .. high`, or below
  `high` the runs' hardware's ceiling, `Fit.ceilings`: HBM at most the datasheet's), within
  `AT_LIMIT_SDS` of its prior sd. The fit is bounded there, so the runs wanted more than the model
  allows: the value is not a measurement
  of the quantity but a sign that the runs are not what the model was told (a unit, a layout, a
  system) or that the parameter is the wrong explanation. Every prediction it touches then moves
  by the bound, not by what was measured (review 33: inter_node_bandwidth_scale at its 0.05 floor
  moved Llama 3 70B on 8 servers from 15.0 to 23.2 s).
- `misfit_notes`: runs the fit still misses by more than 3 calibrated spreads.
- `mixture_notes`: runs that share one calibration but not one GPU, or not one model family. They
  are fitted (every parameter is a physical quantity relative to the presets, which holds on any
  GPU and model), with a note: one GEMM scale for two GPUs says both stacks sit equally far from
  their presets, and the model misses mixtures of experts and hybrid models by more than dense
  transformers (`spreads.FAMILY_LOG_SD`), which a shared scale then partly absorbs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shardwise.calibration.parameters import BY_NAME, apply
from shardwise.calibration.spreads import Z80

# A fitted value within this many of its parameter's prior sds of a limit (in the fitted scale, u:
# the log of a scale, the seconds of an overhead, the exponent itself) is "at" it: it predicts what
# the limit predicts to within 2% of what the prior allows, so the bound, not the runs, set it (the
# solver, started inside, stops short of a binding bound by less: docs/calibration.md's MaxText
# network exponent stopped at 0.0003, 0.003 sd from its floor). The prior sd is
# each parameter's own scale; a share of the range is not one for an additive parameter, whose
# range is wide for safety (step_overhead_s: 0-60 s with a 0.5 s prior, where 0.1% of the range
# called 0.049 s, a tenth of a prior sd from 0, "at the lower limit").
AT_LIMIT_SDS = 0.02
# A run the fit still misses by more than this many calibrated spreads (`spreads.NOISE_LOG_SD`,
# 0.05: 3 x is 16%) is one the parameters do not explain (1 in 370 of a normal's draws).
MISFIT_SDS = 3.0
# The parameters that belong to one GPU (and its software stack), not to the network.
PER_GPU = ("matmul_efficiency_scale", "memory_bandwidth_scale", "gemm_half_rate_tokens")


def at_limit(fit: Any) -> dict[str, str]:
    """The fitted parameters at a limit of their range: name -> "lower" or "upper"."""
    out = {}
    for name in fit.fitted:
        p = BY_NAME[name]
        u, margin = p.u(fit.values[name]), AT_LIMIT_SDS * p.prior_sd
        if u <= p.low + margin:
            out[name] = "lower"
        elif u >= _upper(fit, name) - margin:
            out[name] = "upper"
    return out


def _upper(fit: Any, name: str) -> float:
    """The top of a parameter's range in `fit` (u space): a fit's hardware ceiling where it has one
    (`Fit.upper`: HBM at the datasheet), else the parameter's own."""
    upper = getattr(fit, "upper", None)
    return upper(name) if upper is not None else BY_NAME[name].high


def interval_at_limit(fit: Any) -> dict[str, str]:
    """The fitted parameters whose 80% interval reaches a limit of their range (the runs bound them
    on that side no better than the range does): name -> "lower", "upper" or "both"; a value at
    its limit (`at_limit`) is said there, not here."""
    out = {}
    values = at_limit(fit)
    for name in fit.fitted:
        if name in values:
            continue
        p = BY_NAME[name]
        u, reach = p.u(fit.values[name]), Z80 * fit.u_sd(name)  # as `Fit.interval80`, before its clip
        low, high = u - reach <= p.low, u + reach >= _upper(fit, name)
        if low or high:
            out[name] = "both" if low and high else "lower" if low else "upper"
    return out


def limit_notes(fit: Any) -> list[str]:
    """One line per fitted value at a limit of its range (`at_limit`)."""
    out = []
    for name, side in at_limit(fit).items():
        p = BY_NAME[name]
        unit = {"x": " x", "s": " s", "1": ""}.get(p.unit, f" {p.unit}")
        want = "less" if side == "lower" else "more"
        top = p.value(_upper(fit, name))
        ceiling = ""
        if name == "memory_bandwidth_scale" and side == "upper" and top < p.value(p.high):
            ceiling = f"; {top:.3g} x is the GPU's datasheet HBM bandwidth, which a sustained rate cannot exceed"
        out.append(
            f"{name} = {fit.values[name]:.3g} is at the {side} limit of its range "
            f"({p.value(p.low):.3g}-{top:.3g}{unit}{ceiling}): the runs want {want} than the model allows, "
            "so it explains them only in part and moves every prediction that reads it by the limit; check the "
            "runs (units, layout, the system and framework named) before using this calibration"
        )
    return out


def physical(scenarios: list[Any], name: str, value: float) -> str:
    """The absolute quantity a fitted scale means on each GPU of the runs ("" for a parameter that
    is already one: an overhead, the exponent, the ramp's tokens, the latency factor)."""
    seen: dict[str, Any] = {}
    for scn in scenarios:
        seen.setdefault(str(scn.cluster.gpu.name), scn)
    parts = [(gpu, _one(scn, name, value)) for gpu, scn in seen.items()]
    parts = [(gpu, text) for gpu, text in parts if text]
    if len(parts) == 1:
        return parts[0][1]
    return "; ".join(f"{gpu}: {text}" for gpu, text in parts)


def _one(scn: Any, name: str, value: float) -> str:
    cluster = scn.cluster
    c = apply(cluster, {name: value})
    if name == "matmul_efficiency_scale":
        now, was = (float(np.max(g.matmul_efficiency)) for g in (c.gpu, cluster.gpu))
        return f"{now:.0%} of peak (presets {was:.0%})"
    if name == "memory_bandwidth_scale":  # the sustained rate (a share of the datasheet's, at most all of it)
        now, was = (np.max(g.memory_bandwidth_bytes_per_s * g.memory_efficiency) / 1e12 for g in (c.gpu, cluster.gpu))
        peak = float(np.max(cluster.gpu.memory_bandwidth_bytes_per_s)) / 1e12
        return f"HBM {now:.3g} TB/s sustained of {peak:.3g} peak (presets {was:.3g})"
    if name == "intra_node_bandwidth_scale":
        rate, was = (
            float(np.max(x.effective_bandwidth_bytes_per_s)) / 1e9 for x in (c.intra_node_link, cluster.intra_node_link)
        )
        return f"{rate:.3g} GB/s per GPU (presets {was:.3g})"
    inter = cluster.inter_node_link
    if inter is None:
        return ""
    nominal = float(np.max(inter.effective_bandwidth_bytes_per_s)) / 1e9
    if name == "inter_node_bandwidth_scale":
        return f"{nominal * value:.3g} GB/s per GPU across servers (presets {nominal:.3g})"
    if name in ("inter_node_all_to_all_scale", "inter_node_p2p_scale"):
        return f"{nominal * value:.3g} GB/s per GPU at the presets' network rate"
    return ""


def misfit_notes(fit: Any, run_ids: list[str]) -> list[str]:
    """A line where the fit still misses runs by more than MISFIT_SDS x a calibrated stack's spread
    (`spreads.NOISE_LOG_SD`): the parameters do not explain them."""
    from shardwise.calibration.spreads import NOISE_LOG_SD

    after = np.asarray(fit.after_log_error, dtype=float)
    far = np.flatnonzero(np.abs(after) > MISFIT_SDS * NOISE_LOG_SD)
    if not far.size:
        return []
    worst = int(far[np.argmax(np.abs(after[far]))])
    limit = np.expm1(MISFIT_SDS * NOISE_LOG_SD)
    return [
        f"the fit still misses {far.size} of {len(after)} run(s) by more than {limit:.0%} "
        f"(worst: {run_ids[worst]}, {np.expm1(after[worst]):+.1%}), {MISFIT_SDS:g} x a calibrated stack's spread: no "
        "parameter within its range explains them; check those runs before using this calibration"
    ]


def mixture_notes(scenarios: list[Any], fit: Any) -> list[str]:
    """A note where the runs span several GPUs or model families (module docstring)."""
    from shardwise.calibration.spreads import FAMILY_NAMES, model_family

    out = []
    gpus = sorted({str(s.cluster.gpu.name) for s in scenarios})
    shared = [n for n in PER_GPU if n in fit.fitted]
    if len(gpus) > 1:
        what = f"one {', '.join(shared)}" if shared else "every fitted scale"
        out.append(
            f"the runs are on {len(gpus)} GPUs ({', '.join(gpus)}), which share {what}: it takes each GPU's "
            "stack as equally far from its preset; where they differ (another library, clock or power limit), "
            "calibrate each GPU's runs apart and use each file on its own GPU"
        )
    families = sorted({model_family(s.model) for s in scenarios})
    if len(families) > 1:
        names = ", ".join(FAMILY_NAMES.get(f, "dense transformers") if f else "dense transformers" for f in families)
        out.append(
            f"the runs are of {len(families)} model families ({names}), fitted together: the model misses "
            "published runs of mixtures of experts and hybrid models by more than dense transformers "
            "(`validate public`), which one shared scale partly absorbs; compare with each family calibrated apart"
        )
    return out
