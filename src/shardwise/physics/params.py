"""Parameter counts (Narayanan et al. 2021 Eq. 2, generalised to GQA, gated MLPs, no biases).

GPT-style layer (Narayanan Eq. 2): 12 h^2 + 13 h per layer, so the model has
P = 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)) with tied, learned embeddings
(GPT-3 175B: 174.6e9).
"""

from __future__ import annotations

import numpy as np

from shardwise.physics.layer_parts import kv_heads_held
from shardwise.specs import Model
from shardwise.specs._checks import Number
from shardwise.specs.stages import StageSplit, stage_split


def _norm_params(model: Model) -> Number:
    h = model.hidden
    return h if model.rmsnorm else 2 * h  # RMSNorm: gain; LayerNorm: gain + bias


def mlp_params(model: Model, ffn: Number) -> Number:
    """One MLP of width `ffn` (gated: two up-projections), with its biases if the model has them."""
    h = model.hidden
    up = (2 if model.gated_mlp else 1) * ffn
    return h * up + ffn * h + ((up + h) if model.bias else 0)


def mla_attention_params(model: Model) -> Number:
    """Multi-head latent attention (DeepSeek-V2 Sec. 2.1; HF DeepseekV3Attention): the query down-
    and up-projections (or one full projection without a query latent) to heads x (head_dim +
    rope_head_dim), the key-value down-projection to kv_lora_rank + rope_head_dim, the up-
    projection to heads x (head_dim + v_head_dim), the output from heads x v_head_dim, and the two
    latent RMSNorms."""
    h, a, r = model.hidden, model.heads, model.rope_head_dim
    qk = a * (model.head_dim + r)
    q = (h * model.q_lora_rank + model.q_lora_rank + model.q_lora_rank * qk) if model.q_lora_rank else h * qk
    kv = (
        h * (model.kv_lora_rank + r) + model.kv_lora_rank + model.kv_lora_rank * a * (model.head_dim + model.v_head_dim)
    )
    return q + kv + a * model.v_head_dim * h


def moe_layer_mlp_params(model: Model) -> tuple[Number, Number]:
    """(all, activated per token) parameters of one MoE layer's experts, shared experts and router
    (hidden x experts, with a bias when the model has biases)."""
    expert = mlp_params(model, model.expert_ffn_hidden)
    router = model.hidden * model.experts + (model.experts if model.bias else 0)
    shared = model.shared_experts * expert
    return model.experts * expert + shared + router, model.experts_per_token * expert + shared + router


def attention_params_split(model: Model) -> tuple[Number, Number]:
    """(split across TP ranks, replicated on every TP rank) parameters of one layer's attention.
    Multi-head latent attention keeps its down-projections and latent norms whole on every TP
    rank (Megatron-Core builds them as duplicated linears) and splits the up-projections and the
    output by heads."""
    if model.kv_lora_rank:
        h, r, ql, kl = model.hidden, model.rope_head_dim, model.q_lora_rank, model.kv_lora_rank
        replicated = h * (kl + r) + kl + ((h * ql + ql) if ql else 0)
        return mla_attention_params(model) - replicated, replicated
    h = model.hidden
    qkv_out = model.q_dim + 2 * model.kv_heads * model.head_dim
    split = h * qkv_out + model.q_dim * h
    if model.bias:
        return split + qkv_out, h  # column-parallel biases split, the row-parallel one not
    return split, 0


def kv_replica_params(model: Model, tp: Number) -> Number:
    """K and V projection parameters one TP rank holds per (mean) layer beyond its 1/tp share of
    them when tp is above the KV heads (serving): each rank holds one whole KV head's columns,
    2 d (h + bias) of them, instead of kv / tp of a head's (vLLM's QKVParallelLinear: the K and V
    output size per rank `num_kv_heads * head_size` with num_kv_heads = 1 and the head replicated
    tp / kv times). 0 where tp divides the KV heads (training always), for latent attention (its
    latent is whole on every rank already) and in a hybrid's Mamba and MLP layers (by its
    attention share)."""
    if model.kv_lora_rank:
        return 0.0
    share = model.hybrid_shares[1] if model.is_hybrid else 1.0
    kv = model.kv_heads
    extra_heads = (kv_heads_held(kv, tp) - kv) / np.asarray(tp, dtype=float)
    return share * extra_heads * 2 * model.head_dim * (model.hidden + (1 if model.bias else 0))


def moe_layer_params_per_gpu(model: Model, tp: Number, ep: Number, etp: Number) -> tuple[Number, Number]:
    """(parameters outside the routed experts, routed-expert parameters) of one MoE layer on one
    GPU: attention and shared experts split by tp, norms and the router whole, experts / ep
    experts with 1/etp of each. A hybrid's E layer: the mean layer of its pattern (its shared
    experts among its MLP share, `Model.hybrid_mlp_width`) plus the router, so that a stage of n
    layers, k of them E, holds n mean layers and k routers and expert sets."""
    router = model.hidden * model.experts + (model.experts if model.bias else 0)
    experts = model.experts / ep * mlp_params(model, model.expert_ffn_hidden) / etp
    if model.is_hybrid:
        split, replicated = hybrid_layer_params_split(model)
        return split / tp + replicated + router + kv_replica_params(model, tp), experts
    split, replicated = attention_params_split(model)
    shared = model.shared_experts * mlp_params(model, model.expert_ffn_hidden)
    other = (split + shared) / tp + replicated + 2 * _norm_params(model) + router + kv_replica_params(model, tp)
    experts = model.experts / ep * mlp_params(model, model.expert_ffn_hidden) / etp
    return other, experts


def layer_params_split(model: Model) -> tuple[Number, Number]:
    """(parameters split across TP ranks, parameters replicated on every TP rank) of one layer
    with a dense MLP (of a hybrid model: the mean layer of its pattern, `hybrid_layer_params_split`)."""
    if model.is_hybrid:
        return hybrid_layer_params_split(model)
    if model.kv_lora_rank:
        split, replicated = attention_params_split(model)
        return split + mlp_params(model, model.ffn_hidden), replicated + 2 * _norm_params(model)
    h, f, d, kv = model.hidden, model.ffn_hidden, model.head_dim, model.kv_heads
    qkv_out = model.q_dim + 2 * kv * d  # query heads + key and value heads
    up = (2 if model.gated_mlp else 1) * f
    split = h * qkv_out + model.q_dim * h + h * up + f * h  # QKV, attention out, MLP up (x2 gated), MLP down
    replicated = 2 * _norm_params(model)  # two norms per layer
    if model.bias:
        split = split + qkv_out + up  # column-parallel biases are split
        replicated = replicated + 2 * h  # row-parallel biases (attention out, MLP down) are not
    return split, replicated


def dense_layer_params_per_gpu(model: Model, tp: Number) -> Number:
    """One dense layer's parameters on one GPU: its matrices split across tp, the norms (and
    row-parallel biases) whole, and with tp above the KV heads (serving) one replicated KV head's
    K and V (`kv_replica_params`)."""
    matrices, replicated = layer_params_split(model)
    return matrices / tp + replicated + kv_replica_params(model, tp)


def mamba_mixer_params(model: Model) -> Number:
    """A Mamba-2 mixer's parameters, all split across TP by heads and groups
    (megatron/core/ssm/mamba_mixer.py): in_proj h x (2 H P + 2 G N + H), the depthwise conv1d's
    weight and bias over H P + 2 G N channels, dt_bias, A_log and D (H each), the gated RMSNorm's
    weight (H P), out_proj H P x h."""
    from shardwise.physics.mamba import in_proj_width

    h, inner = model.hidden, model.mamba_inner
    channels = inner + 2 * model.mamba_groups * model.mamba_state
    return h * in_proj_width(model) + channels * (model.mamba_conv + 1) + 3 * model.mamba_heads + inner + inner * h


def hybrid_layer_params_split(model: Model) -> tuple[Number, Number]:
    """(split, replicated) parameters of the mean layer of a hybrid pattern: each mixer (Mamba-2,
    attention, MLP) weighted by its share of the layers, one pre-norm per layer (replicated)."""
    m, a, p = model.hybrid_shares
    twin = model.transformer_twin
    attention, attention_replicated = attention_params_split(twin)
    split = m * mamba_mixer_params(model) + a * attention + p * mlp_params(twin, model.hybrid_mlp_width)
    return split, a * attention_replicated + _norm_params(model)


def layer_params(model: Model) -> Number:
    split, replicated = layer_params_split(model)
    return split + replicated


def embedding_params(model: Model) -> Number:
    """Word embeddings (V h) plus a learned position table (s h) if the model has one."""
    pos = model.seq_len * model.hidden if model.learned_positions else 0
    return model.vocab * model.hidden + pos


def total_params(model: Model) -> Number:
    """Unique parameters: layers, embeddings, final norm and an untied output matrix."""
    return _params(model, activated=False)


def activated_params(model: Model) -> Number:
    """Parameters one token uses: all of a dense model; of a mixture of experts the attention, the
    dense MLPs, the shared experts, the router and experts_per_token routed experts per MoE layer
    (DeepSeek-V3: 37B of 671B)."""
    return _params(model, activated=True)


def _params(model: Model, activated: bool) -> Number:
    out = 0 if model.tied_embeddings else model.vocab * model.hidden
    outside = embedding_params(model) + _norm_params(model) + out
    if not model.is_moe and not model.kv_lora_rank:
        return model.layers * layer_params(model) + outside
    if model.is_hybrid:  # mean layers (shared experts among them) + each E layer's router and experts
        router = model.hidden * model.experts + (model.experts if model.bias else 0)
        used = model.experts_per_token if activated else model.experts
        routed = router + used * mlp_params(model, model.expert_ffn_hidden)
        return model.layers * layer_params(model) + outside + model.moe_layers * routed
    attention = mla_attention_params(model) if model.kv_lora_rank else _attention_params(model)
    moe_all, moe_active = moe_layer_mlp_params(model)
    moe = model.moe_layers
    dense = model.layers - moe
    per_layer = attention + 2 * _norm_params(model)
    return (
        model.layers * per_layer
        + dense * mlp_params(model, model.ffn_hidden)
        + moe * (moe_active if activated else moe_all)
        + outside
    )


def _attention_params(model: Model) -> Number:
    """QKV and the output projection (with their biases when the model has them)."""
    h, d, kv = model.hidden, model.head_dim, model.kv_heads
    qkv_out = model.q_dim + 2 * kv * d
    return h * qkv_out + model.q_dim * h + ((qkv_out + h) if model.bias else 0)


def stage_params_per_gpu(
    model: Model,
    tp: Number,
    pp: Number,
    split: StageSplit | None = None,
    moe: tuple[StageSplit, Number, Number] | None = None,
) -> tuple[Number, Number, Number]:
    """Parameters held by one GPU of the first, the fullest middle and the last pipeline stage.

    Layers as the split gives them (default: as even as possible), matrices split across tp (with tp
    above the KV heads, serving, one KV head's K and V on every rank: `kv_replica_params`). The first stage holds the
    word embedding (vocab-parallel, / tp) and the position table (replicated); the last stage
    the final norm and the output matrix (a copy of the word embedding when tied and pp > 1;
    Megatron-LM keeps both copies in sync with an all-reduce). For a mixture of experts `moe`
    gives (the MoE layers of each stage, ep, etp); `stage_expert_params_per_gpu` says how many of
    the parameters are routed experts.
    """
    if split is None:
        split = stage_split(model.layers, pp)
    per_layer = dense_layer_params_per_gpu(model, tp)
    pos = model.seq_len * model.hidden if model.learned_positions else 0
    word = model.vocab * model.hidden / tp
    norm = _norm_params(model)
    n_moe: tuple[Number, Number, Number, Number] = (0, 0, 0, 0)
    delta: Number = 0
    if moe is not None and model.is_moe:
        msplit, ep, etp = moe
        other, experts = moe_layer_params_per_gpu(model, tp, ep, etp)
        delta = other + experts - per_layer  # an MoE layer instead of a dense one
        n_moe = (msplit.first, msplit.middle_max, msplit.last, model.moe_layers)
    layers = per_layer * split.middle_max + n_moe[1] * delta
    single = per_layer * model.layers + n_moe[3] * delta + word + pos + norm + (0 if model.tied_embeddings else word)
    one_stage = np.asarray(pp) == 1
    first = np.where(one_stage, single, per_layer * split.first + n_moe[0] * delta + word + pos)
    last = np.where(one_stage, single, per_layer * split.last + n_moe[2] * delta + norm + word)
    return first, layers, last


def stage_expert_params_per_gpu(
    model: Model, tp: Number, pp: Number, moe: tuple[StageSplit, Number, Number]
) -> tuple[Number, Number, Number]:
    """Routed-expert parameters held by one GPU of the first, fullest middle and last stage (0
    for a dense model): their gradients are reduced over the expert-data-parallel ranks."""
    if not model.is_moe:
        return 0.0, 0.0, 0.0
    msplit, ep, etp = moe
    _, experts = moe_layer_params_per_gpu(model, tp, ep, etp)
    one_stage = np.asarray(pp) == 1
    total = experts * model.moe_layers
    return (
        np.where(one_stage, total, experts * msplit.first),
        experts * msplit.middle_max,
        np.where(one_stage, total, experts * msplit.last),
    )
