"""The model's own flags in a Megatron-LM `pretrain_gpt.py` launch (`emit.megatron`): its shape,
attention, MLP, positions, norms and biases, and its mixture of experts (megatron/training/arguments.py
and the TransformerConfig fields it turns into flags, Megatron-LM d98e8a64)."""

from __future__ import annotations

from shardwise.emit.facts import activation_flags, i, moe_layer_pattern
from shardwise.specs import Model, Scenario

# Model files (HF config.json `model_type`, `Model.architecture`) whose own features beyond what a
# Model states are written here, each as Megatron-LM d98e8a64 spells it (TransformerConfig fields,
# megatron/training/argument_utils.py ArgumentGroupFactory: add_qkv_bias -> --add-qkv-bias):
# - qwen2, qwen2_moe: biases on the q, k and v projections only (transformers modeling_qwen2.py
#   Qwen2Attention: q/k/v_proj bias=True, o_proj bias=False): --add-qkv-bias beside --disable-bias-linear;
# - qwen3, qwen3_moe: an RMSNorm over each query and key head (modeling_qwen3.py q_norm, k_norm):
#   --qk-layernorm (the --normalization type, per head);
# - deepseek_v3, kimi_k2: a sigmoid router with a learned expert bias for choosing
#   (modeling_deepseek_v3.py DeepseekV3TopkRouter, e_score_correction_bias): --moe-router-score-function
#   sigmoid --moe-router-enable-expert-bias; its groups and scale are config values (ARCH_TODO);
# - gpt_oss: the experts' activation (up + 1) * gate * sigmoid(1.702 gate) clamped at swiglu_limit
#   (modeling_gpt_oss.py GptOssExperts) and a learned sink logit per head (GptOssAttention.sinks):
#   --quick-geglu --glu-linear-offset 1.0 (instead of --swiglu) and --softmax-type learnable, as
#   Megatron-LM's examples/gptoss/02_train.sh@d98e8a64 writes them.
ARCH_FLAGS: dict[str, tuple[str, ...]] = {
    "qwen2": ("--add-qkv-bias",),
    "qwen2_moe": ("--add-qkv-bias",),
    "qwen3": ("--qk-layernorm",),
    "qwen3_moe": ("--qk-layernorm",),
    "deepseek_v3": ("--moe-router-score-function", "sigmoid", "--moe-router-enable-expert-bias"),
    "kimi_k2": ("--moe-router-score-function", "sigmoid", "--moe-router-enable-expert-bias"),
    "gpt_oss": ("--softmax-type", "learnable"),
}
_ROUTER_GROUPS = (
    "DeepSeek-V3's router groups and scale: --moe-router-num-groups N --moe-router-group-topk K "
    "--moe-router-topk-scaling-factor S (config.json n_group, topk_group, routed_scaling_factor)"
)
ARCH_TODO: dict[str, str] = {"deepseek_v3": _ROUTER_GROUPS, "kimi_k2": _ROUTER_GROUPS}
# Model files whose layers the flags written here build, as far as a Model states them: GPT-2's
# block (Megatron's GPT), Llama's, Mistral's and Mixtral's, and those of ARCH_FLAGS. Any other
# file may hold more (Llama 4's chunked attention and layers without RoPE, Nemotron's LayerNorm1p and
# half-width rotary embedding, ALiBi): the launch asks for it (`model_todo`).
KNOWN_FILES = frozenset({"gpt2", "llama", "mistral", "mixtral", *ARCH_FLAGS})
# The MLP's activation (`Model.activation`, gated or not) as Megatron-LM d98e8a64 takes it
# (megatron/training/arguments.py _add_network_size_args, argument_utils.py
# core_transformer_config_from_args): --swiglu a gated SiLU, --squared-relu squared ReLU, --quick-geglu
# a gated x sigmoid(1.702 x); no flag: TransformerConfig's activation_func default, F.gelu (erf), not
# gated. Nothing else has a flag -- no gated GELU (GeGLU: Gemma, GLM-130B, Grok-1), no ReLU, no
# tanh-GELU (--openai-gelu is parsed, but no Megatron-Core model reads it): `model_todo` asks for them.
ACTIVATION_FLAGS: dict[tuple[str, bool], tuple[str, ...]] = {
    ("silu", True): ("--swiglu",),
    ("gelu", False): (),
    ("squared_relu", False): ("--squared-relu",),
    ("quick_gelu", True): ("--quick-geglu",),
}
# GPT-OSS's clamp (HF GptOssConfig swiglu_limit, 7.0 in both released configs)
GPT_OSS_CLAMP = 7.0


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
    if m.architecture == "gpt_oss":  # (up + 1) x quick-GELU(gate), clamped (ARCH_FLAGS)
        out.append(("--quick-geglu", "--glu-linear-offset", "1.0"))
        if m.glu_clamp:
            out.append(("--activation-func-clamp-value", f"{GPT_OSS_CLAMP:g}"))
    elif flags := activation_flags(m, ACTIVATION_FLAGS, "Megatron-LM")[0]:
        out.append(flags)
    if m.rmsnorm:
        out.append(("--normalization", "RMSNorm"))
    if m.learned_positions:
        out.append(("--position-embedding-type", "learned_absolute"))
    else:  # YaRN's factor and original length: `model_todo`
        kind = "yarn" if m.yarn_rope else "rope"
        base = m.rope_theta  # the full-attention layers' where the windowed ones differ (`model_todo`)
        known = base > 0 and base == int(base)  # --rotary-base is type=int
        out.append(("--position-embedding-type", kind, *(("--rotary-base", str(int(base))) if known else ())))
    if m.sliding_window:  # (left, right) tokens beside the query's own: W - 1, 0 (examples/gptoss/02_train.sh)
        out.append(("--window-size", f"{m.sliding_window - 1},0"))
        if m.full_attention_every:  # layer n (from 1) attends in full where n % freq == 0 (is_layer_window_attention)
            out.append(("--window-attn-skip-freq", str(m.full_attention_every)))
    if not m.tied_embeddings:
        out.append(("--untie-embeddings-and-output-weights",))
    if not m.bias:
        out.append(("--disable-bias-linear",))
    if not m.dropout:
        out.append(("--attention-dropout", "0", "--hidden-dropout", "0"))
    flags = ARCH_FLAGS.get(m.architecture or "", ())
    if flags and (m.is_moe or "--moe-router-score-function" not in flags):
        out.append(flags)
    return out


def model_todo(model: Model) -> tuple[str, ...]:
    """What the launch cannot write from what the Model states: the rotary base where unknown, the
    windowed layers' own base, an activation Megatron-LM has no flag for, YaRN's scaling, a clamp
    limit other than GPT-OSS's, config values of the model file (ARCH_TODO), and the features of a
    model file not among KNOWN_FILES."""
    m, out = model, []
    if not m.learned_positions and not (m.rope_theta > 0 and m.rope_theta == int(m.rope_theta)):
        why = f"{m.rope_theta:g} is not a whole number, which it takes" if m.rope_theta else "unknown here"
        out.append(f"rotary base: --rotary-base N (the model's rope_theta; {why}; Megatron's default is 10000)")
    if m.rope_local_theta and not m.learned_positions:
        out.append(
            f"the windowed layers' rotary base, {int(m.rope_local_theta)} (config.json rope_local_base_freq): "
            f"--rotary-base sets {int(m.rope_theta)} on every layer and no flag sets another"
        )
    if m.architecture != "gpt_oss" and (todo := activation_flags(m, ACTIVATION_FLAGS, "Megatron-LM")[1]):
        out.append(todo)
    if m.yarn_rope and not m.learned_positions and not m.kv_lora_rank:
        out.append(
            "YaRN: --rotary-scaling-factor F --yarn-original-max-position-embeddings N "
            "(config.json rope_scaling factor, original_max_position_embeddings)"
        )
    if m.glu_clamp and m.architecture != "gpt_oss":
        out.append("the gated activation's clamp: --activation-func-clamp-value L (config.json swiglu_limit)")
    if m.architecture in ARCH_TODO and m.is_moe:
        out.append(ARCH_TODO[m.architecture])
    if m.architecture not in KNOWN_FILES:
        name = f"the {m.architecture} model file" if m.architecture else "a model of unknown architecture"
        out.append(
            f"what {name} does beyond the shapes, norm, biases, MLP and positions written here "
            "(shardwise does not know it; compare with its config.json)"
        )
    return tuple(out)


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
