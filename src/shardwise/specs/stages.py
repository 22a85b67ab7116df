"""How the layers are split over the pipeline stages (even or not).

The engines price three kinds of stage: the first (it also runs the embedding), the middle
ones, and the last (it also runs the output layer and the loss). A split is therefore described
by the layers of the first and the last stage, the layers of all middle stages together, and
the layers of the fullest middle stage (the one that sets the pace):

- automatic: as even as possible; when pp does not divide the layers the middle stages take
  the extra layers first (the first and last stages carry the embedding and the output layer),
  then the first stage. Llama 3.1 405B (126 layers) at pp = 8: 15, 16 x 6, 15, which is also
  what Megatron-LM's `--account-for-embedding-in-pipeline-split` and
  `--account-for-loss-in-pipeline-split` give;
- first and/or last fixed (Megatron-LM `--decoder-first-pipeline-num-layers`,
  `--decoder-last-pipeline-num-layers`): the other stages split the rest as evenly as possible;
- explicit: one count per stage (`Plan.stage_layers`);
- balanced by compute as nanotron's `build_model` does (`compute_balanced_counts`; the nanotron
  preset's default, given as an explicit split by the request layer);
- DeepSpeed's PipelineModule over GPTModelPipe's transformer layers (`deepspeed_balanced_counts`:
  the first stages ceil(layers / pp), the last the rest; the megatron-deepspeed preset's default,
  likewise given as an explicit split);
- InternEvo's `partition_uniform` (`uniform_last_counts`: floor(layers / pp) each, one more on
  each of the last layers mod pp stages, the output layer's; the internevo preset's default).

With v model chunks per GPU (interleaved schedule) each chunk holds 1/v of its stage's layers.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from shardwise.specs._checks import Number, SpecError
from shardwise.specs.memo import kept


@dataclass(frozen=True)
class StageSplit:
    """Layers per stage (arrays broadcast with the plan). With one stage `first` = `last` = the
    model's layers and there are no middle stages."""

    pp: Number
    first: Number
    last: Number
    middle_total: Number  # all middle stages together (0 when pp <= 2)
    middle_max: Number  # the fullest middle stage (0 when pp <= 2)
    middle_min: Number  # the emptiest middle stage (0 when pp <= 2)
    counts: tuple[int, ...] | None = None  # an explicit split, every stage's count

    @property
    def total(self) -> Number:
        return np.where(np.asarray(self.pp) == 1, self.first, self.first + self.middle_total + self.last)


@kept
def stage_split(
    layers: Number,
    pp: Number,
    first_layers: Number = 0,
    last_layers: Number = 0,
    explicit: tuple[int, ...] | None = None,
) -> StageSplit:
    """The split of `layers` over `pp` stages (see the module docstring); 0 = automatic."""
    L = np.asarray(layers, dtype=float)
    p = np.asarray(pp, dtype=float)
    if explicit is not None:
        mids = explicit[1:-1]
        first, last = float(explicit[0]), float(explicit[-1])
        return StageSplit(
            p, first, last, float(sum(mids)), float(max(mids, default=0)), float(min(mids, default=0)), tuple(explicit)
        )
    f_given, l_given = np.asarray(first_layers, dtype=float), np.asarray(last_layers, dtype=float)
    f_set, l_set = f_given > 0, l_given > 0
    base, r = np.floor(L / p), np.mod(L, p)
    extra_mid = np.where(p > 2, np.minimum(r, p - 2), 0.0)
    if not (np.any(f_set) or np.any(l_set)):  # automatic everywhere: the general rules below reduce to this
        first, last = base + r - extra_mid, base
        middle_total = np.where(p > 2, L - first - last, 0.0)
        n_mid = np.maximum(p - 2, 1.0)
        return StageSplit(p, first, last, middle_total, np.ceil(middle_total / n_mid), np.floor(middle_total / n_mid))
    others = np.maximum(p - 1, 1.0)  # with one end fixed, the other stages share the rest
    first = np.where(f_set, f_given, np.where(l_set, np.floor((L - l_given) / others), base + r - extra_mid))
    last = np.where(l_set, l_given, np.where(f_set, np.floor((L - f_given) / others), base))
    two = p == 2
    last = np.where(two & f_set & ~l_set, L - first, last)
    first = np.where(two & ~f_set, L - last, first)
    first = np.where(p == 1, L, first)
    last = np.where(p == 1, L, last)
    middle_total = np.where(p > 2, L - first - last, 0.0)
    n_mid = np.maximum(p - 2, 1.0)
    hi = np.where(p > 2, np.ceil(middle_total / n_mid), 0.0)
    lo = np.where(p > 2, np.floor(middle_total / n_mid), 0.0)
    return StageSplit(p, first, last, middle_total, hi, lo)


def split_ok(split: StageSplit, layers: Number, pp: Number, vpp: Number = 1) -> Number:
    """Where a split is valid (see `check_split`), element by element."""
    p, v = np.asarray(pp), np.asarray(vpp)
    ends = np.maximum(v - 1, 1)
    ok = np.asarray(split.first) >= ends
    ok = ok & ((p <= 1) | (np.asarray(split.last) >= ends))
    ok = ok & ((p <= 2) | (np.asarray(split.middle_min) >= np.maximum(v, 1)))
    return ok & (np.asarray(split.total) == np.asarray(layers))


def check_split(split: StageSplit, layers: Number, pp: Number, vpp: Number = 1) -> None:
    """Every stage needs at least one layer per model chunk (the first and last stages one chunk
    fewer: that chunk may hold only the embedding or the loss, as Megatron-LM's split accounting
    for them does); raises SpecError naming the stage."""
    p = np.asarray(pp)
    v = np.asarray(vpp)
    ends = np.maximum(v - 1, 1)
    checks = (
        ("first", split.first, np.ones_like(p, dtype=bool), ends),
        ("last", split.last, p > 1, ends),
        ("middle", split.middle_min, p > 2, np.maximum(v, 1)),
    )
    for name, n, applies, need in checks:
        n_arr, a, vv, need_arr = np.broadcast_arrays(np.asarray(n), np.asarray(applies), v, need)
        bad = a & (n_arr < need_arr)
        if np.any(bad):
            i = np.flatnonzero(bad)[0]
            raise SpecError(
                f"plan: the {name} pipeline stage would get {int(n_arr.flat[i])} layer(s) of "
                f"{int(np.broadcast_to(np.asarray(layers), bad.shape).flat[i])} "
                f"(pp={int(np.broadcast_to(p, bad.shape).flat[i])}, vpp={int(vv.flat[i])}); each stage needs at "
                "least one layer per model chunk: use fewer stages or change first/last_stage_layers"
            )
    total, given = np.broadcast_arrays(np.asarray(split.total), np.asarray(layers))
    bad = total != given
    if np.any(bad):
        i = np.flatnonzero(bad)[0]
        raise SpecError(
            f"plan: the stage split adds up to {int(total.flat[i])} layers but the model has {int(given.flat[i])}"
        )


def stage_layer_list(split: StageSplit, pp: int) -> list[int]:
    """Layers of every stage, in order, for one plan (the middle stages take the extras first)."""
    if split.counts is not None:
        return list(split.counts)
    if pp == 1:
        return [int(np.asarray(split.first))]
    mids = pp - 2
    total = int(np.asarray(split.middle_total))
    base, extra = divmod(total, mids) if mids else (0, 0)
    middle = [base + (1 if i < extra else 0) for i in range(mids)]
    return [int(np.asarray(split.first)), *middle, int(np.asarray(split.last))]


def compute_balanced_counts(layers: int, pp: int, layer_cost: float, head_cost: float) -> tuple[int, ...] | None:
    """Layers per stage as nanotron places its pipeline blocks (huggingface/nanotron
    src/nanotron/models/base.py `build_model`, v0.4 to main): the blocks in order (the embedding at
    no cost, the layers at `layer_cost` each, the final norm at none, the output layer at
    `head_cost`), stage k taking blocks until their running cost first exceeds (k + 1) / pp of the
    total, the block that crosses it included. The first stages so take one layer more than an
    even share and the last stage fewer, the output layer counting for head_cost / layer_cost
    layers (LlamaModel.get_block_compute_costs: 4 h^2 + 3 f h a layer, V h the output layer).
    None where a stage would hold no layer (the output layer alone, or only the loss), which a
    `StageSplit` cannot describe."""
    total = layers * layer_cost + head_cost
    counts, stage, running = [0] * pp, 0, 0.0
    for _ in range(layers):
        counts[stage] += 1
        running += layer_cost
        if running > total * (stage + 1) / pp:
            stage += 1
            if stage == pp:
                return None
    return tuple(counts) if min(counts) >= 1 else None


# GPTModelPipe's specs around its transformer layers (Megatron-DeepSpeed megatron/model/gpt_model.py,
# fp16 or bf16): _to_float16, the tied EmbeddingPipe and a transpose before them; the transpose
# back, the final LayerNorm, the tied EmbeddingPipe for the logits and float16_to_fp32 after them
GPT_PIPE_SPECS_BEFORE_LAYERS = 3
GPT_PIPE_SPECS_AFTER_LAYERS = 4


def deepspeed_balanced_counts(layers: int, pp: int) -> tuple[int, ...] | None:
    """Layers per stage as DeepSpeed's PipelineModule places GPTModelPipe's specs with
    `partition_method='type:transformer'` (weight 1 a transformer layer, 0 every other spec):
    `partition_balanced` of deepspeed/runtime/utils.py in v0.6 to v0.12.4, a binary search for the
    smallest heaviest stage and `_lprobe`'s greedy fill, ported as it is. The first stages take
    ceil(layers / pp) and the last the rest (70 layers over 12 stages: 6 x 11 and 4, the embedding
    on a 6-layer first stage). None where a stage would get no layer (which DeepSpeed's pipeline
    cannot run either)."""
    weights = [0] * GPT_PIPE_SPECS_BEFORE_LAYERS + [1] * layers + [0] * GPT_PIPE_SPECS_AFTER_LAYERS
    if layers < pp:
        return None
    prefix = list(np.cumsum(weights))
    lower, upper, eps = prefix[-1] / pp, float(prefix[-1]), 1e-3
    while upper > lower + eps:  # _rb_partition_balanced
        mid = lower + (upper - lower) / 2
        if _lprobe(prefix, pp, mid)[1]:
            upper = mid
        else:
            lower = mid + eps
    parts, ok = _lprobe(prefix, pp, upper)
    counts = tuple(int(sum(weights[parts[i] : parts[i + 1]])) for i in range(pp))
    return counts if ok and min(counts) >= 1 else None


def uniform_last_counts(layers: int, pp: int) -> tuple[int, ...] | None:
    """Layers per stage as InternEvo places them (internlm/solver/pipeline_utils.py `partition_uniform`,
    v0.2.0 to v0.2.3 and the later internlm/core/parallel/shard.py, one model chunk): floor(layers /
    pp) each, one more on each of the last layers mod pp stages (`left = pp - layers % pp`, stage p
    taking `chunk_size + (p >= left)`), so the remainder sits with the output layer (32 layers over 6
    stages: 5, 5, 5, 5, 6, 6). None where a stage would get no layer (InternEvo raises "Some nodes in
    Pipeline have no requests")."""
    if layers < pp:
        return None
    base, extra = divmod(layers, pp)
    return tuple(base + (1 if p >= pp - extra else 0) for p in range(pp))


def stack_split_counts(rule: str, model: object, pp: int) -> tuple[int, ...] | None:
    """Layers per stage of a stack's own split rule (`presets.framework_fields.PIPELINE_SPLITS`: "compute" is
    nanotron's `compute_balanced_counts`, "deepspeed" DeepSpeed's `deepspeed_balanced_counts`,
    "uniform-last" InternEvo's `uniform_last_counts`) for
    `model` (a `Model`) on pp stages of one model chunk; None for "even", at pp <= 1, or where the
    rule leaves a stage without a layer (the automatic split then applies). The request layer's
    default and the planner's candidates both take it from here."""
    layers = int(model.layers)  # type: ignore[attr-defined]
    if rule == "even" or pp <= 1:
        return None
    if rule == "deepspeed":
        return deepspeed_balanced_counts(layers, pp)
    if rule == "uniform-last":
        return uniform_last_counts(layers, pp)
    h, f = model.hidden, model.ffn_hidden  # type: ignore[attr-defined]
    # LlamaModel.get_block_compute_costs: 4 h^2 for the attention's projections, 3 f h for the MLP
    layer_cost = 4.0 * h * h + (3.0 if model.gated_mlp else 2.0) * f * h  # type: ignore[attr-defined]
    return compute_balanced_counts(layers, pp, layer_cost, float(model.vocab * h))  # type: ignore[attr-defined]


def _lprobe(prefix: list[int], pp: int, bottleneck: float) -> tuple[list[int], bool]:
    """DeepSpeed's `_lprobe`: stage ends filling each stage up to `bottleneck`, and whether the
    last stage stays under it."""
    n = len(prefix)
    parts = [0] + [n] * pp
    bsum, chunk = bottleneck, n // pp
    step = chunk
    for p in range(1, pp):
        while step < n and prefix[step] < bsum:
            step += chunk
        parts[p] = bisect.bisect_left(prefix, bsum, lo=step - chunk, hi=min(step, n))
        if parts[p] == n:
            return parts, prefix[-1] - prefix[parts[p - 1]] < bottleneck
        bsum = prefix[parts[p] - 1] + bottleneck
    return parts, bsum >= prefix[-1]


def engine_split_counts(engine: str, layers: int, pp: int) -> tuple[int, ...] | None:
    """Layers per stage a serving engine runs unless told (None: the automatic split, which is
    vLLM's and SGLang's `get_pp_indices`: the extra layers from the second-to-last stage backwards).
    TensorRT-LLM: `Mapping.pp_layers`, torch.tensor_split(arange(layers), pp), the first
    layers % pp ranks one layer more (NVIDIA/TensorRT-LLM tensorrt_llm/mapping.py @05ebebb2; with
    no `pp_partition` given): Llama 3.1 405B at pp = 8, 16 x 6, 15, 15."""
    if engine != "tensorrt-llm" or pp <= 1 or layers % pp == 0:
        return None
    base, extra = divmod(layers, pp)
    return tuple(base + (1 if r < extra else 0) for r in range(pp))


def plan_split(layers: Number, plan: object) -> StageSplit:
    """The split a `Plan` asks for."""
    return stage_split(
        layers,
        plan.pp,  # type: ignore[attr-defined]
        plan.first_stage_layers,  # type: ignore[attr-defined]
        plan.last_stage_layers,  # type: ignore[attr-defined]
        plan.stage_layers,  # type: ignore[attr-defined]
    )


def describe_split(layers: int, pp: int, first: int = 0, last: int = 0, explicit: tuple[int, ...] | None = None) -> str:
    """'15, 16 x6, 15' for an uneven split; '' when every stage has the same layers."""
    counts = stage_layer_list(stage_split(layers, pp, first, last, explicit), pp)
    if len(set(counts)) <= 1:
        return ""
    return describe_counts(counts)


def describe_counts(counts: list[int], times: str = " x") -> str:
    """Runs of equal counts: [15, 16, 16, 15] -> '15, 16 x2, 15' (`times` between a count and its run)."""
    runs: list[list[int]] = []
    for c in counts:
        if runs and runs[-1][0] == c:
            runs[-1][1] += 1
        else:
            runs.append([c, 1])
    return ", ".join(f"{c}{times}{n}" if n > 1 else str(c) for c, n in runs)


def moe_layers_below(index: Number, dense_layers: int, moe_every: int) -> Number:
    """Mixture-of-experts layers among the first `index` layers: after `dense_layers` dense ones,
    every `moe_every`-th layer (0-based layers dense_layers + moe_every - 1, + 2 moe_every - 1, ...;
    Llama 4's interleave step, Hugging Face `Llama4TextConfig.moe_layers`)."""
    return np.maximum(np.floor((np.asarray(index, dtype=float) - dense_layers) / moe_every), 0.0)


def moe_split(split: StageSplit, layers: Number, dense_layers: int, moe_every: int) -> StageSplit:
    """The mixture-of-experts layers of each stage of `split` (the stages hold consecutive layers;
    the interleaved schedule's chunks are counted as if they were). The fullest middle stage is
    taken to hold the most MoE layers a middle stage can: all its layers when every layer past
    the dense ones is MoE, 1 / moe_every of them (rounded up) otherwise, and no more than the
    middle stages hold together."""
    p = np.asarray(split.pp, dtype=float)
    total = moe_layers_below(layers, dense_layers, moe_every)
    first = moe_layers_below(split.first, dense_layers, moe_every)
    last = total - moe_layers_below(layers - np.asarray(split.last, dtype=float), dense_layers, moe_every)
    first = np.where(p == 1, total, first)
    last = np.where(p == 1, total, last)
    middle_total = np.where(p > 2, total - first - last, 0.0)
    fullest = np.minimum(np.ceil(np.asarray(split.middle_max, dtype=float) / moe_every), middle_total)
    emptiest = np.where(p > 2, np.floor(np.asarray(split.middle_min, dtype=float) / moe_every), 0.0)
    return StageSplit(split.pp, first, last, middle_total, fullest, np.minimum(emptiest, fullest))


def chunk_recomputed_layers(stage_layers: Number, vpp: Number, per_chunk: Number) -> Number:
    """Layers of a stage of `stage_layers` layers in `vpp` model chunks (as even as possible: 12 in
    5 chunks are 3, 3, 2, 2, 2) that are recomputed whole when the first `per_chunk` of every chunk
    are (Megatron-LM's block method, megatron/core/transformer/transformer_block.py
    `_checkpointed_forward`: a chunk's layers below `--recompute-num-layers` are checkpointed)."""
    n, v = np.asarray(stage_layers, dtype=float), np.maximum(np.asarray(vpp, dtype=float), 1.0)
    k = np.asarray(per_chunk, dtype=float)
    q = np.floor(n / v)
    r = n - q * v  # chunks holding q + 1 layers
    return r * np.minimum(k, q + 1) + (v - r) * np.minimum(k, q)


def recomputed_split(split: StageSplit, vpp: Number, per_chunk: Number) -> StageSplit:
    """The layers of each stage of `split` recomputed whole under `Plan.recompute_layers`
    (`chunk_recomputed_layers`), in the same shape: first, last, all middle stages together,
    the fullest and the emptiest middle stage."""
    p = np.asarray(split.pp, dtype=float)

    def whole(n: Number) -> Number:
        return chunk_recomputed_layers(n, vpp, per_chunk)

    if split.counts is not None:
        mids = split.counts[1:-1]
        middle_total = sum((whole(c) for c in mids), start=0.0 * p)
    else:  # k middle stages hold middle_max layers, the others middle_min
        n_mid = np.maximum(p - 2, 0.0)
        hi, lo = np.asarray(split.middle_max, dtype=float), np.asarray(split.middle_min, dtype=float)
        k = np.where(
            hi > lo, (np.asarray(split.middle_total, dtype=float) - n_mid * lo) / np.maximum(hi - lo, 1.0), n_mid
        )
        middle_total = k * whole(hi) + (n_mid - k) * whole(lo)
    middle_total = np.where(p > 2, middle_total, 0.0)
    first, last = whole(split.first), whole(split.last)
    return StageSplit(split.pp, first, last, middle_total, whole(split.middle_max), whole(split.middle_min))


def every_nth_whole(layers: Number, pp: Number, vpp: Number, every: int) -> Number:
    """The layers of each model chunk recomputed whole (`Plan.recompute_layers`) by a stack whose
    default checkpoints every `every`-th layer (torchtitan's job config before pytorch/torchtitan#2357:
    activation_checkpoint mode "selective", selective_ac_option "2", `_apply_ac_to_transformer_block`
    wrapping every second block): floor(layers of a chunk of the even split / every); 0 where
    `every` is 0. Arrays broadcast (crossover and sweep vary layers and pp)."""
    if every <= 0:
        return 0
    chunks = np.maximum(np.asarray(pp), 1).astype(np.int64) * np.maximum(np.asarray(vpp), 1).astype(np.int64)
    out = np.asarray(layers).astype(np.int64) // chunks // int(every)
    return int(out) if out.ndim == 0 else out
