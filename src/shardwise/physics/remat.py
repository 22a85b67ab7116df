"""What JAX's rematerialisation policies recompute and keep (MaxText `remat_policy`, Praxis/Paxml
`checkpoint_policy`): the JAX stacks' form of selective recomputation.

A JAX stack wraps each transformer layer in `jax.checkpoint` with a policy that names the
forward values kept for the backward pass; every other value the backward pass needs is
recomputed from the layer's input (the scan carry, always kept). A policy saves by name
(`save_only_these_names`, the `checkpoint_name` tags of the layer: query_proj, key_proj,
value_proj, qkv_proj, context, out_proj, mlpwi, mlpwo) or by kind (`checkpoint_dots`: every dot
product; `checkpoint_dots_with_no_batch_dims`: the dot products without a dot_general batch
dimension, i.e. the linear layers but not the attention score and context products).

What is recomputed is what the backward pass needs and no policy keeps. The MLP's down
projection (MaxText mlpwo, Praxis ffn2) is never recomputed: its output feeds only the residual
add whose result is the next layer's input, which the next layer keeps, so the recomputation of
it is dead code that XLA removes. JAX's full rematerialisation (`nothing_saveable`, MaxText
"full", Praxis SAVE_NOTHING) therefore redoes the forward pass less that GEMM, unlike
Megatron's full recomputation, which reruns the whole layer. A fused attention kernel (cuDNN
flash attention through Transformer Engine or XLA) is one custom call, not a dot product: it is
recomputed unless `context` (its output) is kept.

=================================  ==========================================  ===================
policy (shardwise name)            kept besides the layer input (source)        recomputed
=================================  ==========================================  ===================
minimal_flash                      linear outputs, context (MaxText)            element-wise work
minimal                            linear outputs (MaxText "minimal"; Praxis    attention, element-
                                   SAVE_DOT_WITH_NO_BATCH_DIM; SAVE_DOT_ONLY    wise
                                   with a fused attention kernel)
save_dot_with_context_except_mlp   q, k, v, context, out_proj (MaxText)         MLP up, element-wise
save_dot_except_mlpwi              q, k, v, out_proj, mlpwo (MaxText)           attention, MLP up,
                                                                                element-wise
save_dot_except_mlp                q, k, v, out_proj (MaxText; Praxis           attention, MLP up,
                                   SAVE_QKV_OUT_PROJ)                           element-wise
save_qkv_proj                      q, k, v (MaxText)                            attention, out_proj,
                                                                                MLP up, element-wise
save_out_proj                      out_proj (MaxText)                           QKV, attention, MLP
                                                                                up, element-wise
save_nothing                       nothing (JAX full remat; MaxText "full",     QKV, attention,
                                   Praxis SAVE_NOTHING)                         out_proj, MLP up,
                                                                                element-wise
=================================  ==========================================  ===================

Sources: AI-Hypercomputer/maxtext MaxText/layers/models.py (`remat_policy`, commit 8e55ab1a,
2024-12-09) and configs/base.yml (the names a custom policy may keep); google/praxis
praxis/layers/checkpoint_policy.py (`custom_policy`). Tensor-parallel collectives of a
recomputed linear layer are not repeated here (every JAX run in the public data is tp = 1).
"""

from __future__ import annotations

import numpy as np

from shardwise.specs._checks import Number

# The parts of a layer's forward pass a policy recomputes: "qkv", "proj" (attention out), "up"
# (the MLP's up projection(s)), "attention" (the attention kernel's forward), "elementwise".
RECOMPUTED = {
    "minimal_flash": frozenset({"elementwise"}),
    "minimal": frozenset({"attention", "elementwise"}),
    "save_dot_with_context_except_mlp": frozenset({"up", "elementwise"}),
    "save_dot_except_mlpwi": frozenset({"attention", "up", "elementwise"}),
    "save_dot_except_mlp": frozenset({"attention", "up", "elementwise"}),
    "save_qkv_proj": frozenset({"attention", "proj", "up", "elementwise"}),
    "save_out_proj": frozenset({"qkv", "attention", "up", "elementwise"}),
    "save_nothing": frozenset({"qkv", "attention", "proj", "up", "elementwise"}),
}
JAX_POLICIES = tuple(RECOMPUTED)
# The stacks' own names for the same policies (MaxText, Praxis; lower case)
ALIASES = {
    "full": "save_nothing",
    "save_dot_with_no_batch_dims": "minimal",
    "save_dot_with_no_batch_dim": "minimal",
    "save_dot_only": "minimal",  # the same while attention is one fused kernel (see the docstring)
    "save_qkv_out_proj": "save_dot_except_mlp",
}


def canonical(policy: str) -> str:
    """The shardwise name of a MaxText or Praxis policy name (unknown names: unchanged)."""
    name = policy.strip().lower()
    return ALIASES.get(name, name)


def recompute_s(
    policy: str, qkv_s: Number, proj_s: Number, up_s: Number, attention_s: Number, elementwise_s: Number
) -> Number:
    """Seconds of forward work one layer's backward pass redoes under `policy`, from the forward
    times of its parts."""
    parts = RECOMPUTED[policy]
    times = {"qkv": qkv_s, "proj": proj_s, "up": up_s, "attention": attention_s, "elementwise": elementwise_s}
    return sum((times[p] for p in sorted(parts)), start=0.0)


def kept_bytes(
    policy: str,
    seq_len: Number,
    batch: Number,
    hidden: Number,
    q_dim: Number,
    kv_dim: Number,
    ffn: Number,
    gated: bool,
    tp: Number,
    sequence_parallel: Number,
    bytes_per_element: float,
    flash_stats_bytes_per_head_token: float,
    heads: Number,
) -> Number:
    """Bytes one layer keeps for its backward pass under `policy`: the layer input (the scan
    carry) and the policy's kept tensors that the backward pass needs (table above); the fused
    attention kernel's softmax statistics go with the context it produces."""
    parts = RECOMPUTED[policy]
    t, e = tp, bytes_per_element
    sp = np.asarray(sequence_parallel, dtype=bool)
    tokens = seq_len * batch
    width = np.where(sp, hidden / t, hidden)  # the layer input
    if "qkv" not in parts:
        width = width + (q_dim + 2 * kv_dim) / t
    if "proj" not in parts:
        width = width + np.where(sp, hidden / t, hidden)
    if "up" not in parts:
        width = width + (2 if gated else 1) * ffn / t
    stats = 0.0
    if "attention" not in parts:
        width = width + q_dim / t
        stats = flash_stats_bytes_per_head_token * heads * tokens / t
    return e * tokens * width + stats
