"""Which Hugging Face configs `hf_config` prices, and what it reads but does not price.

shardwise prices decoder-only transformers (every layer causal self-attention and an MLP or a mixture
of experts) and the hybrid Mamba-2 models of `NemotronHConfig` (`model_type` nemotron_h, read by their
layer pattern: docs/model.md "Hybrid Mamba-2 models"). Anything else is refused in one line naming
what it is, by `model_type` (transformers' `CONFIG_MAPPING_NAMES` spellings), `is_encoder_decoder`,
a masked-LM class, or state-space fields without a layer pattern; before, a T5 read as a 12-layer
decoder, a BERT as a causal model, Jamba's Mamba layers were priced as attention (review 33).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shardwise.errors import SpecError

SUPPORTED = (
    "shardwise prices decoder-only transformers (Llama, Mistral, Qwen, Gemma, GPT-2, Mixtral, DeepSeek, ...) "
    "and NemotronHConfig's hybrid Mamba-2 models (model_type nemotron_h)"
)
# bidirectional encoders (a masked-LM objective, no causal decoding)
_ENCODER_ONLY = frozenset(
    ("bert", "roberta", "xlm-roberta", "xlm-roberta-xl", "distilbert", "albert", "electra", "deberta", "deberta-v2",
     "camembert", "modernbert", "mpnet", "ernie", "megatron-bert", "nomic_bert", "esm", "longformer", "big_bird",
     "funnel", "convbert", "xlm", "roformer", "mobilebert", "squeezebert", "layoutlm", "nezha")
)  # fmt: skip
# an encoder and a decoder with cross-attention between them
_ENCODER_DECODER = frozenset(
    ("t5", "mt5", "umt5", "longt5", "t5gemma", "switch_transformers", "bart", "mbart", "plbart", "pegasus",
     "pegasus_x", "marian", "blenderbot", "blenderbot-small", "led", "prophetnet", "fsmt", "m2m_100", "nllb-moe",
     "bigbird_pegasus", "encoder-decoder", "whisper", "pix2struct", "speech-encoder-decoder",
     "vision-encoder-decoder", "seamless_m4t", "seamless_m4t_v2", "mvp")
)  # fmt: skip
# layers that are not softmax attention (state-space, recurrent, linear attention), whole or hybrid
_NOT_ATTENTION = {
    "mamba": "a Mamba state-space model",
    "mamba2": "a Mamba-2 state-space model",
    "falcon_mamba": "a Mamba state-space model",
    "jamba": "a hybrid of Mamba and attention layers with experts",
    "zamba": "a hybrid of Mamba and shared attention layers",
    "zamba2": "a hybrid of Mamba-2 and shared attention layers",
    "bamba": "a hybrid of Mamba-2 and attention layers",
    "falcon_h1": "a hybrid of parallel Mamba-2 and attention heads",
    "granitemoehybrid": "a hybrid of Mamba-2 and attention layers with experts",
    "rwkv": "an RWKV recurrent model",
    "recurrent_gemma": "a Griffin model of recurrent and local-attention blocks",
    "xlstm": "an xLSTM recurrent model",
    "lfm2": "a hybrid of short convolutions and attention layers",
    "qwen3_next": "a hybrid of gated DeltaNet linear attention and attention layers",
    "minimax": "a hybrid of lightning (linear) attention and attention layers",
}
# state-space sizes (MambaConfig / Mamba2Config `state_size`, Jamba/Zamba/Bamba/Falcon-H1/GraniteMoeHybrid
# `mamba_d_state`, mamba_ssm's `ssm_cfg`, NemotronHConfig's `ssm_state_size`): only with a layer pattern
_STATE_KEYS = ("state_size", "mamba_d_state", "ssm_cfg", "ssm_state_size")
_PATTERN_KEYS = ("hybrid_override_pattern", "layers_block_type")
_NOT_ATTENTION_LAYERS = ("linear_attention", "mamba", "mamba2", "conv", "recurrent")


def refuse_unsupported(p: Path, cfg: dict[str, Any], model_type: str) -> None:
    """SpecError, one line, where the config is not a decoder-only transformer shardwise prices."""
    classes = cfg.get("architectures")
    name = classes[0] if isinstance(classes, list) and classes and isinstance(classes[0], str) else ""
    what = f"model_type {model_type}" if model_type else "this config"
    if name:
        what += f" ({name})"
    kind = None
    if model_type in _ENCODER_DECODER or cfg.get("is_encoder_decoder") is True:
        kind = "an encoder-decoder model"
    elif model_type in _ENCODER_ONLY or name.endswith("ForMaskedLM"):
        kind = "an encoder-only (bidirectional, masked-LM) model"
    elif model_type in _NOT_ATTENTION:
        kind = _NOT_ATTENTION[model_type]
    elif any(cfg.get(k) is not None for k in _STATE_KEYS) and not any(cfg.get(k) is not None for k in _PATTERN_KEYS):
        key = next(k for k in _STATE_KEYS if cfg.get(k) is not None)
        kind = f"a state-space (Mamba) model ({key}) without a NemotronHConfig layer pattern"
    else:
        types = cfg.get("layer_types")
        odd = [t for t in types if t in _NOT_ATTENTION_LAYERS] if isinstance(types, list) else []
        if odd:
            kind = f"a model with {odd[0]} layers (layer_types)"
    if kind is not None:
        raise SpecError(f"{p}: {what} is {kind}, which is not supported; {SUPPORTED}")


# q, k and v projections with biases, o_proj and the MLP without, where the config states no
# attention_bias (transformers Qwen2Attention: nn.Linear(..., bias=True) for q_proj, k_proj,
# v_proj, bias=False for o_proj; Qwen2-MoE and Qwen2-VL's language models the same)
_QKV_BIAS_TYPES = ("qwen2", "qwen2_moe", "qwen2_vl", "qwen2_5_vl")


def unpriced_notes(p: Path, cfg: dict[str, Any], model_type: str, out: dict[str, Any]) -> list[str]:
    """One line per architecture detail the config states that the Model cannot carry (priced without it)."""
    notes = []
    caps = [f"{k} {cfg[k]}" for k in ("attn_logit_softcapping", "final_logit_softcapping") if cfg.get(k)]
    if caps:  # Gemma 2: tanh(x / c) c on every attention score and on the logits
        notes.append(
            f"{p.name}: soft-capping ({', '.join(caps)}) is not priced: attention and logits as without it "
            "(a tanh per score, inside flash-attention's kernel where it runs)"
        )
    if model_type in _QKV_BIAS_TYPES and cfg.get("attention_bias") is None and not out.get("bias"):
        d = out.get("head_dim") or out["hidden"] // out["heads"]
        per_layer = (out["heads"] + 2 * out.get("kv_heads", out["heads"])) * d
        notes.append(
            f"{p.name}: the q, k and v projections' biases ({model_type}: {per_layer:,} parameters a layer, "
            f"{per_layer * out['layers'] / 1e6:.2f}M in all) are not counted; bias false prices no linear-layer "
            "biases (the model's biases are all or none)"
        )
    return notes


class Duplicate(ValueError):
    """A key twice in one JSON object of a config.json."""


def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are all distinct (json keeps the last of two silently)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise Duplicate(key)
        out[key] = value
    return out
