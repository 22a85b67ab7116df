"""SGLang's dense parts under data-parallel attention: the dense MLPs (DeepSeek's first layers), the
shared experts and the output layer run TP-split over the whole group of the replica's tp x dp
GPUs on the gathered tokens, and the input embedding is whole on every GPU.

Read in sglang 0.5.6.post2 (the PyPI wheel; commit fd1216c names that version), its defaults
(`--moe-dense-tp-size` unset, `--enable-dp-lm-head` off, `--moe-a2a-backend none`):

- `models/deepseek_v2.py`: a dense layer's `DeepseekV2MLP` and an MoE layer's `shared_experts` are
  built without a tp size, so their linears split over SGLang's TP group, which under
  `--enable-dp-attention` is every GPU of the replica (`--tp` = tp x dp here; the shared experts
  whole only under DeepEP / Mooncake or FlashInfer's FP4 all-gather, `tp_size=1`; shared-expert
  fusion is off under expert parallelism on NVIDIA GPUs, `determine_num_fused_shared_experts`);
- `layers/communicator.py` `LayerScatterModes._compute_mlp_mode`: a dense layer's MLP runs in the
  FULL mode, as an MoE layer's does: after attention `dp_gather_partial` gathers the group's hidden
  states, the MLP runs on all of them, and `dp_reduce_scatter_tensor` (a decode batch) or an
  all-reduce and `dp_scatter` (a batch with prompt tokens) return each rank's rows: the gather
  the routed experts pay (`dp_gather_s`), once more in every dense layer; in an MoE
  layer the shared experts' output joins the routed experts' before that one reduce-scatter;
- the output layer (`ParallelLMHead(use_attn_tp_group=enable_dp_lm_head)`) splits the vocabulary
  over the whole group; `layers/logits_processor.py` `_get_logits` gathers the sampled tokens'
  hidden states (`dp_gather_replicate`), multiplies them by its V / G rows, all-gathers the logits
  over the group (`tensor_model_parallel_all_gather`) and keeps its own rows (`dp_scatter`): the
  buffer holds the dp attention groups' sampled tokens (one count per group), gathered by an
  all-reduce whatever the batch (`LogitsMetadata` sets SUM_LEN);
- the input embedding: `VocabParallelEmbedding(enable_tp=not is_dp_attention_enabled())`, whole.

So a GPU holds 1 / G of those weights, G = tp x dp, instead of 1 / tp (DeepSeek-V3 in FP8 on 8
GPUs: 1.2 GB of dense MLPs, 2.6 GB of shared experts and 1.9 GB of 16-bit output layer, 5.0 GB
less a GPU than whole), and reads 1 / G of them per step on G times the tokens: the same FLOPs.
Priced as the difference from the layer as `engines.costs` / `engines.iteration` price it (the MLP's
GEMMs at 1 / tp on T tokens) to the same GEMMs at 1 / G on the gathered dp T tokens (a rank's T / tp
under sequence parallelism, G of them: `physics.moe.routed_tokens`); the MLP's element-wise work and
activation casts are left as they were (equal at tp = 1). `--moe-dense-tp-size 1` (each rank's dense
MLPs whole on its own tokens, no gather) and `--enable-dp-lm-head` (the output layer over the
attention TP group) are not exposed. vLLM runs each data-parallel rank as its own engine with its
own TP group: its dense layers, shared experts and output layer split over tp alone, as the layer
prices them, but for its sequence-parallel MoE (`vllm_sequence_parallel_moe`, per model file;
docs/serving.md). SGLang's Mixtral and Grok files have no data-parallel attention: refused
(`refuse_unsupported`, by the model's architecture, `specs.Model.architecture`).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from shardwise.engines.costs import StageCost
from shardwise.engines.dp_attention import dp_attention
from shardwise.engines.model_files import (  # noqa: F401  (re-exported: the rules by model file)
    NO_DP_ATTENTION_ARCHITECTURES,
    VLLM_DEEPSEEK_ARCHITECTURES,
    VLLM_QWEN_REDUCE_SCATTER_ARCHITECTURES,
    VLLM_SEQUENCE_PARALLEL_MOE,
    VLLM_SEQUENCE_PARALLEL_VERSION,
    no_dp_attention_block,
    vllm_deepseek_file,
    vllm_layer_sequence_parallel,
    vllm_sequence_parallel_file,
    vllm_sequence_parallel_moe,
)
from shardwise.physics.collectives import Fabric
from shardwise.physics.compute import attention_precision, linear_times, linears_times, memory_s
from shardwise.physics.flops import gemm, logits_forward
from shardwise.physics.layer_parts import dense_mlp_gemms
from shardwise.physics.moe import ROUTER_BYTES, ROUTER_FP32_PASSES, routed_tokens
from shardwise.physics.moe_dispatch import DP_GATHER_BYTES_PER_ELEMENT, allgather_dispatch_bytes
from shardwise.physics.params import mlp_params
from shardwise.specs import Model, Plan, Scenario
from shardwise.specs._checks import Number, SpecError
from shardwise.specs.stages import StageSplit, moe_split


def refuse_unsupported(model: Model, plan: Plan) -> None:
    """SGLang's data-parallel attention (dispatcher 'dp-gather', ep x etp > tp) on a Mixtral / Grok
    model (its architecture, whatever its name): those model files have no such path, so the plan
    is refused in one line."""
    dispatch = model.is_moe and plan.moe_dispatcher == "dp-gather"
    if dispatch and no_dp_attention_block(model) and np.any(dp_attention(plan)):
        raise SpecError(
            f"model {model.name!r} (architecture {model.architecture}): SGLang runs Mixtral / Grok without "
            "data-parallel attention (models/mixtral.py, grok.py): use ep x etp = tp"
        )


def splits_over_group(model: Model, plan: Plan) -> Number:
    """Where SGLang's dense parts split over the whole tp x dp group: a mixture of experts under
    data-parallel attention whose dispatcher is SGLang's gather (`Plan.moe_dispatcher` 'dp-gather',
    set by the engine preset)."""
    if not model.is_moe or plan.moe_dispatcher != "dp-gather":
        return np.asarray(False)
    return np.asarray(dp_attention(plan), dtype=bool)


def group_size(plan: Plan) -> Number:
    """G: the GPUs of a pipeline stage of the replica, tp x dp = ep x etp under data-parallel attention."""
    return np.asarray(plan.ep, dtype=float) * np.asarray(plan.expert_tp, dtype=float)


def dp_gather_s(
    model: Model, fabric: Fabric, place: dict[str, Number], plan: Plan, tokens: Number, extend: Number
) -> Number:
    """SGLang's gather and combine around an MLP under data-parallel attention for `tokens` tokens a
    rank (`physics.moe_dispatch.DP_GATHER_BYTES_PER_ELEMENT`): the G ranks' hidden states gathered in
    16 bits, no routing (every rank routes the gathered tokens), and the outputs reduce-scattered
    (a decode batch, MAX_LEN padding); where `extend` (prompt tokens on any rank, SUM_LEN) two
    all-reduces of the summed-length buffer instead. The routed experts pay it (`engines.moe.experts_parts`),
    and under SGLang's defaults every dense layer too (`dense_deltas`)."""
    size = np.asarray(plan.ep) * np.asarray(plan.expert_tp)
    group = fabric.group(size, np.minimum(np.asarray(place["ep"]) * np.asarray(place["etp"]), size))
    hidden, _ = allgather_dispatch_bytes(model, tokens, size, DP_GATHER_BYTES_PER_ELEMENT, no_routing=True)
    moved = group.all_gather(hidden) + group.reduce_scatter(hidden)
    return np.where(np.asarray(extend, dtype=bool), 2 * group.all_reduce(hidden), moved)


def group_params_delta(
    model: Model, plan: Plan, split: StageSplit
) -> tuple[tuple[Number, Number, Number], tuple[Number, Number, Number]]:
    """(transformer-layer parameters, all parameters) one GPU of the first, fullest middle and last
    stage holds beyond what `engines.moe.stage_params` counts (negative: fewer): the dense MLPs and
    shared experts at 1 / G instead of 1 / tp, the input embedding whole instead of 1 / tp, the
    output layer at 1 / G (an embedding tied to it and one stage: the whole table, SGLang's
    `lm_head = embed_tokens`). Zeros where `splits_over_group` is false, but vLLM's shared experts
    whole where `vllm_sequence_parallel_moe`."""
    on = splits_over_group(model, plan)
    t, g = np.asarray(plan.tp, dtype=float), group_size(plan)
    moe = moe_split(split, model.layers, model.dense_layers, model.moe_every)
    dense_mlp = mlp_params(model, model.ffn_hidden)
    shared = model.shared_experts * mlp_params(model, model.expert_ffn_hidden)
    share = 1.0 / g - 1.0 / t
    whole = np.where(vllm_sequence_parallel_moe(model, plan), shared * (1.0 - 1.0 / t), 0.0)  # vLLM's, whole
    layers = tuple(
        np.where(on, ((n - k) * dense_mlp + k * shared) * share, k * whole)
        for n, k in zip((split.first, split.middle_max, split.last), (moe.first, moe.middle_max, moe.last), strict=True)
    )
    table = model.vocab * model.hidden
    embedding = table * (1.0 - 1.0 / t)
    one_stage = np.asarray(plan.pp) == 1
    head = np.where(one_stage & model.tied_embeddings, 0.0, table * share)
    first = np.where(on, embedding + np.where(one_stage, head, 0.0), 0.0)
    last = np.where(on, head + np.where(one_stage, embedding, 0.0), 0.0)
    return layers, (layers[0] + first, layers[1], layers[2] + last)  # type: ignore[return-value]


def _mlp_forward_s(scn: Scenario, tokens: Number, ffn: Number, tp: Number, weight_bytes: Number | None) -> Number:
    """Forward seconds of a dense MLP's GEMMs of width `ffn` split over `tp` on `tokens` tokens."""
    plan = scn.plan
    w = plan.bytes_per_element if weight_bytes is None else weight_bytes
    gemms = dense_mlp_gemms(scn.model, tokens, ffn, tp, plan.bytes_per_element, w)
    return sum(g.forward_s for g in linears_times(gemms, scn.cluster.gpu, plan.precision, backward=False))


def dense_deltas(
    scn: Scenario,
    fabric: Fabric,
    place: dict[str, Number],
    tokens: Number,
    extend: Number,
    weight_bytes: Number | None = None,
    mlp_tp_s: Number = 0.0,
    shared_tp_s: Number = 0.0,
    attn_tp_s: Number = 0.0,
    group_tokens: Number | None = None,
) -> tuple[StageCost, StageCost]:
    """What a dense layer and an MoE layer of one micro-batch of `tokens` tokens per attention group
    (`scn` as one rank of it sees it) cost beyond the layer priced with its MLP split over tp
    (module docstring): the MLP's GEMMs over G on the gathered tokens instead of over tp on the
    group's own, and in a dense layer the gather and its combine (`dp_gather_s`,
    `extend` where the batch holds prompt tokens on any rank) in place of the MLP's TP collective
    (`mlp_tp_s`); an MoE layer's shared experts join the routed experts' combine, their own TP
    collective (`shared_tp_s`) gone. Where `extend` (SUM_LEN), `dp_gather_partial` writes every
    rank's partial attention output into the summed buffer and its all-reduce adds them
    (`_dp_gather_via_all_reduce`, is_partial): attention's own TP all-reduce (`attn_tp_s`) does not
    run, in dense and MoE layers alike (a decode batch, MAX_LEN, reduce-scatters them over the
    attention TP group before the all-gather: as the all-reduce costs). Where
    `vllm_sequence_parallel_moe`: vLLM's shared experts whole on a rank's T / tp tokens, their TP
    collective gone, and the all-gather of the experts' outputs over tp after the MoE; where
    `vllm_layer_sequence_parallel` (DeepSeek, Qwen3-Next, Qwen3.5; pp = 1) attention's all-reduce a reduce-scatter
    instead, the all-gather before the next attention. Zeros elsewhere. `group_tokens`: a rank's mean tokens over the
    group where the ranks hold different batches (default `tokens`), what the gather carries."""
    model, plan = scn.model, scn.plan
    on, whole = splits_over_group(model, plan), vllm_sequence_parallel_moe(model, plan)
    zero = StageCost(0.0, 0.0, 0.0, 0.0)
    if not np.any(on | whole):
        return zero, zero
    t, g = np.asarray(plan.tp, dtype=float), group_size(plan)
    own = routed_tokens(model, 1.0, tokens, t, plan.sequence_parallel)  # a rank's tokens
    mean = own if group_tokens is None else routed_tokens(model, 1.0, group_tokens, t, plan.sequence_parallel)
    gathered = g * mean

    def mlp(ffn: Number, n: Number = gathered, split: Number = g) -> Number:
        return _mlp_forward_s(scn, n, ffn, split, weight_bytes) - _mlp_forward_s(scn, tokens, ffn, t, weight_bytes)

    gather = dp_gather_s(model, fabric, place, plan, mean, extend)
    attention = np.where(on & np.asarray(extend, dtype=bool), -np.asarray(attn_tp_s), 0.0)  # summed in the gather
    dense = StageCost(np.where(on, mlp(model.ffn_hidden), 0.0), 0.0, np.where(on, -mlp_tp_s, 0.0) + attention, 0.0,
                      ep_forward_s=np.where(on, gather, 0.0))  # fmt: skip
    shared = model.shared_experts * model.expert_ffn_hidden
    moe_compute = mlp(shared) if shared else 0.0
    moe_compute = np.where(on, moe_compute, np.where(whole, mlp(shared, own, 1.0) if shared else 0.0, 0.0))
    tp_group, chunk = fabric.group(t, place["tp"]), tokens * model.hidden * plan.bytes_per_element
    regather = tp_group.all_gather(chunk)
    in_layer = np.where(vllm_layer_sequence_parallel(model, plan), tp_group.reduce_scatter(chunk) - attn_tp_s, 0.0)
    moe_tp = np.where(on, attention - shared_tp_s, np.where(whole, regather + in_layer - shared_tp_s, 0.0))
    moe = StageCost(moe_compute, 0.0, moe_tp, 0.0)
    return dense, moe


def ends_deltas(
    scn: Scenario,
    fabric: Fabric,
    place: dict[str, Number],
    logits_tokens: Number,
    emb_tp_s: Number = 0.0,
    head_tp_s: Number = 0.0,
) -> tuple[StageCost, StageCost]:
    """(embedding, output layer) of one micro-batch beyond their TP-split pricing (module docstring):
    the embedding whole, without its TP collective (`emb_tp_s`); the output layer's GEMM over G on
    the dp x `logits_tokens` gathered tokens instead of over tp on a group's own, its hidden states
    gathered and its logits all-gathered over the group (`engines.stage_ends.LOGITS_GATHER_BYTES`)
    in place of its TP collective (`head_tp_s`). The buffer holds the attention groups' tokens, one
    count per group (`scheduler_dp_attn_mixin.py` `tp0_info`, `LogitsMetadata.
    compute_dp_attention_metadata`: their sum), dp x, not G x, a group's; the hidden states go by
    the SUM_LEN path whatever the batch (`LogitsMetadata.from_forward_batch`: an all-reduce of
    that buffer, `dp_gather_replicate`). Zeros where `splits_over_group` is false."""
    from shardwise.engines.stage_ends import LOGITS_GATHER_BYTES

    model, plan, gpu = scn.model, scn.plan, scn.cluster.gpu
    on = splits_over_group(model, plan)
    zero = StageCost(0.0, 0.0, 0.0, 0.0)
    if not np.any(on):
        return zero, zero
    t, g, e = np.asarray(plan.tp, dtype=float), group_size(plan), plan.bytes_per_element
    x = np.asarray(logits_tokens, dtype=float)
    n = g / t * x  # the dp groups' sampled tokens
    precision = attention_precision(plan.precision)  # the output layer stays in 16 bits

    def logits_s(tokens: Number, split: Number) -> Number:
        return linear_times(logits_forward(model, 1.0, split, e, tokens), gpu, precision, backward=False).forward_s

    size = np.minimum(np.asarray(place["ep"]) * np.asarray(place["etp"]), g)
    group = fabric.group(g, size)
    hidden = group.all_reduce(n * model.hidden * DP_GATHER_BYTES_PER_ELEMENT)
    logits = group.reduce_scatter(LOGITS_GATHER_BYTES * n * model.vocab)  # an all-gather: the same ring
    head = StageCost(
        np.where(on, logits_s(n, g) - logits_s(x, t), 0.0),
        0.0,
        np.where(on & (x > 0), hidden + logits, 0.0) - np.where(on, head_tp_s, 0.0),
        0.0,
    )
    return StageCost(0.0, 0.0, np.where(on, -emb_tp_s, 0.0), 0.0), head


def gathered_router_s(scn: Scenario, tokens: Number) -> Number:
    """SGLang's gate and top-k run on the G T gathered tokens on every rank, not a rank's own T
    (`MoEGate` and `TopK` after `dp_gather_partial`, models/deepseek_v2.py `forward_normal`): the
    router GEMM's forward on G T tokens (16 bits, as `physics.moe.experts_forward` prices it on T)
    and the fp32 score passes of the (G - 1) T more tokens (`physics.moe.ROUTER_*`). About 2 x 7168
    x 256 FLOPs a token for DeepSeek-V3: microseconds a decode step, tens of them per layer in a
    prefill chunk."""
    model, plan, gpu = scn.model, scn.plan, scn.cluster.gpu
    g = group_size(plan)
    router = gemm(g * tokens, model.experts, model.hidden, plan.bytes_per_element)
    gemm_s = linear_times(router, gpu, attention_precision(plan.precision), backward=False).forward_s
    scores = (g - 1.0) * ROUTER_FP32_PASSES * ROUTER_BYTES * tokens * model.experts
    return gemm_s + memory_s(scores, gpu, kernels=0)


def with_deltas(cost: StageCost, delta: StageCost) -> StageCost:
    """`cost` plus `delta`, field by field (the forward's fields; the rest as they were)."""
    return replace(
        cost,
        compute_forward_s=cost.compute_forward_s + delta.compute_forward_s,
        tp_forward_s=cost.tp_forward_s + delta.tp_forward_s,
        ep_forward_s=cost.ep_forward_s + delta.ep_forward_s,
    )


def with_dense_parts(
    scn: Scenario,
    fabric: Fabric,
    place: dict[str, Number],
    tokens: Number,
    extend: Number,
    logits_tokens: Number,
    weight_bytes: Number | None,
    parts: tuple[StageCost, StageCost, StageCost, tuple[StageCost, object] | None],
    shared_tp_s: Number = 0.0,
    group_tokens: Number | None = None,
) -> tuple[StageCost, StageCost, StageCost, tuple[StageCost, object] | None]:
    """`parts` (a dense layer, the embedding, the output layer, (an MoE layer, its split) or None)
    with SGLang's dense parts over the group (`dense_deltas`, `ends_deltas`): attention's TP
    collective and the dense layer's MLP's each taken as half its TP communication (none at tp = 1);
    `parts` as they were where `splits_over_group` is false."""
    layer, emb, head, moe = parts
    if not np.any(splits_over_group(scn.model, scn.plan) | vllm_sequence_parallel_moe(scn.model, scn.plan)):
        return parts
    half = layer.tp_forward_s / 2  # attention's TP collective, and the MLP's
    dense, shared = dense_deltas(
        scn, fabric, place, tokens, extend, weight_bytes, half, shared_tp_s, half, group_tokens
    )
    d_emb, d_head = ends_deltas(scn, fabric, place, logits_tokens, emb.tp_forward_s, head.tp_forward_s)
    moe = None if moe is None else (with_deltas(moe[0], shared), moe[1])
    return with_deltas(layer, dense), with_deltas(emb, d_emb), with_deltas(head, d_head), moe
