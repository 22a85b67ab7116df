"""The transformer being trained or served (the "Application" of Calculon's split).

Notation used across shardwise (Narayanan et al. 2021; Korthikanti et al. 2022):

    l  layers            h  hidden size          a  attention heads     k  KV heads (GQA)
    f  FFN hidden size   V  vocabulary           s  sequence length     d  head dim (h / a unless given)
    q  = a d, the width of the queries and of the attention output (h unless d is given apart)
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from shardwise.specs import _checks as chk
from shardwise.specs._checks import Number, SpecError

MAX_LAYERS = 1_000_000


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
        for flag in ("gated_mlp", "tied_embeddings", "learned_positions", "bias", "rmsnorm", "dropout"):
            value = getattr(self, flag)
            if not isinstance(value, (bool, np.bool_)):  # numpy's booleans are booleans too
                raise SpecError(f"{p}: {flag} must be true or false, got {value!r}")
            object.__setattr__(self, flag, bool(value))

    @property
    def q_dim(self) -> Number:
        """heads x head_dim: the queries' and the attention output's width (hidden unless head_dim
        is given apart)."""
        return self.heads * self.head_dim

    def with_(self, **changes: object) -> Model:
        return replace(self, **changes)  # type: ignore[arg-type]
