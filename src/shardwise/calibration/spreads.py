"""The measured spreads that every prediction's error bars rest on (no imports: the value types
use them too). Both are measured on the public runs' dev split only, by
`python tools/calibration_spread.py`; `shardwise validate --calibrated` checks them on the holdout.
"""

Z80 = 1.2815515655446004  # the normal quantile of 90%: an 80% two-sided interval is +-Z80 sd

# The uncalibrated model's spread: root mean square of ln(predicted / measured) over the dev runs
# (bias included: an uncalibrated prediction's interval must cover it).
UNCALIBRATED_LOG_SD = 0.059

# The dev rows also set each GPU's sustained matmul efficiency (`tools/fit_efficiency.py`), so
# their spread leaves out how far that fitted value may be from the truth. A group's mean error
# strays by BETWEEN_GROUPS_LOG_SD beyond its runs' scatter; a GPU fitted on n dev groups carries
# BETWEEN_GROUPS_LOG_SD / sqrt(n) of it, and a GPU that took another's value (the same silicon in
# another system: H200 from H100, B200 from GB200) or was not fitted on these runs at all (A100's
# comes from Korthikanti et al. 2022 Table 4, the others' from microbenchmarks) one whole more.
BETWEEN_GROUPS_LOG_SD = 0.049
FITTED_GROUPS = {"h100-sxm5-80gb": 20, "gb200": 7, "gb300": 4, "a100-sxm4-80gb": 5}  # dev groups per fitted GPU
FITTED_FROM = {  # presets/gpus.yaml: "sustained efficiency X's fitted scale, same silicon"
    "a100-sxm4-40gb": "a100-sxm4-80gb",
    "a100-sxm4-64gb": "a100-sxm4-80gb",
    "h200-sxm-141gb": "h100-sxm5-80gb",
    "h800-sxm5-80gb": "h100-sxm5-80gb",
    "h100-meta": "h100-sxm5-80gb",
    "h100-sxm5-64gb": "h100-sxm5-80gb",
    "b200-sxm-180gb": "gb200",
    "b200-750w": "gb200",
    "b300-sxm-270gb": "gb300",
}

# How far the model misses one software stack's runs once that stack's parameters are fitted: the
# dev stacks' residuals after calibrating on all their runs, pooled with the degrees of freedom the
# fits used. A calibration's own spread has a prior centred here, worth NOISE_PRIOR_RUNS runs.
NOISE_LOG_SD = 0.050
NOISE_PRIOR_RUNS = 4.0

# The spread of the ratio of two layouts' times (one model on one cluster): the scatter of the
# dev runs' errors inside their groups x sqrt(2) (a ratio has two runs' errors; a group's shared
# bias cancels). `shardwise sensitivity` puts it around time(plan A) / time(plan B).
PAIR_LOG_SD = 0.066

# The serving model's spread: root mean square of ln(predicted / measured) over the 66 published
# serving measurements of `shardwise validate inference` (TensorRT-LLM throughput, FasterTransformer
# latencies). They are not split into dev and holdout (the serving constants were set on other
# data: datasheets and microbenchmarks), so this is the model's spread on every row it can price.
SERVING_LOG_SD = 0.104


# Per software stack (the framework preset that runs the step): the root mean square of
# ln(predicted / measured) over its published runs, each source weighing the same (a user's run is
# a source the model has not seen), each run predicted by the model fitted without that run's
# source (`analyses.loso`, leave one source out; `python tools/stack_spreads.py`
# prints these). (log spread, runs, sources). A stack with no published runs gets NO_DATA_LOG_SD.
STACK_LOG_SD: dict[str, tuple[float, int, int]] = {
    "flash-attn-trainer": (0.0482, 5, 1),
    "fsdp": (0.1610, 173, 2),
    "fsdp2": (0.0772, 2, 1),
    "internevo": (0.1131, 54, 1),
    "maxtext": (0.0556, 38, 3),
    "megatron-core": (0.0765, 420, 3),
    "megatron-deepspeed": (0.3780, 7, 3),
    "nemo-automodel": (0.1365, 1, 1),
    "paxml": (0.1627, 36, 2),
    "torchtitan-compile": (0.1438, 12, 1),
}
# Per model family whose runs the stack's spread does not describe (hybrid Mamba-2 models: their
# SSD kernels' training speed rests on one inference measurement): the root mean square of
# ln(predicted / measured) over the family's priced public runs, dense and mixture of experts, at the
# shipped model (`analyses.loso.shipped_family_spreads`; `python tools/stack_spreads.py` prints it).
# (log spread, runs, sources). A prediction takes the wider of its stack's and its family's.
FAMILY_LOG_SD: dict[str, tuple[float, int, int]] = {
    "hybrid": (0.1461, 30, 3),
}
FAMILY_NAMES = {"hybrid": "hybrid Mamba-2 models"}


def model_family(model: object) -> str:
    """The family of `model` (a `Model`) whose spread its stack's does not describe (a key of
    `FAMILY_LOG_SD`): "hybrid" for a hybrid Mamba-2 model (`Model.hybrid_pattern`), "" otherwise."""
    return "hybrid" if getattr(model, "hybrid_pattern", "") else ""


# ±40% at 80% for a stack without published runs: ln(1.4) / Z80.
NO_DATA_LOG_SD = 0.2625


def family_basis(family: str) -> str:
    """How a model family's interval was measured, in words (`FAMILY_LOG_SD`)."""
    _, runs, sources = FAMILY_LOG_SD[family]
    return f"the model's spread on {runs} published runs of {FAMILY_NAMES[family]} ({sources} sources)"


def stack_basis(framework: str) -> str:
    """How an uncalibrated interval for `framework` was measured, in words."""
    known = STACK_LOG_SD.get(framework)
    if known is None:
        return f"no published runs of {framework}: about ±40%"
    _, runs, sources = known
    return f"the model's leave-one-source-out spread on {runs} published runs of {framework} ({sources} sources)"


def family_widens(framework: str, family: str) -> bool:
    """Whether the model family's spread (`FAMILY_LOG_SD`) is wider than its stack's (`STACK_LOG_SD`;
    `NO_DATA_LOG_SD` for a stack without published runs): the interval then rests on the family's."""
    stack = STACK_LOG_SD.get(framework, (NO_DATA_LOG_SD, 0, 0))[0]
    return family in FAMILY_LOG_SD and FAMILY_LOG_SD[family][0] > stack


def uncalibrated_log_sd(gpu_name: str, framework: str = "megatron-core", family: str = "") -> float:
    """The uncalibrated 80% interval's log-space spread for a training step on `gpu_name` run by
    `framework`: its stack's leave-one-source-out spread (STACK_LOG_SD; NO_DATA_LOG_SD without
    published runs), or its model family's where that is wider (FAMILY_LOG_SD; "" for none),
    widened by the uncertainty of that GPU's sustained efficiency (above)."""
    known = FAMILY_LOG_SD if family_widens(framework, family) else STACK_LOG_SD
    stack = known.get(family if known is FAMILY_LOG_SD else framework, (NO_DATA_LOG_SD, 0, 0))[0]
    return gpu_widened_log_sd(stack, gpu_name)


def gpu_widened_log_sd(log_sd: float, gpu_name: str) -> float:
    """A stack's (or model family's) spread as `uncalibrated_log_sd` widens it for `gpu_name`: no
    narrower than UNCALIBRATED_LOG_SD, and the uncertainty of that GPU's fitted sustained efficiency
    added (BETWEEN_GROUPS_LOG_SD over its dev groups; a whole one more for a GPU that took another's
    value or was not fitted). `analyses.loso` checks the same interval on each left-out source."""
    from math import sqrt

    own = FITTED_GROUPS.get(gpu_name)
    if own is not None:
        extra = BETWEEN_GROUPS_LOG_SD**2 / own
    else:
        parent = FITTED_GROUPS.get(FITTED_FROM.get(gpu_name, ""))
        extra = BETWEEN_GROUPS_LOG_SD**2 * (1.0 + (1.0 / parent if parent else 0.0))
    return sqrt(max(log_sd, UNCALIBRATED_LOG_SD) ** 2 + extra)
