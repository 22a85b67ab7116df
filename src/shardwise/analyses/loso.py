"""Leave-one-source-out validation of the public training runs: how the model does on a source
(or a whole software stack) whose rows took no part in anything that was fitted.

What is fitted, and how (the same procedure that made the shipped constants, `FIT_PROCEDURE`): each
GPU with public runs gets one sustained matmul-efficiency scale (the power limit's clock,
`tools/fit_efficiency.py`), chosen so that the median signed step-time error of its dev rows where
compute is at least `COMPUTE_SHARE` of the step is zero, over the stacks in `FIT_STACKS` (the others
are predicted, never fitted); siblings on the same silicon and GPUs that assume another's efficiency
take its scale (`calibration.spreads.FITTED_FROM`, `ASSUMED_FROM`); a GPU whose dev rows span fewer
than `MIN_GROUPS` groups keeps its microbenchmark value (scale 1). Nothing else is fitted to them.

A fold leaves out every row of one source (or of one stack), refits the scales on what is left,
and predicts the left-out rows (dev and holdout alike). Each left-out row also gets the 80%
interval the tool would give it from what the fold knows (`analyses.interval_model`): a
random-effects model of the other sources' leave-one-source-out errors of its stack (the scatter
inside a source, the sources' scatter about the stack's mean, DerSimonian-Laird, and that mean's
offset and error, at Student's t); a stack the fold knows no other source of, as a stack without
published runs: how far the other stacks miss when each is left out whole. Those errors are each
refitted without the scored source as well (`_errors_without`: a fit per pair, a nested
leave-one-out), so the scored source's measurements reach its interval through no GPU scale. In
quadrature it adds only the GPU error those errors do not hold (`interval_model.GpuFit.var`, at the
fold's own fit): nothing for a GPU the fold fitted, a source's spread for a sibling's scale, the
unfitted spread for a GPU the fold could not fit. Coverage is the share of the left-out rows inside
their interval. `shipped_stack_spreads`, `shipped_no_data_spread` and `shipped_gpu_fit` are the same
estimates on every source: `calibration.spreads` holds them (`python tools/stack_spreads.py`).

Predictions at a refitted scale are interpolated from each row's step time priced once over a
grid of scales (one vectorised estimate per row): the whole study takes a few seconds.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from functools import cache

import numpy as np

from shardwise.analyses import interval_model as im
from shardwise.analyses import public_validation as pv
from shardwise.calibration.spreads import ASSUMED_FROM, FITTED_FROM, Z80

# The scales shipped in presets/gpus.yaml (tools/fit_efficiency.py on the dev split): a GPU's
# microbenchmark efficiency (MAMF x 0.978) is the preset's value over its scale; a GPU not listed
# ships its microbenchmark value (scale 1).
SHIPPED_SCALES = {"h100-sxm5-80gb": 0.860, "gb200": 0.735, "gb300": 0.950, "a100-sxm4-80gb": 0.780}
GRID = np.round(np.arange(0.50, 1.3001, 0.005), 4)
COMPUTE_SHARE = 0.85  # rows mostly compute measure the GPU (tools/fit_efficiency.py)
# The stacks whose rows set a GPU's scale: those whose kernels the model prices as their code runs
# them, fused CUDA kernels (Transformer Engine, Apex, flash-attn's fused ops) issued by PyTorch.
# XLA programs (MaxText, Paxml) and eager PyTorch (FSDP, FSDP2, torchtitan, DeepSpeed on Hugging
# Face models) are priced but never fitted: what their kernels cost is the compiler's or the
# dispatcher's physics, not the GPU's clock, and a scale fitted on them would carry it to every stack.
FIT_STACKS = ("megatron-core", "megatron-deepspeed", "internevo", "flash-attn-trainer", "nanotron")
# Precisions whose rows are priced but never set a scale: NVFP4's GEMM rate is derived from FP8's (`specs.hardware.
# NVFP4_OPERAND_RATE_RATIO`, unmeasured on GB200/GB300); a scale fitted on it would carry that rule's error everywhere.
UNFITTED_PRECISIONS = ("nvfp4",)
MIN_GROUPS = 2
FIT_PROCEDURE = (
    "per-GPU sustained matmul-efficiency scale: median dev error zero over the rows >= 85% compute of "
    "the fused-kernel stacks (tools/fit_efficiency.py); siblings take it"
)

STACK_NAMES = {
    "megatron-core": "Megatron-Core / NeMo",
    "megatron-deepspeed": "Megatron-DeepSpeed",
    "megatron-lm-2022": "Megatron-LM 2022 (NeMo Megatron 22.x)",
    "maxtext": "MaxText (JAX)",
    "paxml": "Paxml (JAX)",
    "nemo-automodel": "NeMo Automodel (FSDP2)",
    "hf-transformers": "Hugging Face Transformers",
    "torchtitan": "torchtitan",
    "torchtitan-compile": "torchtitan (compiled)",
    "fsdp": "PyTorch FSDP",
    "deepspeed": "DeepSpeed",
    "colossalai": "Colossal-AI",
}


@dataclass(frozen=True)
class Priced:
    """A public row the model prices, with its step time over the scale grid."""

    row: pv.PublicRow
    gpu: str
    stack: str
    fitted_gpu: str  # the GPU whose fitted scale applies ("" : none)
    grid_s: np.ndarray  # predicted step at GRID (constant when no scale applies)
    compute_share: float
    precision: str = "bf16"
    eager: bool = False  # element-wise work priced as eager PyTorch (Hugging Face layers): never fitted

    @property
    def sets_scale(self) -> bool:
        """A dev row on a fitted GPU itself (not a sibling), of a fitted stack, precision and fused kernels."""
        return (
            self.row.split == "dev"
            and self.gpu == self.fitted_gpu
            and self.stack in FIT_STACKS
            and self.precision not in UNFITTED_PRECISIONS
        ) and not self.eager

    def at(self, scales: dict[str, float]) -> float:
        return float(np.interp(scales.get(self.fitted_gpu, 1.0), GRID, self.grid_s))


def stack_of(raw: dict[str, str]) -> str:
    """The framework preset that prices the row (compiled where stated), or its engine's stack (`STACK_OF_PRESET`)."""
    from shardwise.analyses.public_stacks import STACK_OF_PRESET, execution

    preset = execution(raw)[0]
    return STACK_OF_PRESET.get(preset, preset)


def _fitted_gpu(gpu: str) -> str:
    """The GPU whose scale applies to `gpu`: its own, its sibling's, or the assumed one's (`ASSUMED_FROM`)."""
    return FITTED_FROM.get(gpu) or ASSUMED_FROM.get(gpu, gpu)


@cache
def priced_rows() -> tuple[Priced, ...]:
    """Every public row the model prices (dense full training), with its step time over GRID for the fitted GPUs."""
    from shardwise.analyses.progress import tick
    from shardwise.engines.training import estimate_training_step

    raws = {r["id"]: pv.public_moe.resolved(r) for r in pv.raw_rows()}
    out = []
    for r in pv.validate_public():
        tick()  # the second of each row's 2 steps (`public_validation.validate_public`)
        if r.skip or r.moe or r.lora:
            continue
        raw = raws[r.run_id]
        scn = pv.scenario_for(raw)
        gpu = scn.cluster.gpu
        fitted = _fitted_gpu(gpu.name)
        est = estimate_training_step(scn)
        share = float(est.breakdown.compute_s) / float(est.step_time_s)
        grid = np.full(GRID.shape, r.predicted_step_s)
        if fitted:
            s = GRID / SHIPPED_SCALES.get(fitted, 1.0)
            g = gpu.with_(  # an efficiency cannot pass 1: the grid's top end saturates there
                matmul_efficiency=np.minimum(gpu.matmul_efficiency * s, 1.0),
                matmul_efficiency_fp8=np.minimum(gpu.matmul_efficiency_fp8 * s, 1.0),
            )
            scaled = type(scn)(scn.model, scn.cluster.with_(gpu=g), scn.plan)
            grid = np.asarray(estimate_training_step(scaled).step_time_s, dtype=float)
        eager = bool(np.any(scn.plan.eager_kernels))
        out.append(Priced(r, gpu.name, stack_of(raw), fitted, grid, share, str(scn.plan.precision), eager))
    return tuple(out)


def fit_scales(rows: list[Priced]) -> dict[str, float]:
    """The fitting procedure on `rows` (their dev split): one scale per fitted GPU."""
    fitted = _fit(rows)
    return {g: fitted[g][0] if g in fitted else 1.0 for g in sorted({*SHIPPED_SCALES, *_setting(rows)})}


def _setting(rows: list[Priced]) -> dict[str, list[Priced]]:
    by_gpu: dict[str, list[Priced]] = defaultdict(list)
    for p in rows:
        # siblings take the scale, never set it; only the stacks in FIT_STACKS set it
        if p.sets_scale:
            by_gpu[p.gpu].append(p)
    return by_gpu


def _fit(rows: list[Priced]) -> dict[str, tuple[float, list[Priced]]]:
    """Each fitted GPU's scale and the rows that set it."""
    out = {}
    for gpu, all_rows in _setting(rows).items():
        chosen = [p for p in all_rows if p.compute_share >= COMPUTE_SHARE]
        if len({p.row.group for p in chosen}) < MIN_GROUPS:
            chosen = all_rows
        if len({p.row.group for p in chosen}) < MIN_GROUPS:
            continue
        measured = np.array([p.row.measured_step_s for p in chosen])
        grids = np.stack([p.grid_s for p in chosen])  # rows x scales
        median = np.median(grids / measured[:, None] - 1.0, axis=0)  # falls as the scale grows
        out[gpu] = (float(GRID[int(np.argmin(np.abs(median)))]), chosen)
    return out


def gpu_fit_of(rows: list[Priced]) -> im.GpuFit:
    """How far each GPU's scale fitted on `rows` may be off (`interval_model.GpuFit`)."""
    fitted = _fit(rows)
    errors = {
        gpu: [
            (math.log(p.at({gpu: scale}) / p.row.measured_step_s), p.row.group, f"{p.row.source} ({p.stack})")
            for p in chosen
        ]
        for gpu, (scale, chosen) in fitted.items()
    }
    return im.gpu_fit(errors, {g: s for g, (s, _) in fitted.items()})


@dataclass(frozen=True)
class Predicted:
    """A row predicted in the fold that left its source (or stack) out, with its interval."""

    priced: Priced
    predicted_step_s: float
    log_sd: float  # of its 80% interval (from the other sources of its stack)
    gpu_var: float = 0.0  # its GPU's efficiency variance its fold's interval adds (`GpuFit.var`)

    @property
    def log_error(self) -> float:
        return math.log(self.predicted_step_s / self.priced.row.measured_step_s)

    @property
    def covered(self) -> bool:
        return abs(self.log_error) <= Z80 * self.log_sd


@cache
def _folds(key: str) -> dict[str, tuple[list[Predicted], im.GpuFit]]:
    """Every row predicted with its `key` ("source" or "stack") left out of the fit, and how far
    that fold's fitted GPU scales may be off."""
    rows = priced_rows()
    groups: dict[str, list[Priced]] = defaultdict(list)
    for p in rows:
        groups[p.row.source if key == "source" else p.stack].append(p)
    out: dict[str, tuple[list[Predicted], im.GpuFit]] = {}
    for name, left in groups.items():
        kept = [p for p in rows if (p.row.source if key == "source" else p.stack) != name]
        scales, fit = fit_scales(kept), gpu_fit_of(kept)
        out[name] = ([Predicted(p, p.at(scales), math.nan, fit.var(p.gpu)) for p in left], fit)
    return out


def _name(p: Priced, key: str) -> str:
    return p.row.source if key == "source" else p.stack


@cache
def _scales_without(*left: tuple[str, str]) -> tuple[dict[str, float], im.GpuFit]:
    """The GPU scales fitted without the rows of each (key, name) in `left`, and their `GpuFit`."""
    kept = [p for p in priced_rows() if not any(_name(p, k) == n for k, n in left)]
    return fit_scales(kept), gpu_fit_of(kept)


def _errors_without(key: str, scored: tuple[str, str]) -> list[Predicted]:
    """Every row but the `scored` (key, name)'s, predicted with its own `key` ("source" or
    "stack") left out of the fit and the scored one too: the errors an interval for the scored rows
    may rest on without their own measurements having moved any of those errors' GPU scales (a
    fold refits the scales on what is left; a single leave-one-out fold's fit held the scored rows)."""
    by: dict[str, list[Priced]] = defaultdict(list)
    for p in priced_rows():
        if _name(p, scored[0]) != scored[1]:
            by[_name(p, key)].append(p)
    out = []
    for name, rows in by.items():
        scales, fit = _scales_without(*sorted({(key, name), scored}))
        out += [Predicted(p, p.at(scales), math.nan, fit.var(p.gpu)) for p in rows]
    return out


def cells(preds: list[Predicted]) -> list[im.Cell]:
    """The predictions grouped by (stack, source): the random-effects model's units, each run
    labelled by the GPU whose error its interval adds on its own (`Cell.strata`; "" : none)."""
    by: dict[tuple[str, str], list[Predicted]] = defaultdict(list)
    for x in preds:
        by[(x.priced.stack, x.priced.row.source)].append(x)
    strata = {k: tuple(x.priced.gpu if x.gpu_var > 0.0 else "" for x in xs) for k, xs in by.items()}
    errors = {k: tuple(x.log_error for x in xs) for k, xs in by.items()}
    groups = {k: len({x.priced.row.group for x in xs}) for k, xs in by.items()}
    return [im.Cell(*k, errors[k], groups[k], strata[k]) for k in sorted(by)]


def _widened(x: Predicted, stack_log_sd: float, fit: im.GpuFit) -> Predicted:
    """`x` with its interval: the stack's spread and its GPU's fit error, in quadrature."""
    return replace(x, log_sd=math.sqrt(stack_log_sd**2 + fit.var(x.priced.gpu)))


@cache
def by_source() -> dict[str, list[Predicted]]:
    """Leave-one-source-out predictions, each with the interval the tool would give from what the
    fold knows: the other sources of its stack (none: the stacks left out whole, without it) and
    the fold's own GPU fit. The other sources' errors are each refitted without the scored source
    too (`_errors_without`), so that its measurements reach its interval through nothing."""
    folds = _folds("source")
    out = {}
    for name, (preds, fit) in folds.items():
        known = cells(_errors_without("source", ("source", name)))
        others = cells(_errors_without("stack", ("source", name)))
        sd = {s: im.predictive(s, known, others).log_sd for s in {x.priced.stack for x in preds}}
        out[name] = [_widened(x, sd[x.priced.stack], fit) for x in preds]
    return out


@cache
def by_stack() -> dict[str, list[Predicted]]:
    """Leave-one-stack-out predictions, each with the interval the tool gives a stack without
    published runs, from the other stacks alone (each refitted without the scored stack too), and
    the fold's own GPU fit."""
    out = {}
    for name, (preds, fit) in _folds("stack").items():
        known = cells(_errors_without("source", ("stack", name)))
        others = cells(_errors_without("stack", ("stack", name)))
        sd = im.predictive(name, known, others).log_sd
        out[name] = [_widened(x, sd, fit) for x in preds]
    return out


def _all_cells() -> tuple[list[im.Cell], list[im.Cell]]:
    folds, whole = _folds("source"), _folds("stack")
    return cells([x for ps, _ in folds.values() for x in ps]), cells([x for ps, _ in whole.values() for x in ps])


@cache
def shipped_stack_spreads() -> dict[str, tuple[float, int, int]]:
    """Per stack: (log spread of its uncalibrated 80% interval before the GPU's term, runs,
    sources), from every source's leave-one-source-out predictions."""
    known, whole = _all_cells()
    out = {}
    for stack in sorted({c.stack for c in known}):
        p = im.predictive(stack, known, whole)
        out[stack] = (p.log_sd, p.runs, p.sources)
    return out


@cache
def shipped_no_data_spread() -> tuple[float, int]:
    """A stack without published runs: (log spread before the GPU's term, stacks it rests on)."""
    known, whole = _all_cells()
    p = im.predictive("", known, whole)
    return p.log_sd, p.sources


@cache
def shipped_gpu_fit() -> im.GpuFit:
    """How far the shipped GPU scales (fitted on every source) may be off."""
    return gpu_fit_of(list(priced_rows()))


@dataclass(frozen=True)
class FoldSummary:
    """One left-out source or stack: accuracy, ranking, interval coverage and the flat baseline."""

    name: str
    stack: str
    rows: int
    mape: float
    bias: float
    baseline_mape: float
    baseline_bias: float
    spearman: float
    spearman_groups: int
    pairs_right: float
    pairs: int
    coverage: float
    interval_pct: float  # the median interval's half-width, as a percentage of the prediction


def summarize(name: str, preds: list[Predicted]) -> FoldSummary:
    rows = [replace(x.priced.row, predicted_step_s=x.predicted_step_s) for x in preds]
    s = pv.summarize(name, rows)
    stacks = sorted({STACK_NAMES.get(x.priced.stack, x.priced.stack) for x in preds})
    sd = np.median([x.log_sd for x in preds]) if preds else float("nan")
    return FoldSummary(
        name=name,
        stack=", ".join(stacks),
        rows=s.rows,
        mape=s.mape,
        bias=s.bias,
        baseline_mape=s.baseline_mape,
        baseline_bias=s.baseline_bias,
        spearman=s.spearman,
        spearman_groups=s.spearman_groups,
        pairs_right=s.pairs_right,
        pairs=s.pairs,
        coverage=float(np.mean([x.covered for x in preds])) if preds else float("nan"),
        interval_pct=float(math.expm1(Z80 * sd)),
    )


def source_table() -> list[FoldSummary]:
    folds = by_source()
    out = [summarize(name, preds) for name, preds in sorted(folds.items())]
    out.append(summarize("all sources", [x for preds in folds.values() for x in preds]))
    return out


def stack_table() -> list[FoldSummary]:
    return [summarize(STACK_NAMES.get(k, k), v) for k, v in sorted(by_stack().items())]


def fold_setters() -> dict[str, dict[str, tuple[int, int, int]]]:
    """How many dev rows set each leave-one-source-out fold's GPU scales: fold (the source left out;
    "": none, the shipped fit) -> fitted GPU -> (rows, groups, the most rows of any one source)."""
    rows = priced_rows()
    out = {}
    for name in ["", *sorted({p.row.source for p in rows})]:
        fitted = _fit([p for p in rows if p.row.source != name])
        out[name] = {
            g: (len(c), len({p.row.group for p in c}), max(Counter(p.row.source for p in c).values()))
            for g, (_, c) in sorted(fitted.items())
        }
    return out
