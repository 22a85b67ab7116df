"""The model's own flags in a Megatron-LM `pretrain_gpt.py` launch (`emit.megatron`): its shape,
attention, MLP, positions, norms and biases, and its mixture of experts (megatron/training/arguments.py
and the TransformerConfig fields it turns into flags, Megatron-LM d98e8a64)."""

from __future__ import annotations

from shardwise.emit.facts import i, moe_layer_pattern, rope_base
from shardwise.specs import Scenario


def vocab_divisor(vocab: int, tp: int) -> int:
    """Megatron pads the vocabulary to a multiple of divisor x tp: the largest power-of-two divisor
    (at most its default 128) that keeps the priced vocabulary as it is."""
    d = 128
    while d > 1 and vocab % (d * tp):
        d //= 2
    return d


def model_args(scn: Scenario) -> list[tuple[str, ...]]:
    m, tp = scn.model, i(scn.plan.tp)
    out: list[tuple[str, ...]] = [
        ("--num-layers", str(i(m.layers))),
        ("--hidden-size", str(i(m.hidden))),
        ("--num-attention-heads", str(i(m.heads))),
        ("--ffn-hidden-size", str(i(m.ffn_hidden))),
        ("--seq-length", str(i(m.seq_len))),
        ("--max-position-embeddings", str(i(m.seq_len))),
        ("--make-vocab-size-divisible-by", str(vocab_divisor(i(m.vocab), tp))),
    ]
    if i(m.head_dim) * i(m.heads) != i(m.hidden) and not m.kv_lora_rank:
        out.append(("--kv-channels", str(i(m.head_dim))))
    if i(m.kv_heads) != i(m.heads) and not m.kv_lora_rank:
        out.append(("--group-query-attention", "--num-query-groups", str(i(m.kv_heads))))
    if m.kv_lora_rank:
        out.append(("--multi-latent-attention", "--kv-lora-rank", str(m.kv_lora_rank)))
        out.append(("--qk-head-dim", str(i(m.head_dim)), "--qk-pos-emb-head-dim", str(m.rope_head_dim)))
        out.append(("--v-head-dim", str(i(m.v_head_dim))))
        if m.q_lora_rank:
            out.append(("--q-lora-rank", str(m.q_lora_rank)))
    if m.gated_mlp:
        out.append(("--swiglu",))
    if m.rmsnorm:
        out.append(("--normalization", "RMSNorm"))
    if m.learned_positions:
        out.append(("--position-embedding-type", "learned_absolute"))
    else:
        base = rope_base(m)
        out.append(("--position-embedding-type", "rope", *(("--rotary-base", str(base)) if base else ())))
    if not m.tied_embeddings:
        out.append(("--untie-embeddings-and-output-weights",))
    if not m.bias:
        out.append(("--disable-bias-linear",))
    if not m.dropout:
        out.append(("--attention-dropout", "0", "--hidden-dropout", "0"))
    return out


def moe_args(scn: Scenario, version: str) -> list[tuple[str, ...]]:
    m, p = scn.model, scn.plan
    if not m.is_moe:
        return []
    pattern = moe_layer_pattern(m)
    freq = f"([0]*{m.dense_layers}+[1]*{len(pattern) - m.dense_layers})" if m.moe_every == 1 else str(pattern)
    out: list[tuple[str, ...]] = [
        ("--num-experts", str(m.experts), "--moe-router-topk", str(m.experts_per_token)),
        ("--moe-ffn-hidden-size", str(i(m.expert_ffn_hidden))),
        ("--expert-model-parallel-size", str(i(p.ep)), "--expert-tensor-parallel-size", str(i(p.expert_tp))),
        ("--moe-grouped-gemm",),
    ]
    if m.experts_per_token == 1:  # Megatron-Core asks a softmax before a top-1 choice
        out.append(("--moe-router-pre-softmax",))
    if m.dense_layers or m.moe_every > 1:
        out.append(("--moe-layer-freq", freq.replace(" ", "")))
    if m.shared_experts:
        out.append(("--moe-shared-expert-intermediate-size", str(m.shared_experts * i(m.expert_ffn_hidden))))
    if p.moe_dispatcher == "flex":
        if version == "core-0.13":
            out.append(("--moe-token-dispatcher-type", "flex", "--moe-enable-deepep"))
        else:
            out.append(("--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", "deepep"))
    else:
        out.append(("--moe-token-dispatcher-type", str(p.moe_dispatcher)))
    if bool(p.moe_overlap):
        out.append(("--overlap-moe-expert-parallel-comm",))
    if float(p.moe_capacity_factor) > 0:
        out.append(("--moe-expert-capacity-factor", f"{float(p.moe_capacity_factor):g}"))
        if bool(p.moe_pad_to_capacity):
            out.append(("--moe-pad-expert-input-to-capacity",))
    return out
