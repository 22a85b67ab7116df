"""Activations one layer and one pipeline stage keep for the backward pass (split out of
`physics.memory`, which re-exports these names).

Korthikanti et al. 2022, Sec. 4 and Table 2, bytes per layer per micro-batch, with e = 2 and 1-byte
dropout masks, s sequence, b micro-batch, h hidden, a heads, t = tp:

    no parallelism               s b h (34 + 5 a s / h)
    tensor parallel              s b h (10 + 24/t + 5 a s / (h t))
    tensor + sequence parallel   s b h (34 + 5 a s / h) / t
    selective recomputation      drops the 5 a s / h term (the attention scores)
    full recomputation           2 s b h (the layer input; / t with sequence parallelism)

`layer_activation_bytes` builds these from the tensor inventory (GQA, gated MLPs, no dropout
and FlashAttention change the counts) and `tests/test_memory.py` checks the table.
The first pipeline stage holds the most micro-batches (Korthikanti Sec. 4.2.3): m for GPipe,
min(p, m) for 1F1B, and p v + p - 1 model chunks of l/(p v) layers for the interleaved schedule
(`layers_in_flight`).
"""

from __future__ import annotations

import numpy as np

from shardwise.physics import remat
from shardwise.physics.flops import DROPOUT_MASK_BYTES
from shardwise.specs import Model, Recompute, Schedule
from shardwise.specs._checks import Number
from shardwise.specs.memo import kept

# FlashAttention keeps one fp32 log-sum-exp per query and head for its backward pass
# (Dao 2023, FlashAttention-2, Sec. 3.1.1 and Algorithm 1: the statistic L).
FLASH_STATS_BYTES = 4.0
# Transformer Engine under FP8 keeps the FP8 cast of each linear layer's input for its weight
# gradient instead of the 16-bit input (transformer_engine/pytorch/module/linear.py and
# layernorm_linear.py: the quantized `inputmat` / `ln_out` saved for backward; MXFP8 adds a 1-byte
# scale per 32 elements, left out): 1 byte an element.
TE_FP8_INPUT_BYTES = 1.0
# NVFP4 training keeps the column-wise NVFP4 copy wgrad reads (the same saved `inputmat`, its row-wise
# usage dropped after fprop): 4 bits and an E4M3 scale per 16 elements, 0.5 + 1/16 bytes an element.
TE_NVFP4_INPUT_BYTES = 0.5 + 1.0 / 16.0


@kept
def layer_activation_bytes(
    model: Model,
    batch: Number,
    tp: Number,
    sequence_parallel: Number,
    recompute: Number,
    flash_attention: Number,
    bytes_per_element: float,
    ffn: Number | None = None,
    selective_policy: str = "attention",
    stack_extra: float = 0.0,
    recompute_modules: tuple[str, ...] = (),
    fp8_input_bytes: float = 0.0,
    full_kept_hidden: float = 1.0,
) -> Number:
    """Activations one layer keeps for its backward pass, per micro-batch, on one GPU (`ffn`: the
    width of its dense MLP, as in `physics.flops.layer_forward`). `selective_policy` "op":
    selective recomputation keeps what torchtitan's op-level policy saves (`op_sac_layer_bytes`).
    `stack_extra`: elements per token a stack's own layer code keeps beyond this inventory, split
    over TP (`StackMemory.extra_saved_elements`); not kept under full recomputation.
    `recompute_modules` (Megatron-Core's selective modules, `Plan.recompute_modules`, with the
    "attention" policy): "mlp" checkpoints a dense layer's MLP on its input
    (megatron/core/transformer/transformer_layer.py `_forward_mlp`: tensor_parallel.checkpoint /
    te_checkpoint of self.mlp on the pre-MLP residual), so the MLP's own saved tensors go: the
    normalised input its first linear keeps, the up-projection (gate x f) and activation (f)
    outputs, `mlp_checkpointed_bytes`; "core_attn" keeps q, k, v as the flash kernel does (nothing
    more to drop); "layernorm" recomputes a standalone norm's output, which Transformer Engine's
    layer spec does not have (the norms are fused into the following linears, input_layernorm and
    pre_mlp_layernorm are IdentityOp): nothing dropped here. `fp8_input_bytes` (0: none): the
    bytes of the FP8 copy a linear keeps of its input (`TE_FP8_INPUT_BYTES`, Transformer Engine's FP8
    training): the QKV and MLP inputs (the norm outputs) and the last MLP linear's input (the
    activation's output) are kept at that size, and the output projection keeps an FP8 copy of the
    attention output beside the 16-bit one the attention kernel keeps for its own backward pass.
    `full_kept_hidden`: hidden-widths per token a layer keeps under full recomputation (1: the layer's
    input, a checkpoint around the whole layer; `StackMemory.full_recompute_kept_hidden`)."""
    if model.is_hybrid:  # the mean layer of its pattern (`physics.mamba`)
        from shardwise.physics.mamba import hybrid_layer_activation_bytes

        twin = model.transformer_twin

        def standard(width: Number) -> Number:
            return layer_activation_bytes(twin, batch, tp, sequence_parallel, recompute, flash_attention,
                                          bytes_per_element, width, selective_policy, stack_extra,
                                          recompute_modules, fp8_input_bytes, full_kept_hidden)  # fmt: skip

        return hybrid_layer_activation_bytes(model, standard, batch * model.seq_len, tp, sequence_parallel,
                                             bytes_per_element, recompute, fp8_input_bytes)  # fmt: skip
    s, h, a, kv, d = model.seq_len, model.hidden, model.heads, model.kv_heads, model.head_dim
    f = model.ffn_hidden if ffn is None else ffn
    e, t, b = bytes_per_element, tp, batch
    sbh = s * b * h
    mask = DROPOUT_MASK_BYTES if model.dropout else 0.0
    gate = 2 if model.gated_mlp else 1
    # Replicated across TP ranks unless sequence-parallel: two norm inputs, the QKV and MLP
    # inputs (norm outputs), two hidden-dropout masks.
    c = fp8_input_bytes if fp8_input_bytes else e  # a linear's saved input
    # Split across TP ranks: Q, K, V, attention output, MLP up output, activation output (and the
    # output projection's FP8 copy of the attention output, `fp8_input_bytes`).
    sbq = s * b * model.q_dim  # queries and the attention output (sbh unless head_dim is set apart)
    qkv, out, attn_in, latents, up_proj = e * (sbq + 2 * s * b * kv * d), sbq, c * sbh, 0.0, (0.0, 0.0)
    if model.kv_lora_rank:  # latent attention's own inventory (`mla_saved_bytes`)
        qkv, out, attn_in, latents, up_proj = mla_saved_bytes(model, s * b, e, fp8_input_bytes)
    replicated = (2 * e + c + 2 * mask) * sbh + attn_in + latents
    kept_16 = e * (out + gate * s * b * f + s * b * stack_extra) + qkv
    split = (kept_16 + c * s * b * f + fp8_input_bytes * out) / t
    # The attention scores: softmax output, dropout mask and output (Korthikanti's 5 a s^2 b).
    scores_std = (e + ((mask + e) if model.dropout else 0.0)) * a * s * s * b / t
    scores_flash = FLASH_STATS_BYTES * a * s * b / t
    scores = np.where(np.asarray(flash_attention, dtype=bool), scores_flash, scores_std)
    sp = np.asarray(sequence_parallel, dtype=bool)
    rep = np.where(sp, replicated / t, replicated)
    rc = np.asarray(recompute)
    full = full_kept_hidden * np.where(sp, e * sbh / t, e * sbh)
    flash = np.asarray(flash_attention, dtype=bool)
    scores_kept = np.where(rc == Recompute.SELECTIVE, np.where(flash, scores_flash, 0.0), scores)
    kept = rep + split + scores_kept
    if "mla_up_proj" in recompute_modules and selective_policy == "attention":
        dropped = up_proj[1] / t + np.where(sp, up_proj[0] / t, up_proj[0])
        kept = np.where(rc == Recompute.SELECTIVE, kept - dropped, kept)
    if "mlp" in recompute_modules and selective_policy == "attention":
        mlp = mlp_checkpointed_bytes(
            model, batch, tp, sequence_parallel, bytes_per_element, f, stack_extra, fp8_input_bytes
        )
        kept = np.where(rc == Recompute.SELECTIVE, kept - mlp, kept)
    if selective_policy == "op":
        op = op_sac_layer_bytes(model, batch, tp, sequence_parallel, bytes_per_element, f)
        kept = np.where(rc == Recompute.SELECTIVE, op + np.where(flash, scores_flash, scores_std), kept)
    if selective_policy in remat.RECOMPUTED:  # a JAX remat policy: the layer input and what it keeps
        jax = remat.kept_bytes(
            selective_policy,
            s,
            b,
            h,
            model.q_dim,
            kv * d,
            f,
            model.gated_mlp,
            t,
            sequence_parallel,
            e,
            FLASH_STATS_BYTES,
            a,
        )
        kept = np.where(rc == Recompute.SELECTIVE, jax, kept)
    return np.where(rc == Recompute.FULL, full, kept)


def mla_saved_bytes(
    model: Model, tokens: Number, bytes_per_element: float, fp8_input_bytes: float = 0.0
) -> tuple[Number, Number, Number, Number, tuple[Number, Number]]:
    """What latent attention keeps of one layer for `tokens` tokens, as Megatron-Core's
    `MLASelfAttention` runs it (megatron/core/transformer/multi_latent_attention.py; the TE layer spec,
    gpt_layer_specs.py: a standalone input norm, TELinear down projections, LayerNorm-fused
    up projections), with a heads, d = head_dim, r = rope_head_dim, v = v_head_dim, q and k the
    query and key-value latent ranks: (q, k, v at 16 bits, split over TP: a(d + r), a(d + r), a v,
    the contiguous tensors the attention kernel saves; the attention output's width a v; the down
    projections' saved input, the norm output: one 16-bit h, or under FP8 each projection's own
    cast, 2 h at `fp8_input_bytes`; the latents, replicated unless sequence-parallel: the query
    latent and the key-value latent with its rotary part (q + k + r, 16-bit, each up projection's
    norm input) and the up projections' normalised inputs (q + k at a linear's saved-input bytes);
    what selective `mla_up_proj` recomputation drops: (the normalised latents, q, k and v)). Under
    `mla_up_proj` the up projections and rotary embedding run inside a `CheckpointWithoutOutput`
    (no autograd: the normalised latents are not saved) whose outputs, the query, key and value,
    are freed once the attention has run (`discard_output_and_register_recompute`) and rebuilt from
    the latents the checkpoint keeps before the attention's backward pass."""
    e, a, h = bytes_per_element, model.heads, model.hidden
    d, r, v = model.head_dim, model.rope_head_dim, model.v_head_dim
    c = fp8_input_bytes if fp8_input_bytes else e
    qkv = e * tokens * a * (2 * (d + r) + v)
    down_in = (2 * fp8_input_bytes if fp8_input_bytes else e) * tokens * h
    normed = c * tokens * (model.q_lora_rank + model.kv_lora_rank)
    latents = e * tokens * (model.q_lora_rank + model.kv_lora_rank + r) + normed
    return qkv, tokens * a * v, down_in, latents, (normed, qkv)


def mlp_checkpointed_bytes(
    model: Model,
    batch: Number,
    tp: Number,
    sequence_parallel: Number,
    bytes_per_element: float,
    ffn: Number,
    stack_extra: float = 0.0,
    fp8_input_bytes: float = 0.0,
) -> Number:
    """What checkpointing a dense MLP on its input frees of `layer_activation_bytes`' inventory:
    the normalised input the first linear keeps (replicated across TP unless sequence-parallel),
    the up-projection's gate x f and the activation's f outputs, split over TP (and a stack's
    extra elements, `stack_extra`, which are the eager GLU's). The checkpoint's input is the
    residual the norm reads, kept already. Under `fp8_input_bytes` the two linears' inputs (the
    normalised input, the activation's output) are kept at that size."""
    s, b, h, e = model.seq_len, batch, model.hidden, bytes_per_element
    c = fp8_input_bytes if fp8_input_bytes else e
    gate = 2 if model.gated_mlp else 1
    sp = np.asarray(sequence_parallel, dtype=bool)
    norm_out = np.where(sp, s * b * h / tp, s * b * h)
    return c * norm_out + s * b * (e * (gate * ffn + stack_extra) + c * ffn) / tp


def op_sac_layer_bytes(
    model: Model, batch: Number, tp: Number, sequence_parallel: Number, bytes_per_element: float, ffn: Number
) -> Number:
    """What torchtitan's op-level selective checkpointing keeps of one layer, beyond the attention
    statistics (torchtitan distributed/activation_checkpoint.py, `_op_sac_save_list`: every matmul
    output except every second one, attention's output, reduce-scatter outputs; element-wise work
    is recomputed): the layer's input (the checkpoint's), the 1st, 3rd, ... of the outputs of
    Q, K, V, attention-out, MLP up (and gate) and down, in that order (the row-parallel ones whole
    on each TP rank, before their reduce-scatter), the attention output, and with sequence
    parallelism the two reduce-scatter outputs. An MoE layer passes its shared experts' width as
    `ffn` (their w1, w3, w2 follow the attention's four in the count; the router's gate is forced to
    recompute and left out of it, the routed experts' `_grouped_mm` is no matmul of the count:
    `op_sac_routed_bytes`); `ffn` 0, no shared experts, keeps no MLP output."""
    s, b, h, kvd, e, t = model.seq_len, batch, model.hidden, model.kv_heads * model.head_dim, bytes_per_element, tp
    q = model.q_dim
    up = [ffn / t, ffn / t] if model.gated_mlp else [ffn / t]
    mlp = sum([*up, h][0::2])  # the 5th and 7th matmuls: w1 and w2 (a plain MLP: w1)
    attention = q / t + kvd / t  # wq and wv, the 1st and 3rd
    sp = np.asarray(sequence_parallel, dtype=bool)
    layer_input = np.where(sp, h / t, h)
    reduce_scatter = np.where(sp, 2 * h / t, 0.0)
    return e * s * b * (layer_input + attention + np.where(np.asarray(ffn) > 0, mlp, 0.0) + q / t + reduce_scatter)


# torchtitan's router keeps the values (fp32, the scores it chose on) and int64 indices of its topk
TOPK_BYTES_PER_CHOICE = 4.0 + 8.0


def op_sac_routed_bytes(
    model: Model, tokens: Number, imbalance: Number, bytes_per_element: float, ep: Number, exchange_saved: Number
) -> Number:
    """What torchtitan's per-op selective checkpointing keeps of an MoE layer's routed experts on
    the busiest rank, for `tokens` routed tokens (pytorch/torchtitan@b5bcd76c
    torchtitan/distributed/activation_checkpoint.py `SelectiveAC` and `_get_default_save_ops`;
    torchtitan/models/common/moe.py, token_dispatcher.py). The save set is the partitioner's
    compute-intensive ops (torch/_functorch/partitioners.py `get_default_op_list`: mm, bmm, addmm,
    the SDPA ops, `_scaled_mm`; no `_grouped_mm`, torch 2.13), topk, reduce-scatter and the
    functional all-to-all: of the routed part only the router's topk is saved (TOPK_BYTES_PER_CHOICE
    per token and choice; the gate's mm is forced to recompute, `force_recompute_mm_shapes_by_fqns`
    "moe.router.gate", and the D2H copies of the split sizes are saved on the host). The grouped
    GEMMs, their activation and the permutations are recomputed and keep nothing.
    `exchange_saved` (ep > 1): the dispatch and combine outputs are kept too -- the received copies
    (tokens x k x imbalance x h) and the returned ones (tokens x k x h) -- where the all-to-all is
    `_c10d_functional.all_to_all_single` (torch.compile traces the functional collective,
    token_dispatcher.py `_dispatch_token_exchange`); eager torchtitan's default spmd_types backend
    (pytorch/torchtitan#4085, 2026-08-18) runs spmd_types' `_AllToAllUneven`, torch.distributed's
    in-place `all_to_all`, which is no saved op: rerun in the recompute, nothing kept."""
    k, h, e = model.experts_per_token, model.hidden, bytes_per_element
    exchanged = np.where(
        np.asarray(exchange_saved, dtype=bool) & (np.asarray(ep) > 1), e * tokens * k * h * (imbalance + 1.0), 0.0
    )
    return TOPK_BYTES_PER_CHOICE * tokens * k + exchanged


def routed_expert_activation_bytes(
    model: Model,
    tokens: Number,
    etp: Number,
    imbalance: Number,
    bytes_per_element: float,
    recompute: Number,
    recompute_modules: tuple[str, ...] = (),
    fp8_input_bytes: float = 0.0,
    score_copy_bytes: float = 0.0,
) -> Number:
    """What a mixture-of-experts layer's routed experts keep for the backward pass on the busiest
    rank, for `tokens` routed tokens (c = tokens x k x imbalance copies), as Megatron-Core's
    TEGroupedMLP saves them (megatron/core/transformer/moe/experts.py): the grouped up-projection's
    input (the received tokens, gathered over etp), its output (g f, the activation's input) and
    the activation's output (f, the down-projection's input), and the fp32 router probabilities.
    The permutation keeps only its row-id map (Transformer Engine's fused moe_permute /
    moe_unpermute), the all-to-alls nothing, and the combine unpermutes without the probabilities
    (the activation applied them; token_dispatcher.py `combine_postprocess`): neither the permuted
    tokens sent nor the expert outputs are kept. GPT-OSS's clamp (`Model.glu_clamp`,
    `physics.moe.CLAMP_FORWARD_PASSES`) keeps a clamped copy of the up-projection's output (the
    fused activation's saved input) beside the output the clamps' backward holds: g f more. Selective
    `moe_act` recomputation runs the activation without autograd and frees its output once the
    down-projection has read it (`CheckpointWithoutOutput`): neither the f nor the clamp's g f are
    kept. Nothing under full recomputation (the layer's input is counted with the layer).
    `fp8_input_bytes` (Transformer Engine's FP8 training, `TE_FP8_INPUT_BYTES`; 0: 16-bit): the two
    grouped linears keep the FP8 cast of their inputs for the weight gradient, not the 16-bit tensor
    (transformer_engine/pytorch/module/grouped_linear.py: the quantized `inputmats`, column-wise
    usage only, go to `save_for_backward` unless `save_original_input`, which Megatron-Core sets on
    linear_fc2 only under `moe_act` recomputation, whose input is then not kept at all: experts.py
    `set_save_original_input`): the received tokens' h etp and the activation's f at that size; the
    activation's own input (g f) stays 16-bit. Under torchtitan's op-level selective checkpointing
    the routed experts keep only what its save list names (`op_sac_routed_bytes`, applied by
    `engines.moe_op_sac`). `score_copy_bytes`: bytes per hidden element and copy that a stack's score
    multiply keeps beside the experts' own tensors (`moe_score_copy_bytes`; recomputed under op-level
    checkpointing)."""
    e, h, f = bytes_per_element, model.hidden, model.expert_ffn_hidden
    c = fp8_input_bytes if fp8_input_bytes else e  # a grouped linear's saved input
    gate = 2 if model.gated_mlp else 1
    copies = tokens * model.experts_per_token * imbalance
    clamp = e * gate * f if model.glu_clamp else 0.0
    act_on = (np.asarray(recompute) == Recompute.SELECTIVE) & ("moe_act" in recompute_modules)
    act = np.where(act_on, 0.0, c * f + clamp)
    # the score multiply's copy: on the rank's own tokens x k copies, not the received ones (`MOE_SCORE_COPY_BYTES`)
    score = tokens * model.experts_per_token * score_copy_bytes * h
    kept = copies * (c * h * etp + e * gate * f + act) + score + 4.0 * tokens * model.experts
    # selective "moe" checkpoints the whole MoE layer on its input (megatron/core/transformer/moe/
    # moe_layer.py: `moe_layer_recompute`, tensor_parallel.checkpoint / te_checkpoint of the router,
    # dispatch, experts and combine): the routed experts keep nothing
    whole = (np.asarray(recompute) == Recompute.SELECTIVE) & ("moe" in recompute_modules)
    return np.where((np.asarray(recompute) == Recompute.FULL) | whole, 0.0, kept)


# torchtitan multiplies each routed copy by its router score in fp32, `(t.to(torch.float32) * scores).to(dtype)`,
# on the rank's own tokens x k copies, before the dispatch or after the combine all-to-all: at bb308da6b
# (2025-11) in torchtitan/models/moe/moe.py `MoE.forward`, around `self.experts` (whose ExpertParallel hooks
# run the all-to-alls), on the gathered input where `score_before_experts` (MoEArgs' default, Llama 4's
# flavors) or on the experts' output where not (every DeepSeek-V3 and Qwen3 MoE flavor: deepseek_v3/__init__.py,
# qwen3/__init__.py); at b5bcd76c (2026-08, the per-op checkpointing's, `engines.moe_op_sac`) in
# torchtitan/models/common/token_dispatcher.py `combine`, after `_combine_token_exchange`, on the output
# always (`score_before_experts` is gone). Eager, the multiply saves the fp32 cast of its tensor, 4 bytes per
# hidden element and copy, either way; compiled, Inductor saves the 16-bit tensor and recasts it: the experts'
# output (2) where the scores come after them, nothing more where they come before (the grouped GEMM keeps that
# input already). The one price of that copy: kept by the layer (`routed_expert_activation_bytes`) or rebuilt
# by the per-op recompute (`engines.moe_op_sac.rebuilt_routed_bytes`). (stack, scores after the experts) -> bytes.
MOE_SCORE_COPY_BYTES = {("torchtitan", False): 4.0, ("torchtitan", True): 4.0, ("torchtitan-compile", True): 2.0}
TORCHTITAN_SCORES_AFTER_EXPERTS = ("deepseek_v3", "kimi_k2", "qwen3_moe")


def moe_score_copy_bytes(stack: str, architecture: str) -> float:
    """Bytes per hidden element and routed copy that the stack's score multiply keeps (`MOE_SCORE_COPY_BYTES`;
    0 for stacks that apply the probabilities inside the experts' activation, Megatron-Core's)."""
    return MOE_SCORE_COPY_BYTES.get((stack, architecture in TORCHTITAN_SCORES_AFTER_EXPERTS), 0.0)


def moe_checkpointed_shared_bytes(
    model: Model,
    batch: Number,
    tp: Number,
    sequence_parallel: Number,
    bytes_per_element: float,
    shared: Number,
    stack_extra: float = 0.0,
    fp8_input_bytes: float = 0.0,
) -> Number:
    """What selective "moe" recomputation frees of an MoE layer beside its routed experts
    (`routed_expert_activation_bytes`): its shared experts' MLP tensors (`mlp_checkpointed_bytes` at
    the shared width), less the checkpoint's input, the pre-MLP norm's 16-bit output, which the
    checkpoint keeps in place of the linear's saved input (moe_layer.py, `checkpoint(custom_forward,
    False, hidden_states, ...)`)."""
    mlp = mlp_checkpointed_bytes(model, batch, tp, sequence_parallel, bytes_per_element, shared, stack_extra,
                                 fp8_input_bytes)  # fmt: skip
    norm_out = bytes_per_element * model.seq_len * batch * model.hidden
    return mlp - np.where(np.asarray(sequence_parallel, dtype=bool), norm_out / tp, norm_out)


@kept
def layers_in_flight(
    stage_layers: Number, pp: Number, vpp: Number, micro_batches: Number, schedule: Number, stage_index: Number
) -> Number:
    """Layer-micro-batches of activations that stage `stage_index` (holding `stage_layers`
    layers) keeps at its peak."""
    p, v, m, i = pp, vpp, micro_batches, stage_index
    per_stage = stage_layers
    gpipe = m * per_stage
    one_f_one_b = np.minimum(p - i, m) * per_stage
    # Megatron-LM interleaved warm-up: 2 (p - i - 1) + (v - 1) p chunk forwards, plus one.
    chunks = np.minimum(2 * (p - i - 1) + (v - 1) * p + 1, m * v)
    interleaved = chunks * stage_layers / v
    sched = np.asarray(schedule)
    # ZB-H1 keeps 1F1B's peak on the first stage (Qi et al. 2023 Sec. 3.1); the later stages hold
    # up to p micro-batches' inputs while their deferred weight gradients wait, still <= stage 0.
    zb_h1 = np.minimum(p, m) * per_stage
    return np.select(
        [sched == Schedule.GPIPE, sched == Schedule.INTERLEAVED, sched == Schedule.ZB_H1],
        [gpipe, interleaved, zb_h1],
        one_f_one_b,
    )
