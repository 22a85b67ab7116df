"""Parameter counts (Narayanan et al. 2021 Eq. 2, generalised to GQA, gated MLPs, no biases).

GPT-style layer (Narayanan Eq. 2): 12 h^2 + 13 h per layer, so the model has
P = 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)) with tied, learned embeddings
(GPT-3 175B: 174.6e9).
"""

from __future__ import annotations

import numpy as np

from shardwise.specs import Model
from shardwise.specs._checks import Number
from shardwise.specs.stages import StageSplit, stage_split


def _norm_params(model: Model) -> Number:
    h = model.hidden
    return h if model.rmsnorm else 2 * h  # RMSNorm: gain; LayerNorm: gain + bias


def layer_params_split(model: Model) -> tuple[Number, Number]:
    """(parameters split across TP ranks, parameters replicated on every TP rank) of one layer."""
    h, f, d, kv = model.hidden, model.ffn_hidden, model.head_dim, model.kv_heads
    qkv_out = model.q_dim + 2 * kv * d  # query heads + key and value heads
    up = (2 if model.gated_mlp else 1) * f
    split = h * qkv_out + model.q_dim * h + h * up + f * h  # QKV, attention out, MLP up (x2 gated), MLP down
    replicated = 2 * _norm_params(model)  # two norms per layer
    if model.bias:
        split = split + qkv_out + up  # column-parallel biases are split
        replicated = replicated + 2 * h  # row-parallel biases (attention out, MLP down) are not
    return split, replicated


def layer_params(model: Model) -> Number:
    split, replicated = layer_params_split(model)
    return split + replicated


def embedding_params(model: Model) -> Number:
    """Word embeddings (V h) plus a learned position table (s h) if the model has one."""
    pos = model.seq_len * model.hidden if model.learned_positions else 0
    return model.vocab * model.hidden + pos


def total_params(model: Model) -> Number:
    """Unique parameters: layers, embeddings, final norm and an untied output matrix."""
    out = 0 if model.tied_embeddings else model.vocab * model.hidden
    return model.layers * layer_params(model) + embedding_params(model) + _norm_params(model) + out


def stage_params_per_gpu(
    model: Model, tp: Number, pp: Number, split: StageSplit | None = None
) -> tuple[Number, Number, Number]:
    """Parameters held by one GPU of the first, the fullest middle and the last pipeline stage.

    Layers as the split gives them (default: as even as possible), matrices split across tp. The first stage holds the
    word embedding (vocab-parallel, / tp) and the position table (replicated); the last stage
    the final norm and the output matrix (a copy of the word embedding when tied and pp > 1;
    Megatron-LM keeps both copies in sync with an all-reduce).
    """
    if split is None:
        split = stage_split(model.layers, pp)
    matrices, replicated = layer_params_split(model)
    per_layer = matrices / tp + replicated
    layers = per_layer * split.middle_max
    pos = model.seq_len * model.hidden if model.learned_positions else 0
    word = model.vocab * model.hidden / tp
    norm = _norm_params(model)
    single = per_layer * model.layers + word + pos + norm + (0 if model.tied_embeddings else word)
    one_stage = np.asarray(pp) == 1
    first = np.where(one_stage, single, per_layer * split.first + word + pos)
    last = np.where(one_stage, single, per_layer * split.last + norm + word)
    return first, layers, last
