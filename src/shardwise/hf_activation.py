"""The MLP's activation (`specs.Model.activation`) from a Hugging Face config's activation name."""

from __future__ import annotations

# transformers activations.py ACT2FN names -> `specs.model.ACTIVATIONS`: gelu_new, gelu_fast,
# gelu_pytorch_tanh and gelu_accurate approximate GELU with tanh (gelu_new is GPT-2's, gelu_pytorch_tanh
# Gemma's); relu2 is squared ReLU (NemotronHConfig `mlp_hidden_act`, NemotronConfig `hidden_act`);
# swish is silu; "swiglu" and "geglu" name the gated pair by its activation.
_NAMES = {
    "silu": "silu",
    "swish": "silu",
    "swiglu": "silu",
    "gelu": "gelu",
    "gelu_python": "gelu",
    "geglu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_accurate": "gelu_tanh",
    "gelu_pytorch_tanh_gated": "gelu_tanh",
    "quick_gelu": "quick_gelu",
    "relu": "relu",
    "relu2": "squared_relu",
}
# Model files whose MLP is not what `hidden_act` says: GPT-OSS's experts compute (up + 1) x
# gate x sigmoid(1.702 gate) whatever the config's hidden_act (transformers modeling_gpt_oss.py
# GptOssExperts, alpha 1.702); Gemma's configs that state no activation run gelu_pytorch_tanh
# (GemmaConfig, Gemma2Config, Gemma3TextConfig `hidden_activation` default).
_BY_MODEL_TYPE = {"gpt_oss": "quick_gelu"}
_GEMMA_DEFAULT = "gelu_tanh"


def activation(name: str, model_type: str, gemma: bool, gated: bool) -> str:
    """Our name for config.json's activation `name` (lower case) of `model_type`; where it is absent
    or one shardwise does not name, the family's (`specs.Model.activation`: silu gated, gelu plain)."""
    if model_type in _BY_MODEL_TYPE:
        return _BY_MODEL_TYPE[model_type]
    if not name and gemma:
        return _GEMMA_DEFAULT
    return _NAMES.get(name) or ("silu" if gated else "gelu")
