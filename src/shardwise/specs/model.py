"""The transformer being trained or served (the "Application" of Calculon's split).

Notation used across shardwise (Narayanan et al. 2021; Korthikanti et al. 2022):

    l  layers            h  hidden size          a  attention heads     k  KV heads (GQA)
    f  FFN hidden size   V  vocabulary           s  sequence length     d  head dim (h / a unless given)
    q  = a d, the width of the queries and of the attention output (h unless d is given apart)

A hybrid model (Megatron-Core's MambaModel, megatron/core/models/mamba/mamba_model.py; Nemotron-H)
is a stack of layers that each hold ONE mixer, named by a character of `hybrid_pattern` (Megatron's
`hybrid_override_pattern`, megatron/core/ssm/mamba_hybrid_layer_allocation.py `Symbols`):
M a Mamba-2 mixer, * self-attention, - an MLP, E a mixture of experts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

import numpy as np

from shardwise.specs import _checks as chk
from shardwise.specs._checks import Number, SpecError
from shardwise.specs.memo import hash_once

MAX_LAYERS = 1_000_000
# An architecture as Hugging Face config.json's `model_type` spells it: lower-case letters and digits,
# then also '_', '-' and '.' (transformers' own: "deepseek_v3", "gpt_oss", "xlm-roberta"; "grok-1",
# HPC-AI Tech's Grok-1 port); a class name (`architectures`, "MixtralForCausalLM") is refused.
ARCHITECTURE_PATTERN = r"[a-z0-9][a-z0-9_.-]{0,63}"
# Language-model files the serving rules single out by architecture (engines/dp_dense.py: SGLang's
# Mixtral and Grok files, vLLM's DeepSeek files and the files that run its sequence-parallel MoE):
# a multimodal wrapper around one of them (Kimi K2.5 and Kimi-VL around DeepSeek's, a LLaVA around
# a Mixtral or a Qwen3 MoE) runs its language model with that file, so a config.json's architecture
# is its text_config's there (`hf_config`). Not llama4_text: Llama 4's wrapper, llama4, is itself
# ruled (vLLM's mllama4.py runs llama4.py's language model), and keeps its own name.
RULED_LANGUAGE_MODEL_FILES = frozenset(
    {"mixtral", "grok-1", "deepseek", "deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2", "glm_moe_dsa"}
    | {"qwen3_moe", "qwen3_vl_moe", "qwen3_next", "qwen3_5_moe", "qwen3_5_moe_text", "gpt_oss", "llama4"}
    | {"granitemoe", "nemotron_h"}
)
# The MLP's activation (`Model.activation`), as Hugging Face's transformers names the functions
# (activations.py ACT2FN; `hidden_act`): silu x sigmoid(x) (SwiGLU when gated: Shazeer 2020), gelu the
# exact erf GELU, gelu_tanh its tanh approximation (transformers gelu_pytorch_tanh / gelu_new, JAX's
# default jax.nn.gelu: Gemma's GeGLU, Grok-1), quick_gelu x sigmoid(1.702 x) (GPT-OSS's experts),
# relu (OPT), squared_relu relu(x)^2 (So et al. 2021, Primer; transformers relu2: Nemotron).
ACTIVATIONS = ("silu", "gelu", "gelu_tanh", "quick_gelu", "relu", "squared_relu")
# The layer kinds of a hybrid pattern (megatron/core/ssm/mamba_hybrid_layer_allocation.py `Symbols`)
HYBRID_SYMBOLS = {"M": "Mamba-2", "*": "attention", "-": "MLP", "E": "MoE"}


@hash_once
@dataclass(frozen=True)
class Model:
    """A decoder-only transformer. `kv_heads` defaults to `heads` (multi-head attention) and
    `ffn_hidden` to 4 * hidden. `gated_mlp` means SwiGLU-style (two up-projections). `head_dim`
    defaults to hidden / heads; models such as Qwen3 and GPT-OSS set it apart (heads x head_dim
    then differs from hidden)."""

    name: str
    layers: Number
    hidden: Number
    heads: Number
    vocab: Number
    seq_len: Number
    kv_heads: Number | None = None
    ffn_hidden: Number | None = None
    gated_mlp: bool = False
    tied_embeddings: bool = True
    learned_positions: bool = True  # GPT: learned position table (s*h params); Llama: RoPE
    bias: bool = True  # linear-layer biases (GPT yes, Llama no)
    rmsnorm: bool = False  # RMSNorm (h params) instead of LayerNorm (2h params)
    dropout: bool = True  # attention and hidden dropout (GPT/Megatron yes, Llama no)
    head_dim: Number | None = None
    # whether the model's Hugging Face config.json states its head size (`head_dim`, `head_size`
    # or `attention_head_dim`): trtllm-bench sizes its engine with that key, else with hidden //
    # heads (`engines.trtllm_buffers`). False for the latent-attention configs (DeepSeek-V2/V3,
    # Kimi K2, Moonlight: qk_nope_head_dim and v_head_dim, no head_dim); True where the two agree anyway.
    head_dim_in_config: bool = True
    # Mixture of experts (0 experts: a dense model). Every MoE layer routes each token to
    # `experts_per_token` of its `experts` routed experts (gated or plain MLPs of
    # `expert_ffn_hidden`, default ffn_hidden) and through `shared_experts` MLPs of that width that
    # every token uses; a router (hidden x experts) picks them. The first `dense_layers` layers keep
    # a dense MLP of ffn_hidden (DeepSeek-V3: 3); after them every `moe_every`-th layer is MoE
    # (Llama 4 Maverick: 2), the others dense.
    experts: int = 0
    experts_per_token: int = 0
    expert_ffn_hidden: int | None = None
    shared_experts: int = 0
    dense_layers: int = 0
    moe_every: int = 1
    # Multi-head latent attention (DeepSeek-V2/V3, Kimi K2): keys and values from a compressed
    # latent of `kv_lora_rank` (0: ordinary attention), queries from one of `q_lora_rank` (0: a
    # full query projection); `head_dim` is then the per-head query/key dimension without rotary
    # embedding, `rope_head_dim` the decoupled rotary part, `v_head_dim` the value head.
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    rope_head_dim: int = 0
    v_head_dim: int | None = None
    # Hybrid Mamba-2 models (empty pattern: every layer is attention + MLP). Mamba-2 mixer sizes
    # (Dao & Gu 2024; megatron/core/ssm/mamba_mixer.py; Hugging Face NemotronHConfig):
    # `mamba_heads` x `mamba_head_dim` = d_inner, `mamba_state` = d_state (N), `mamba_groups` the
    # groups of B and C (G), `mamba_conv` the depthwise causal convolution's width, `mamba_chunk`
    # the SSD algorithm's chunk (Q).
    hybrid_pattern: str = ""
    mamba_heads: int = 0
    mamba_head_dim: int = 64
    mamba_state: int = 128
    mamba_groups: int = 8
    mamba_conv: int = 4
    mamba_chunk: int = 128
    # Sliding-window attention (Mistral 7B v0.1, Gemma 2/3, GPT-OSS; Beltagy et al. 2020): a windowed
    # layer's query attends to the last `sliding_window` tokens only (0: every layer attends to the
    # whole sequence). `full_attention_every` n > 0: every n-th layer (layers n-1, 2n-1, ... counted
    # from 0, as Hugging Face's Gemma 3 `sliding_window_pattern` and GPT-OSS's `layer_types`) attends
    # in full, the others are windowed; 0: every layer is windowed (Mistral 7B v0.1).
    sliding_window: int = 0
    full_attention_every: int = 0
    # GPT-OSS's clamped gated activation (HF config `swiglu_limit` 7.0; Megatron-Core
    # `activation_func_clamp_value`): the gate and linear halves of the up-projection are clamped
    # before the activation, as eager kernels beside the fused one (`physics.moe.experts_forward`).
    glu_clamp: bool = False
    # YaRN rotary embedding (HF config `rope_scaling.rope_type` "yarn", non-latent attention: GPT-OSS,
    # factor 32): its cos and sin carry a concentration factor 0.1 ln(factor) + 1, which Megatron-Core's
    # fused RoPE does not take, so it runs as eager ATen kernels there (`Plan.yarn_rotary_eager`).
    yarn_rope: bool = False
    # The rotary embedding's base (HF config `rope_theta`; Su et al. 2021's 10000, Llama 3's 500000),
    # 0 where unknown or without rotary positions. It does not change the cost; a launch writes it
    # (`emit`: Megatron-LM's --rotary-base).
    rope_theta: float = 0.0
    # The windowed layers' own rotary base where it differs from rope_theta, the full-attention
    # layers' (Gemma 3: config.json `rope_local_base_freq` 10000 beside `rope_theta` 1000000); 0: the
    # same base on every layer. Prices nothing; a launch that takes one base says so (`emit`).
    rope_local_theta: float = 0.0
    # The MLP's activation, one of ACTIVATIONS ("": the family's, silu where `gated_mlp`, else gelu).
    # Prices nothing (every activation is one element-wise kernel here); a launch writes it (`emit`:
    # Megatron-LM's --swiglu, --squared-relu, --quick-geglu).
    activation: str = ""
    # The model file an engine runs for it, named as Hugging Face config.json's `model_type` spells
    # it ("llama", "mixtral", "deepseek_v3", "qwen3_moe", "gpt_oss", "llama4", ...; None: unknown).
    # The shapes above price the model; this picks the rules that differ by engine model file
    # (`engines.dp_dense`: SGLang's Mixtral / Grok without data-parallel attention, vLLM's
    # DeepSeek layer). docs/model.md "The architecture field".
    architecture: str | None = None
    # The context the model serves (Hugging Face config.json `max_position_embeddings`: Llama 3.1's
    # 131,072, stretched by RoPE scaling from the 8,192 it pre-trained at, `seq_len`); 0: unknown,
    # `seq_len`. Prices nothing in training; serving warns against it (`serving_context`) and a
    # vLLM launch takes it for --max-model-len where the KV cache holds it (`emit.vllm`).
    max_position_embeddings: int = 0
    notes: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise SpecError(f"model: name {self.name!r} is not allowed; give a non-empty name")
        p = f"model {self.name!r}"
        chk.text(f"{p}: notes", self.notes)
        for name in ("layers", "hidden", "heads", "vocab", "seq_len"):
            object.__setattr__(self, name, chk.positive_int(f"{p}: {name}", getattr(self, name)))
        # no transformer has a million layers; beyond, the planner's stage splits grow without bound
        chk.within(f"{p}: layers", self.layers, 1, MAX_LAYERS, "layers")
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)
        if self.ffn_hidden is None:
            object.__setattr__(self, "ffn_hidden", 4 * self.hidden)
        object.__setattr__(self, "kv_heads", chk.positive_int(f"{p}: kv_heads", self.kv_heads))
        object.__setattr__(self, "ffn_hidden", chk.positive_int(f"{p}: ffn_hidden", self.ffn_hidden))
        from shardwise.specs.rules import model_rules, raise_first

        given = self.head_dim is not None
        raise_first(model_rules(self.hidden, self.heads, self.kv_heads, p, head_dim_given=given))
        head_dim = self.head_dim if given else self.hidden // self.heads
        object.__setattr__(self, "head_dim", chk.positive_int(f"{p}: head_dim", head_dim))
        self._check_moe_and_mla(p)
        self._check_hybrid(p)
        self._check_window(p)
        self._check_architecture(p)
        context = self.max_position_embeddings
        if isinstance(context, bool) or not isinstance(context, (int, np.integer)) or context < 0:
            raise SpecError(
                f"{p}: max_position_embeddings {context!r} is not allowed; give a whole number of tokens >= 0 "
                "(0: unknown, the sequence length)"
            )
        for name in ("rope_theta", "rope_local_theta"):
            theta = getattr(self, name)
            if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not 0 <= theta < float("inf"):
                raise SpecError(f"{p}: {name} {theta!r} is not allowed; give a number >= 0 (0: unknown)")
            object.__setattr__(self, name, float(theta))
        flags = ("gated_mlp", "tied_embeddings", "learned_positions", "bias", "rmsnorm", "dropout", "glu_clamp")
        for flag in (*flags, "yarn_rope", "head_dim_in_config"):
            value = getattr(self, flag)
            if not isinstance(value, (bool, np.bool_)):  # numpy's booleans are booleans too
                raise SpecError(f"{p}: {flag} must be true or false, got {value!r}")
            object.__setattr__(self, flag, bool(value))
        act = self.activation or ("silu" if self.gated_mlp else "gelu")
        if not isinstance(act, str) or act not in ACTIVATIONS:
            raise SpecError(f"{p}: activation {act!r} is not allowed; choose one of {', '.join(ACTIVATIONS)}")
        object.__setattr__(self, "activation", act)

    def _check_moe_and_mla(self, p: str) -> None:
        for name in ("experts", "experts_per_token", "shared_experts", "dense_layers", "kv_lora_rank",
                     "q_lora_rank", "rope_head_dim"):  # fmt: skip
            object.__setattr__(self, name, chk.non_negative_int(f"{p}: {name}", getattr(self, name)))
        object.__setattr__(self, "moe_every", chk.positive_int(f"{p}: moe_every", self.moe_every))
        expert_ffn = self.ffn_hidden if self.expert_ffn_hidden is None else self.expert_ffn_hidden
        object.__setattr__(self, "expert_ffn_hidden", chk.positive_int(f"{p}: expert_ffn_hidden", expert_ffn))
        v_head = self.head_dim if self.v_head_dim is None else self.v_head_dim
        object.__setattr__(self, "v_head_dim", chk.positive_int(f"{p}: v_head_dim", v_head))
        if self.experts and not 1 <= self.experts_per_token <= self.experts:
            raise SpecError(
                f"{p}: experts_per_token {self.experts_per_token} is not allowed; it must be from 1 to "
                f"experts ({self.experts})"
            )
        if not self.experts and (self.experts_per_token or self.shared_experts):
            raise SpecError(f"{p}: experts_per_token and shared_experts need experts > 0 (a mixture of experts)")
        if self.experts and np.any(np.asarray(self.layers) <= self.dense_layers):
            raise SpecError(f"{p}: dense_layers {self.dense_layers} leaves no MoE layer of {self.layers}")

    def _check_hybrid(self, p: str) -> None:
        for name in ("mamba_heads",):
            object.__setattr__(self, name, chk.non_negative_int(f"{p}: {name}", getattr(self, name)))
        for name in ("mamba_head_dim", "mamba_state", "mamba_groups", "mamba_conv", "mamba_chunk"):
            object.__setattr__(self, name, chk.positive_int(f"{p}: {name}", getattr(self, name)))
        pattern = self.hybrid_pattern
        if not isinstance(pattern, str):
            raise SpecError(f"{p}: hybrid_pattern must be a string of M, *, - and E, got {pattern!r}")
        if not pattern:
            if self.mamba_heads:
                raise SpecError(f"{p}: mamba_heads needs a hybrid_pattern with M layers")
            return
        bad = next((i for i, c in enumerate(pattern) if c not in HYBRID_SYMBOLS), None)
        if bad is not None:
            allowed = ", ".join(f"{k} ({v})" for k, v in HYBRID_SYMBOLS.items())
            raise SpecError(f"{p}: hybrid_pattern has {pattern[bad]!r} at position {bad}; use {allowed}")
        if np.any(np.asarray(self.layers) != len(pattern)):  # (an array of equal counts: stacked runs)
            raise SpecError(f"{p}: layers {self.layers} differs from the hybrid_pattern's {len(pattern)} layers")
        if "M" in pattern and not self.mamba_heads:
            raise SpecError(f"{p}: hybrid_pattern has Mamba layers (M) but mamba_heads is 0")
        if np.any(np.asarray(self.mamba_heads) % self.mamba_groups):
            raise SpecError(
                f"{p}: mamba_heads {self.mamba_heads} is not a multiple of mamba_groups {self.mamba_groups}"
            )
        if "E" in pattern and not self.experts:
            raise SpecError(f"{p}: hybrid_pattern has mixture-of-experts layers (E) but experts is 0")
        if self.experts and "E" not in pattern:
            raise SpecError(f"{p}: a hybrid model's experts are its E layers; give them in hybrid_pattern")
        if self.experts and (self.dense_layers or self.moe_every != 1):
            raise SpecError(f"{p}: a hybrid model's MoE layers are its E layers: leave dense_layers and moe_every out")
        if "E" in pattern and "-" in pattern and self.shared_experts:
            raise SpecError(f"{p}: MLP (-) and shared-expert (E) layers in one hybrid_pattern are not priced")
        if self.kv_lora_rank:
            raise SpecError(f"{p}: latent attention in a hybrid model is not priced")

    def _check_window(self, p: str) -> None:
        for name in ("sliding_window", "full_attention_every"):
            object.__setattr__(self, name, chk.non_negative_int(f"{p}: {name}", getattr(self, name)))
        if self.full_attention_every and not self.sliding_window:
            raise SpecError(f"{p}: full_attention_every needs a sliding_window (tokens a windowed layer attends to)")
        if self.sliding_window and self.kv_lora_rank:
            raise SpecError(f"{p}: sliding-window latent attention is not priced")

    def _check_architecture(self, p: str) -> None:
        value = self.architecture
        if value is None:
            return
        if not isinstance(value, str) or not re.fullmatch(ARCHITECTURE_PATTERN, value):
            raise SpecError(
                f"{p}: architecture {value!r} is not allowed; give the model_type of its Hugging Face "
                "config.json (lower-case letters, digits, '_', '-' or '.', e.g. mixtral, deepseek_v3), "
                "or leave it out (unknown)"
            )

    @property
    def sliding_share(self) -> Number:
        """The share of layers whose attention is windowed (`sliding_window`): all but every
        `full_attention_every`-th, 0 without a window. The layers are priced as their mean layer,
        as a hybrid's are (`physics.flops.layer_forward`)."""
        if not self.sliding_window:
            return 0.0
        if not self.full_attention_every:
            return 1.0
        n = np.asarray(self.layers)
        share = (n - n // self.full_attention_every) / n
        return float(share) if share.ndim == 0 else share

    @property
    def is_hybrid(self) -> bool:
        """Layers of one mixer each (`hybrid_pattern`), not attention + MLP."""
        return bool(self.hybrid_pattern)

    @property
    def hybrid_shares(self) -> tuple[float, float, float]:
        """(Mamba-2, attention, MLP) layers as shares of all layers: a layer of the mean of the
        pattern holds these fractions of each mixer (an ordinary model: (0, 1, 1), each layer
        attention and an MLP); mixture-of-experts layers (E) count as MLP layers of their shared
        experts (`hybrid_mlp_width`)."""
        pattern = self.hybrid_pattern
        if not pattern:
            return 0.0, 1.0, 1.0
        n = len(pattern)
        dense = pattern.count("-") + (pattern.count("E") if self.shared_experts else 0)
        return pattern.count("M") / n, pattern.count("*") / n, dense / n

    @property
    def hybrid_mlp_width(self) -> int:
        """The width of a hybrid mean layer's dense MLP: ffn_hidden for MLP layers (-); for
        mixture-of-experts layers (E) their shared experts' (shared_experts x expert_ffn_hidden),
        which the MLP share of `hybrid_shares` then counts (the routed experts are priced per E
        layer, `engines.moe`; a pattern holds one kind or the other)."""
        if "E" in self.hybrid_pattern and self.shared_experts:
            return self.shared_experts * self.expert_ffn_hidden
        return self.ffn_hidden

    @property
    def mamba_inner(self) -> int:
        """d_inner = Mamba-2 heads x head dim (the x, z and output width of a Mamba-2 mixer)."""
        return self.mamba_heads * self.mamba_head_dim

    @property
    def transformer_twin(self) -> Model:
        """The same sizes as an ordinary model (every layer attention + MLP): what the hybrid's
        attention and MLP layers are priced from (`physics.mamba`)."""
        return replace(self, hybrid_pattern="", mamba_heads=0, experts=0, experts_per_token=0, shared_experts=0)

    @property
    def serving_context(self) -> int:
        """Tokens one request may hold when served (prompt and output): `max_position_embeddings`,
        or the sequence length where that is longer (--seq-len; the longest of a swept one)."""
        return max(int(self.max_position_embeddings), int(np.max(self.seq_len)))

    @property
    def context_words(self) -> str:
        """The serving context in words: "context 131,072 (max_position_embeddings)" or "sequence
        length 8,192"."""
        context = self.serving_context
        if context > int(np.max(self.seq_len)):
            return f"context {context:,} (max_position_embeddings)"
        return f"sequence length {context:,}"

    @property
    def is_moe(self) -> bool:
        return bool(self.experts)

    @property
    def moe_layers(self) -> Number:
        """How many layers are mixture-of-experts (0 for a dense model)."""
        if not self.experts:
            return 0
        if self.hybrid_pattern:  # a hybrid's E layers
            return self.hybrid_pattern.count("E")
        after = np.asarray(self.layers) - self.dense_layers
        return int(after // self.moe_every) if after.ndim == 0 else after // self.moe_every

    @property
    def q_dim(self) -> Number:
        """heads x head_dim: the queries' and the attention output's width (hidden unless head_dim
        is given apart)."""
        return self.heads * self.head_dim

    def with_(self, **changes: object) -> Model:
        """A copy with `changes`; values that were derived (head_dim from hidden / heads, the
        expert width from ffn_hidden, the value head from head_dim) follow what they derive from."""
        derived = {
            "head_dim": (("hidden", "heads"), self.hidden // self.heads),
            "expert_ffn_hidden": (("ffn_hidden",), self.ffn_hidden),
            "v_head_dim": (("hidden", "heads", "head_dim"), self.head_dim),
        }
        for name, (sources, default) in derived.items():
            moved = any(s in changes for s in sources)
            if moved and name not in changes and bool(np.all(np.asarray(getattr(self, name)) == default)):
                changes[name] = None
        return replace(self, **changes)  # type: ignore[arg-type]
