"""Leave-one-source-out validation of the public training runs: how the model does on a source
(or a whole software stack) whose rows took no part in anything that was fitted.

What is fitted, and how (the same procedure that made the shipped constants, `FIT_PROCEDURE`):
each GPU with public runs gets one sustained matmul-efficiency scale (the power limit's clock,
`tools/fit_efficiency.py`), chosen so that the median signed step-time error of its dev rows
where compute is at least `COMPUTE_SHARE` of the step is zero, over the stacks in `FIT_STACKS`
(the others are predicted, never fitted); GPUs on the same silicon take
their sibling's scale (`calibration.spreads.FITTED_FROM`); a GPU whose dev rows span fewer than
`MIN_GROUPS` groups keeps its microbenchmark value (scale 1). Nothing else is fitted to the public
runs: every other constant comes from a datasheet, a paper or a microbenchmark.

A fold leaves out every row of one source (or of one stack), refits the scales on what is left,
and predicts the left-out rows (dev and holdout alike). Each left-out row also gets the 80%
interval the tool would give it from the other sources alone: ±Z80 times the root mean square of
ln(predicted / measured) over the fold predictions of the *other* sources of its stack (bias
included: an uncalibrated prediction's interval must cover it); a stack with no other source gets
`NO_DATA_LOG_SD` (about ±40%); that spread widened for the row's GPU as the tool widens it
(`calibration.spreads.gpu_widened_log_sd`: the uncertainty of the GPU's fitted sustained
efficiency, which differs between sources run on one GPU at different software releases).
Coverage is the share of the left-out rows inside their interval.

Predictions at a refitted scale are interpolated from each row's step time priced once over a
grid of scales (one vectorised estimate per row): the whole study takes a few seconds.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, replace
from functools import cache

import numpy as np

from shardwise.analyses import public_validation as pv
from shardwise.calibration.spreads import FITTED_FROM, Z80, gpu_widened_log_sd

# The scales shipped in presets/gpus.yaml (tools/fit_efficiency.py on the dev split): a GPU's
# microbenchmark efficiency (MAMF x 0.978) is the preset's value over its scale; a GPU not listed
# ships its microbenchmark value (scale 1).
SHIPPED_SCALES = {"h100-sxm5-80gb": 0.870, "gb200": 0.730, "gb300": 0.950, "a100-sxm4-80gb": 0.790}
GRID = np.round(np.arange(0.50, 1.3001, 0.005), 4)
COMPUTE_SHARE = 0.85  # rows mostly compute measure the GPU (tools/fit_efficiency.py)
# The stacks whose rows set a GPU's scale: those whose kernels the model prices as their code runs
# them, fused CUDA kernels (Transformer Engine, Apex, flash-attn's fused ops) issued by PyTorch.
# XLA programs (MaxText, Paxml) and eager PyTorch (FSDP, FSDP2, torchtitan, DeepSpeed on Hugging
# Face models) are priced but never fitted: what their kernels cost is the compiler's or the
# dispatcher's physics, not the GPU's clock, and a scale fitted on them would carry it to every stack.
FIT_STACKS = ("megatron-core", "megatron-deepspeed", "internevo", "flash-attn-trainer", "nanotron")
# Precisions whose rows are priced but never set a scale: NVFP4's GEMM rate is derived from FP8's
# (`specs.hardware.NVFP4_OPERAND_RATE_RATIO`, unmeasured on GB200/GB300), and a scale fitted on its
# rows would carry that rule's error to every 8- and 16-bit prediction on the GPU.
UNFITTED_PRECISIONS = ("nvfp4",)
MIN_GROUPS = 2
# An 80% interval of ±40% for a stack without published runs: ln(1.4) / Z80.
NO_DATA_LOG_SD = math.log(1.4) / Z80
FIT_PROCEDURE = (
    "per-GPU sustained matmul-efficiency scale: median dev error zero over the rows >= 85% compute of "
    "the fused-kernel stacks (tools/fit_efficiency.py); siblings take it"
)

STACK_NAMES = {
    "megatron-core": "Megatron-Core / NeMo",
    "megatron-deepspeed": "Megatron-DeepSpeed",
    "maxtext": "MaxText (JAX)",
    "paxml": "Paxml (JAX)",
    "nemo-automodel": "NeMo Automodel (FSDP2)",
    "hf-transformers": "Hugging Face Transformers",
    "torchtitan": "torchtitan",
    "torchtitan-compile": "torchtitan (compiled)",
    "fsdp": "PyTorch FSDP",
    "deepspeed": "DeepSpeed",
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

    @property
    def sets_scale(self) -> bool:
        """A dev row on a fitted GPU itself (not a sibling), of a fitted stack and precision."""
        return (
            self.row.split == "dev"
            and self.gpu == self.fitted_gpu
            and self.stack in FIT_STACKS
            and self.precision not in UNFITTED_PRECISIONS
        )

    def at(self, scales: dict[str, float]) -> float:
        return float(np.interp(scales.get(self.fitted_gpu, 1.0), GRID, self.grid_s))


def stack_of(raw: dict[str, str]) -> str:
    """The framework preset that prices the row (its compiled variant where the source says so)."""
    from shardwise.analyses.public_stacks import execution

    return execution(raw)[0]


def _fitted_gpu(gpu: str) -> str:
    """The GPU whose scale applies to `gpu`: its own, or its sibling's on the same silicon."""
    return FITTED_FROM.get(gpu, gpu)


@cache
def priced_rows() -> tuple[Priced, ...]:
    """Every public row the model prices (dense full training, as the headline tables), with
    its step time over GRID for the GPUs whose sustained efficiency is fitted."""
    from shardwise.engines.training import estimate_training_step

    raws = {r["id"]: pv.public_moe.resolved(r) for r in pv.raw_rows()}
    out = []
    for r in pv.validate_public():
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
        out.append(Priced(r, gpu.name, stack_of(raw), fitted, grid, share, str(scn.plan.precision)))
    return tuple(out)


def fit_scales(rows: list[Priced]) -> dict[str, float]:
    """The fitting procedure on `rows` (their dev split): one scale per fitted GPU."""
    by_gpu: dict[str, list[Priced]] = defaultdict(list)
    for p in rows:
        # siblings take the scale, never set it; only the stacks in FIT_STACKS set it
        if p.sets_scale:
            by_gpu[p.gpu].append(p)
    scales: dict[str, float] = {}
    for gpu, all_rows in by_gpu.items():
        chosen = [p for p in all_rows if p.compute_share >= COMPUTE_SHARE]
        if len({p.row.group for p in chosen}) < MIN_GROUPS:
            chosen = all_rows
        if len({p.row.group for p in chosen}) < MIN_GROUPS:
            continue
        measured = np.array([p.row.measured_step_s for p in chosen])
        grids = np.stack([p.grid_s for p in chosen])  # rows x scales
        median = np.median(grids / measured[:, None] - 1.0, axis=0)  # falls as the scale grows
        scales[gpu] = float(GRID[int(np.argmin(np.abs(median)))])
    return {g: scales.get(g, 1.0) for g in sorted({*SHIPPED_SCALES, *by_gpu})}


@dataclass(frozen=True)
class Predicted:
    """A row predicted in the fold that left its source (or stack) out, with its interval."""

    priced: Priced
    predicted_step_s: float
    log_sd: float  # of its 80% interval (from the other sources of its stack)

    @property
    def log_error(self) -> float:
        return math.log(self.predicted_step_s / self.priced.row.measured_step_s)

    @property
    def covered(self) -> bool:
        return abs(self.log_error) <= Z80 * self.log_sd


def _folds(key: str) -> dict[str, list[Predicted]]:
    """Every row predicted with its `key` ("source" or "stack") left out of the fit."""
    rows = priced_rows()
    groups: dict[str, list[Priced]] = defaultdict(list)
    for p in rows:
        groups[p.row.source if key == "source" else p.stack].append(p)
    out: dict[str, list[Predicted]] = {}
    for name, left in groups.items():
        scales = fit_scales([p for p in rows if (p.row.source if key == "source" else p.stack) != name])
        out[name] = [Predicted(p, p.at(scales), NO_DATA_LOG_SD) for p in left]
    return out


@cache
def by_source() -> dict[str, list[Predicted]]:
    """Leave-one-source-out predictions, with intervals from the other sources of the same stack."""
    folds = _folds("source")
    flat = [x for preds in folds.values() for x in preds]
    out = {}
    for name, preds in folds.items():
        stacks = {x.priced.stack for x in preds}
        sd = {s: stack_log_sd([x for x in flat if x.priced.stack == s and x.priced.row.source != name]) for s in stacks}
        out[name] = [replace(x, log_sd=gpu_widened_log_sd(sd[x.priced.stack], x.priced.gpu)) for x in preds]
    return out


@cache
def by_stack() -> dict[str, list[Predicted]]:
    """Leave-one-stack-out predictions (intervals: no published runs of the stack, the widest,
    widened for each row's GPU as the tool's)."""
    return {
        name: [replace(x, log_sd=gpu_widened_log_sd(x.log_sd, x.priced.gpu)) for x in preds]
        for name, preds in _folds("stack").items()
    }


def stack_log_sd(preds: list[Predicted]) -> float:
    """The 80% interval's log spread from fold predictions: their RMS log error (bias included),
    each source weighing the same (the mean over sources of each source's mean squared log error);
    the widest when there are none. A prediction for a user's run is a prediction for a source the
    model has not seen: the spread of sources, not that of rows, which one large, well-predicted
    source would set alone (dgxc-benchmarking's 349 of Megatron-Core's 420 runs)."""
    if not preds:
        return NO_DATA_LOG_SD
    per_source: dict[str, list[float]] = defaultdict(list)
    for x in preds:
        per_source[x.priced.row.source].append(x.log_error**2)
    return float(np.sqrt(np.mean([np.mean(v) for v in per_source.values()])))


@cache
def shipped_stack_spreads() -> dict[str, tuple[float, int, int]]:
    """Per stack: (log spread of its uncalibrated 80% interval, rows, sources), from every
    source's leave-one-out predictions."""
    flat = [x for preds in by_source().values() for x in preds]
    out = {}
    for stack in sorted({x.priced.stack for x in flat}):
        mine = [x for x in flat if x.priced.stack == stack]
        out[stack] = (stack_log_sd(mine), len(mine), len({x.priced.row.source for x in mine}))
    return out


@cache
def shipped_family_spreads() -> dict[str, tuple[float, int, int]]:
    """Per model family (`calibration.spreads.model_family`): (log spread of its uncalibrated 80%
    interval, rows, sources), the RMS of ln(predicted / measured) over its priced public runs,
    dense and mixture of experts, at the shipped model (a family's few dev rows barely move a GPU's
    fitted scale)."""
    from shardwise import presets
    from shardwise.calibration.spreads import model_family

    models = {r["id"]: pv.public_moe.resolved(r)["model"] for r in pv.raw_rows()}
    by_family: dict[str, list[pv.PublicRow]] = defaultdict(list)
    for r in pv.validate_public():
        if not r.skip and (family := model_family(presets.model(models[r.run_id]))):
            by_family[family].append(r)
    out = {}
    for family, mine in sorted(by_family.items()):
        e = np.log(np.array([r.predicted_step_s / r.measured_step_s for r in mine]))
        out[family] = (float(np.sqrt(np.mean(e**2))), len(mine), len({r.source for r in mine}))
    return out


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
