"""The measured spreads that every prediction's error bars rest on (no imports: the value types
use them too). The uncalibrated intervals' (stacks, model families, GPUs' fits) are measured on
every public run, each predicted by the model fitted without its source, by
`python tools/stack_spreads.py`; the calibrated and pair spreads on the dev split only, by
`python tools/calibration_spread.py` (`shardwise validate --calibrated` checks them on the holdout).
"""

Z80 = 1.2815515655446004  # the normal quantile of 90%: an 80% two-sided interval is +-Z80 sd

# The uncalibrated model's spread on the dev split: root mean square of ln(predicted / measured)
# over the Megatron-Core dev runs (`tools/calibration_spread.py`; a check of the dev split, no
# longer part of an interval: those rest on the leave-one-out spreads below).
UNCALIBRATED_LOG_SD = 0.064

# The GPUs that took another's fitted sustained efficiency: the same silicon in another system
# (presets/gpus.yaml: "sustained efficiency X's fitted scale, same silicon").
FITTED_FROM = {
    "a100-sxm4-40gb": "a100-sxm4-80gb",
    "a100-sxm4-64gb": "a100-sxm4-80gb",
    "a800-sxm4-80gb": "a100-sxm4-80gb",
    "h200-sxm-141gb": "h100-sxm5-80gb",
    "h800-sxm5-80gb": "h100-sxm5-80gb",
    "h100-meta": "h100-sxm5-80gb",
    "h100-sxm5-64gb": "h100-sxm5-80gb",
    "b200-sxm-180gb": "gb200",
    "b200-750w": "gb200",
    "b300-sxm-270gb": "gb300",
}

# The GPUs with no microbenchmark (MAMF) row and no public runs of their own, whose efficiency is
# another GPU's assumed (presets/gpus.yaml: "no MAMF row: X's value assumed"): they ship that GPU's
# *shipped* efficiency, its microbenchmark value times its fitted sustained scale (`analyses.loso.
# SHIPPED_SCALES`), not the bare microbenchmark value, which would price an unfitted GPU faster than
# the fitted one it copies (review 38: V100 and L40S at the A100's 0.85 where the A100 ships 0.663).
# `analyses.loso` moves them with that GPU's refitted scale, as it moves FITTED_FROM's siblings; the
# interval keeps an unfitted GPU's spread for them (the assumption itself is unmeasured).
ASSUMED_FROM = {
    "v100-sxm2-32gb": "a100-sxm4-80gb",
    "l40s": "a100-sxm4-80gb",
    "h100-pcie-80gb": "h100-sxm5-80gb",
}

# How far a GPU's fitted sustained efficiency may be off, in log step time
# (`analyses.interval_model.GpuFit`, `python tools/stack_spreads.py` prints these): the fit sets
# the median error of the GPU's fitting rows to zero, so its error is that median's,
# (pi / 2) GPU_GROUP_LOG_SD^2 / groups + GPU_SOURCE_LOG_SD^2 / sources (Kish's effective count of
# the rows per source). GPU_GROUP_LOG_SD: the scatter of one source's groups (model, cluster, GPU
# count) on one GPU; GPU_SOURCE_LOG_SD: how far one source's runs on a GPU sit from another's (both
# pooled over the fitted GPUs). The stacks' leave-one-source-out spreads already hold a fitted GPU's
# error (each fold refitted the scales without its source): an interval adds nothing for it. A GPU
# that took a sibling's value adds one whole GPU_SOURCE_LOG_SD^2 (its system sits like one more
# source); a GPU fitted on nothing keeps its microbenchmark's efficiency: UNFITTED_LOG_SD, the root mean square of
# ln(fitted scale) over the fitted GPUs (how far a training job's sustained efficiency sits from the
# microbenchmark's) x Student's t over the normal at as many degrees of freedom as fitted GPUs.
GPU_FIT: dict[str, tuple[int, float]] = {  # fitted GPU: (groups, effective sources) of its rows
    "a100-sxm4-80gb": (5, 1.22),
    "gb200": (7, 2.78),
    "gb300": (4, 1.0),
    "h100-sxm5-80gb": (18, 1.33),
}
GPU_GROUP_LOG_SD = 0.0505
GPU_SOURCE_LOG_SD = 0.1045
UNFITTED_LOG_SD = 0.2551

# How far the model misses one software stack's runs once that stack's parameters are fitted: the
# dev stacks' residuals after calibrating on all their runs, pooled with the degrees of freedom the
# fits used. A calibration's own spread has a prior centred here, worth NOISE_PRIOR_RUNS runs.
NOISE_LOG_SD = 0.050
NOISE_PRIOR_RUNS = 4.0

# The spread of the ratio of two layouts' times (one model on one cluster): the scatter of the
# dev runs' errors inside their groups x sqrt(2) (a ratio has two runs' errors; a group's shared
# bias cancels). `shardwise sensitivity` puts it around time(plan A) / time(plan B).
PAIR_LOG_SD = 0.078

# The serving model's spread: root mean square of ln(predicted / measured) over the SERVING_MEASUREMENTS
# published serving measurements of `shardwise validate inference` (TensorRT-LLM throughput,
# FasterTransformer latencies; `analyses.serving_validation.validate_serving`, which a test
# recomputes). They are not split into dev and holdout (the serving constants were set on other
# data: datasheets and microbenchmarks), so this is the model's spread on every row it can price.
SERVING_LOG_SD = 0.100
SERVING_MEASUREMENTS = 86
# The runs those measurements come from: 80 TensorRT-LLM throughputs, one a run, and FasterTransformer's
# 2 runs (TP 1 and 2) of 3 latencies each (review 50 #11; a test recounts them)
SERVING_RUNS = 82

# A training step whose TP, CP or data-parallel group runs over a PCIe link inside a server (P2P, or
# staged through host memory where P2P is off): no published training run measured one
# (data/public_training_runs.csv has none), so the stacks' spreads above, measured over NVLink and
# InfiniBand alone, do not hold how far the collective model misses on PCIe. The interval adds it in
# quadrature (`calibration.link_spread`): the root mean square of ln(predicted / measured) over the
# held-out PCIe points of `shardwise validate collectives` (`analyses.collective_validation`: 2 RTX
# 2080 Ti without P2P, all-reduce, all-gather and all-to-all from 8 B to 1 GiB; 5 RTX 4090 on the P2P
# driver; 8 RTX 4090 on the stock driver; a test recomputes it). The whole of it, not the
# communication's share of the step: an upper bound, near the mark where TP over PCIe takes 70-85% of
# the step, wide for a data-parallel group whose reduction hides behind the backward pass.
PCIE_LINK_LOG_SD = 0.1806
PCIE_LINK_POINTS = 82


# The engines those runs measured (`analyses.serving_validation`: TensorRT-LLM's performance overview,
# FasterTransformer's GPT 13B latencies). Another engine's interval keeps SERVING_LOG_SD (no published
# spread between engines to widen it by) and says that no published run of its own checks it.
SERVING_ENGINES = frozenset({"tensorrt-llm", "fastertransformer"})


def serving_basis(engine: str = "tensorrt-llm", moe: bool = False) -> str:
    """Where an uncalibrated serving interval comes from, in words (`SERVING_LOG_SD`), for `engine`
    (`moe`: a mixture of experts, which none of those runs served). Runs, not measurements, where
    it says runs (review 50 #11); and how they were priced: each TensorRT-LLM row as one static full
    batch, not by the in-flight simulation serve runs by default, whose mean absolute error on the
    80 of them is 8.4% against the batch's 8.5% (tools/serving_inflight_check.py, 2026-12-08;
    docs/validation.md, "Inference")."""
    runs = f"{SERVING_RUNS} published runs ({SERVING_MEASUREMENTS} measurements, static batches)"
    basis = f"the serving model's spread on {runs}"
    if engine not in SERVING_ENGINES:
        basis += f" of TensorRT-LLM and FasterTransformer, none of {engine}: its own overheads are unchecked"
    return basis + (", all of dense models" if moe else "")


# The GPUs of those SERVING_RUNS runs (`analyses.serving_validation.SYSTEMS`' systems; a test
# recomputes it). All their models are dense. A serving case outside them is unmeasured there and
# widens as a training interval does (review 45 #6): a model family no published serving run
# measured (every FAMILY_LOG_SD family) takes the wider of SERVING_LOG_SD and its family's spread
# (measured on training runs: grouped GEMMs, routing, all-to-alls, the SSD kernels, which serving
# runs too), and a GPU without a serving row adds its GPU term (`gpu_widened_log_sd`).
SERVING_GPUS = frozenset({"a100-sxm4-40gb", "b200-sxm-180gb", "gb200", "h100-sxm5-80gb", "h200-sxm-141gb"})


def serving_log_sd(gpu_name: str, family: str = "") -> float:
    """The uncalibrated serving interval's log spread on `gpu_name` for a model of `family`
    ("" dense; `model_family`): SERVING_LOG_SD, widened where unmeasured (`SERVING_GPUS`)."""
    base = max(SERVING_LOG_SD, FAMILY_LOG_SD[family][0]) if family in FAMILY_LOG_SD else SERVING_LOG_SD
    return base if gpu_name in SERVING_GPUS else gpu_widened_log_sd(base, gpu_name)


# A family's published serving figures that were priced but are not in SERVING_RUNS, in words (review
# 50 #4: the band said no such run exists). SGLang PR 3602 (sgl-project/sglang#3602): DeepSeek-V3 FP8
# on 8 H200, `launch_server --tp 8` (and `--enable-ep-moe`), SGLang's defaults otherwise, and
# `bench_serving --dataset-name random --num-prompts 600 --random-input 180 --random-output 400
# --request-rate 40`: 1,468.48 output tokens/s, about 120,000 tokens over 82 s where the arrivals end
# after 15 s, so the server, not the rate, bound it; priced as it ran 4,624 (docs/serving.md "Checked
# against one public figure"; `analyses.serving_scaling.as_benchmarked`). One row of one engine
# release: said beside the band, neither fitted nor used to widen it.
SERVING_FAMILY_CHECKS = {
    "moe": (
        "the one public serving figure priced, SGLang PR 3602 (DeepSeek-V3 FP8 on 8 H200, SGLang's default "
        "launch of Feb 2025, 600 requests at 40/s drained in 82 s: server-bound, not rate-bound), measured "
        "a third of the tokens/s priced (1,468 against 4,624), outside this band and not fitted"
    ),
}


def serving_unmeasured(gpu_name: str, family: str = "") -> str:
    """What of a serving case no published serving run measured, in words ("" : all measured)."""
    words = []
    if family in FAMILY_LOG_SD:
        checked = f"; {SERVING_FAMILY_CHECKS[family]}" if family in SERVING_FAMILY_CHECKS else ""
        words.append(
            f"no serving run of {FAMILY_NAMES[family]} in the serving model's spread: "
            f"{family_basis(family)} in training{checked}"
        )
    if gpu_name not in SERVING_GPUS:
        gpu = gpu_basis(gpu_name)
        words.append(
            f"no published serving row on the {gpu_name}"
            + (f", {gpu}" if gpu.startswith("plus") else " (its efficiency fitted on published training runs)")
        )
    return "; ".join(words)


# Per software stack (the framework preset that runs the step): the 80% interval's spread, before
# its GPU's term, for a run of a source the model has not seen, from the stack's published runs each
# predicted by the model fitted without its source (`analyses.loso`, leave one source out), in a
# random-effects model (`analyses.interval_model`): the runs' scatter inside one source (runs on a
# GPU whose error the interval adds on its own, below, about their own mean: that error is not
# counted twice), the sources' scatter about the stack's mean (DerSimonian-Laird; a stack of one source takes the
# stacks' pooled value) and that mean's own error and offset, at Student's t. Stored as the
# normal-equivalent spread: the interval is +-Z80 x it. (log spread, runs, sources);
# `python tools/stack_spreads.py` prints these.
STACK_LOG_SD: dict[str, tuple[float, int, int]] = {
    "colossalai": (0.1299, 2, 2),
    "deepspeed": (0.1636, 15, 4),
    "flash-attn-trainer": (0.1158, 5, 1),
    "fsdp": (0.1694, 181, 5),
    "fsdp2": (0.1585, 2, 1),
    "internevo": (0.1451, 54, 1),
    "maxtext": (0.0942, 42, 4),
    "megatron-core": (0.0932, 442, 4),
    "megatron-deepspeed": (0.2442, 15, 5),
    "megatron-lm-2022": (0.1615, 11, 1),
    "nemo-automodel": (0.1495, 1, 1),
    "paxml": (0.1869, 36, 2),
    "torchtitan": (0.1246, 3, 3),
    "torchtitan-compile": (0.1251, 15, 2),
}
# A stack without published runs: how far whole stacks miss when each is left out of the fit
# altogether (DerSimonian-Laird across the NO_DATA_STACKS stacks' mean errors), plus a source's
# scatter about its stack and a run's about its source, each stack weighing the same; never
# narrower than the widest stack's above (`analyses.interval_model`: a stack nobody has measured
# may miss as far as the worst measured one).
NO_DATA_LOG_SD = 0.2442
NO_DATA_STACKS = 14
# Per model family whose runs the stack's spread does not describe (hybrid Mamba-2 models: their
# SSD kernels' training speed rests on one inference measurement; mixtures of experts: the stacks'
# spreads are measured on dense runs alone, `analyses.loso.priced_rows`, and the token routing,
# grouped GEMMs and all-to-alls miss by more): the root mean square of
# ln(predicted / measured) over the family's priced public runs at the shipped model, which never
# fits a GPU's scale on MoE runs (`analyses.loso.priced_rows` leaves them out; a hybrid's few dense
# dev rows barely move one), pooled over
# their sources (`analyses.family_spreads`; `python tools/stack_spreads.py` prints it).
# (log spread, runs, sources). A prediction takes the wider of its stack's and its family's. The MoE
# family's, checked by leaving its largest source out: the other sources' rms (0.269) covers 75% of
# Megatron-Bridge's 122 runs; the whole family's covers 88% of its 188 runs (dev 48: rms 0.454,
# holdout 140: 0.298). A hybrid Mamba-2 model with experts (Nemotron 3 Nano) takes the hybrid one.
FAMILY_LOG_SD: dict[str, tuple[float, int, int]] = {
    "hybrid": (0.1554, 30, 3),
    "moe": (0.3371, 187, 5),
}
FAMILY_NAMES = {"hybrid": "hybrid Mamba-2 models", "moe": "mixture-of-experts models"}


def model_family(model: object) -> str:
    """The family of `model` (a `Model`) whose spread its stack's does not describe (a key of
    `FAMILY_LOG_SD`): "hybrid" for a hybrid Mamba-2 model (`Model.hybrid_pattern`, with experts or
    not), "moe" for another mixture of experts (`Model.experts`), "" otherwise."""
    if getattr(model, "hybrid_pattern", ""):
        return "hybrid"
    return "moe" if getattr(model, "experts", 0) else ""


def family_basis(family: str) -> str:
    """How a model family's interval was measured, in words (`FAMILY_LOG_SD`)."""
    _, runs, sources = FAMILY_LOG_SD[family]
    return f"how far the model missed {runs} published runs of {FAMILY_NAMES[family]} ({sources} sources)"


# A preset without published runs of its own that runs the engine of one that has them takes that
# one's spread: Composer and Modalities run PyTorch FSDP1 as the fsdp preset does (their own flags
# on it), Megatron-LM of 2021 is the 2022 release's code before selective recomputation and
# sequence parallelism. (nanotron's defaults would take nanotron's, which has no published runs.)
# Eager torchtitan took torchtitan-compile's until AWS's blog gave it a run of its own (this
# session's ttdata: its spread, the between-source part borrowed, is now its own).
SPREAD_OF = {
    "composer": "fsdp",
    "modalities": "fsdp",  # its published runs are the fsdp stack's (Modalities' scaling tables)
    "megatron-lm-2021": "megatron-lm-2022",
}


def spread_stack(framework: str) -> str:
    """The stack whose published runs `framework`'s interval rests on (`SPREAD_OF`; itself)."""
    return SPREAD_OF.get(framework, framework)


def stack_basis(framework: str) -> str:
    """What an uncalibrated interval for `framework` rests on, in words. A stack without a spread may
    still have published rows that no fold prices (DeepSpeed's: encoders, host offload, no ZeRO stage
    stated; ColossalAI's: layouts incomplete): "no published runs ... that the model prices"."""
    stack = spread_stack(framework)
    known = STACK_LOG_SD.get(stack)
    if known is None:
        widest = max(STACK_LOG_SD, key=lambda k: STACK_LOG_SD[k][0])
        if STACK_LOG_SD[widest][0] + 5e-4 >= NO_DATA_LOG_SD:
            return (
                f"no published runs of {framework} that the model prices: as wide as the widest of the "
                f"{NO_DATA_STACKS} stacks with priced runs ({widest}), wider than how far whole stacks missed "
                "when each was held out"
            )
        return (
            f"no published runs of {framework} that the model prices: how far whole stacks missed when each "
            f"was held out, across the {NO_DATA_STACKS} stacks with priced runs"
        )
    if stack != framework:
        _, runs, sources = known
        if sources == 1:
            return (
                f"no published runs of {framework} itself: how far the model missed {runs} published {stack} runs "
                "(1 source, the same engine) with it held out, the between-source spread borrowed from other stacks"
            )
        return (
            f"no published runs of {framework} itself: how far the model missed {runs} published {stack} runs "
            f"({sources} sources, the same engine) with each source held out"
        )
    _, runs, sources = known
    if sources == 1:
        return (
            f"how far the model missed {runs} published {framework} {'run' if runs == 1 else 'runs'} (1 source) "
            "with it held out, "
            "the between-source spread borrowed from other stacks"
        )
    return f"how far the model missed {runs} published {framework} runs ({sources} sources) with each source held out"


# The fields (YAML names) a GPU file may change from its `like:` built-in and stay that GPU's sibling,
# the same silicon in another memory system or under another power limit, as FITTED_FROM's are
# (h200-sxm-141gb and h100-sxm5-64gb differ from the h100-sxm5-80gb in memory bandwidth, a800-sxm4-80gb
# from the a100-sxm4-80gb in its power limit): one more source's offset, GPU_SOURCE_LOG_SD. A changed
# peak, efficiency, SM count or kernel (h100-pcie-80gb's peak and SMs: ASSUMED_FROM) is a GPU the fit
# never measured: UNFITTED_LOG_SD.
SIBLING_FIELDS = ("memory_bandwidth", "tdp")


def gpu_term(gpu: object, support: dict | None = None) -> tuple[str, str]:
    """(how the interval takes `gpu`'s sustained efficiency: "fitted", "sibling" or "unfitted"; the
    GPU whose fit that is) for `gpu`, a built-in's name or a `Gpu`, whose `fit_name` and `fit_changed`
    (a GPU file's `like:`, `presets.like_files.gpu_fit`) name the built-in it carries and what it changed;
    `support`: the fitted GPUs (GPU_FIT's keys)."""
    fitted = GPU_FIT if support is None else support
    name = gpu if isinstance(gpu, str) else str(getattr(gpu, "name", ""))
    key = name if isinstance(gpu, str) else str(getattr(gpu, "fit_name", "") or name)
    changed = [] if isinstance(gpu, str) else [c for c in str(getattr(gpu, "fit_changed", "")).split(", ") if c]
    if key in fitted:
        kind, root = "fitted", key
    elif FITTED_FROM.get(key, "") in fitted:
        kind, root = "sibling", FITTED_FROM[key]
    else:
        return "unfitted", key
    if changed:
        kind = "sibling" if all(c in SIBLING_FIELDS for c in changed) else "unfitted"
    return kind, root


def gpu_basis(gpu: object, held_out: bool = True) -> str:
    """What the GPU's term of an uncalibrated interval rests on, in words: a fitted GPU's
    uncertainty is inside the misses, held-out ones (each refitted it) or, for a model family's
    (`held_out` False), misses of runs the fit never used; the others' is added. `gpu`: a built-in's
    name or a `Gpu`; a GPU file's `like:` says which built-in's fit it carries and what it changed."""
    name = gpu if isinstance(gpu, str) else str(getattr(gpu, "name", ""))
    kind, root = gpu_term(gpu)
    like = "" if isinstance(gpu, str) else str(getattr(gpu, "fit_name", ""))
    changed = "" if isinstance(gpu, str) else str(getattr(gpu, "fit_changed", ""))
    said = f"like {like}, " + (f"{changed} changed" if changed else "no field its fit measured changed")
    if kind == "fitted":
        how = "refitted without each source" if held_out else "runs the fit did not use"
        text = f"the uncertainty of the {root}'s fitted efficiency included ({how})"
        return text + (f", which the {name} carries ({said})" if like else "")
    if kind == "sibling":
        text = f"plus the uncertainty of the {name}'s efficiency, taken from the {root}'s fit"
        return text + (f" ({said}: the same silicon in another system)" if like else "")
    text = f"plus the uncertainty of the {name}'s efficiency, fitted on no published run"
    if not like:
        return text
    if gpu_term(like)[0] == "unfitted":
        return f"{text} (like {like}, which no published run fitted either)"
    return f"{text} ({said}: the {like}'s fit did not measure that)"


def family_widens(framework: str, family: str) -> bool:
    """Whether the model family's spread (`FAMILY_LOG_SD`) is wider than its stack's (`STACK_LOG_SD`;
    `NO_DATA_LOG_SD` for a stack without published runs): the interval then rests on the family's."""
    stack = STACK_LOG_SD.get(spread_stack(framework), (NO_DATA_LOG_SD, 0, 0))[0]
    return family in FAMILY_LOG_SD and FAMILY_LOG_SD[family][0] > stack


def uncalibrated_log_sd(gpu: object, framework: str = "megatron-core", family: str = "") -> float:
    """The uncalibrated 80% interval's log-space spread for a training step on `gpu` (a built-in's
    name or a `Gpu`, `gpu_term`) run by `framework`: its stack's leave-one-source-out spread
    (STACK_LOG_SD; NO_DATA_LOG_SD without published runs), or its model family's where that is wider
    (FAMILY_LOG_SD; "" for none), widened by the uncertainty of that GPU's sustained efficiency (above)."""
    known = FAMILY_LOG_SD if family_widens(framework, family) else STACK_LOG_SD
    stack = known.get(family if known is FAMILY_LOG_SD else spread_stack(framework), (NO_DATA_LOG_SD, 0, 0))[0]
    return gpu_widened_log_sd(stack, gpu)


def gpu_fit_var(
    support: dict[str, tuple[int, int]], group_sd: float, source_sd: float, unfitted_sd: float, gpu: object
) -> float:
    """The variance of ln(step) from `gpu`'s sustained efficiency (see GPU_FIT) that the stacks'
    leave-one-source-out spreads do not already hold: 0 for a GPU fitted on published runs (its
    fit's error is in every fold's errors); one source_sd^2 for a GPU that took a sibling's scale
    (FITTED_FROM: its own system sits like one more source); unfitted_sd^2 for one fitted on nothing
    (`gpu_term`: a GPU file's `like:` takes its built-in's, or a sibling's or none where it changed
    what that fit measured). `group_sd` describes the fit's own error (`interval_model.GpuFit.fit_var`),
    not an addition."""
    del group_sd  # held by the leave-one-source-out errors
    kind, _ = gpu_term(gpu, support)
    return {"fitted": 0.0, "sibling": source_sd**2}.get(kind, unfitted_sd**2)


def gpu_widened_log_sd(log_sd: float, gpu: object) -> float:
    """A stack's (or model family's) spread as `uncalibrated_log_sd` widens it for `gpu` (a name or a
    `Gpu`): the uncertainty of that GPU's sustained efficiency added in quadrature (`gpu_fit_var` at the
    shipped GPU_FIT). `analyses.loso` checks the same interval on each left-out source, at its fold's fit."""
    from math import sqrt

    var = gpu_fit_var(GPU_FIT, GPU_GROUP_LOG_SD, GPU_SOURCE_LOG_SD, UNFITTED_LOG_SD, gpu)
    return sqrt(log_sd**2 + var)
