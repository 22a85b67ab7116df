"""Tensor parallelism that moves activations through pinned host memory instead of a collective
library: ExLlamaV2's (`exllamav2/exllamav2_ext/ext_tp.cpp`, `ext_qattn.cpp`, `ext_qmlp.cpp`,
turboderp-org/exllamav2 at da07fac, 2025-12).

Notation: T tokens in the forward, h the hidden size, a = heads x head_dim the attention output,
f the MLP's intermediate size, p the TP GPUs, e = 2 bytes (fp16 activations), B a GPU's PCIe
link rate (one direction), l the link's per-copy latency.

What the source does per decoder layer (its NCCL all-reduce is commented out): every projection
is column-parallel, so each module ends with an all-gather, staged through one pinned host
buffer (`pinned_temp`) with `cudaMemcpyAsync` / `cudaMemcpy2DAsync`:
- attention (`tp_attn_forward_paged_`): broadcast the layer input from the host buffer to every
  GPU (H2D, T h e); QKV and attention on the GPU's heads; all-gather the attention output (D2H of
  the GPU's T a e / p, a cross-device event barrier, H2D of the whole T a e); the output projection
  on the GPU's columns; D2H of its T h e / p into the host buffer (the layer's output lives there);
- MLP (`tp_mlp_forward_`): the same with the intermediate activation all-gathered: H2D T h e,
  D2H T f e / p, H2D T f e, D2H T h e / p.

Per GPU and layer: H2D (2h + a + f) T e, D2H (2h + a + f) T e / p, in 8 copies. The copies run on
the GPU's compute stream, so they add to its kernels (nothing overlaps); the p GPUs copy at once,
each on its own link, at B. Unlike an all-reduce, the gathered intermediate (f = 3.5 h for
Llama 3 70B) crosses the link: for Llama 3 70B at TP 2 that is 327 MB per layer for a 2,048-token
chunk, against 34 MB each way for Megatron's two ring all-reduces.

Not priced: the host DRAM the p GPUs share (p B must stay under it), the CPU time to issue the
copies and barriers (turboderp-org/exllamav2#571: "the bottleneck is, once again, Python" for
decoding, which the C++ path above was written to remove).
"""

from __future__ import annotations

import numpy as np

from shardwise.specs import Link, Model
from shardwise.specs._checks import Number

FP16_BYTES = 2  # ExLlamaV2's activations (`torch.half` pinned buffers)
COPIES_PER_LAYER = 8  # 4 H2D, 4 D2H (module docstring)


def exllamav2_tp_layer_bytes(model: Model, tokens: Number, tp: Number) -> tuple[Number, Number]:
    """(H2D, D2H) bytes one GPU copies per decoder layer under ExLlamaV2's TP (module docstring)."""
    t = np.asarray(tokens, dtype=float)
    p = np.maximum(np.asarray(tp, dtype=float), 1.0)
    h, f = float(model.hidden), float(model.ffn_hidden)
    a = float(model.heads * model.head_dim)
    gathered = (2.0 * h + a + f) * t * FP16_BYTES
    return gathered, gathered / p


def exllamav2_tp_layer_s(model: Model, tokens: Number, tp: Number, link: Link) -> Number:
    """Seconds one GPU's stream spends copying per decoder layer under ExLlamaV2's TP; 0 at TP 1."""
    h2d, d2h = exllamav2_tp_layer_bytes(model, tokens, tp)
    s = (h2d + d2h) / link.effective_bandwidth_bytes_per_s + COPIES_PER_LAYER * link.latency_s
    return np.where(np.asarray(tp) > 1, s, 0.0)
