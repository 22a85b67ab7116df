"""Activations offloaded to host memory: Megatron-Core's `--cpu-offloading` with
`--cpu-offloading-num-layers N` (TransformerConfig.cpu_offloading, cpu_offloading_num_layers,
cpu_offloading_activations), which runs Transformer Engine's CPU offload around each layer
(`get_cpu_offload_context`). What crosses the host link per micro-batch, what of it the compute
hides, and what the GPU no longer holds.

Notation, one pipeline stage (Megatron-Core allows it with pp = 1 only) and one micro-batch:

    L        layers on the stage; n of them offloaded, the first n (0 <= n < L)
    A        one layer's saved activations (bytes), as `physics.memory_activations` counts them
    B        the GPU's host link, bytes/s one way (`Gpu.host_link_bytes_per_s`)
    c = A/B  one layer's copy, out (forward) or back in (backward)
    t        one layer's forward time t_f, or backward time t_b
    k        L - n - 1: layers of compute between a copy's start and its deadline

Transformer Engine 2.x (transformer_engine/pytorch/cpu_offload.py, `OffloadSynchronizer.
_default_offload_sync_init`, one `offload_stream` for both directions): layer i (< n) starts to
copy out when its forward ends and must be out before the forward of layer L - n + i starts; its
reload starts before the backward of layer L - 1 - n + i and must be in before layer i's backward.
Both passes are the same directed graph: a chain of L layers of compute, a chain of n copies on
the one stream, and each copy between the end of layer i and the start of layer i + k + 1. Its
longest path is the pass's time:

    k >= 1:  max(L t, 2 t + n c)      exposed = max(0, n c - (L - 2) t)
    k == 0:  L t + n c                exposed = n c   (each copy holds up the next layer)

(the copies run in the shadow of the other L - 2 layers; the first and last layer of the pass
cannot hide one). Transformer Engine 1.x (`cpu_offload_v1.py`, AsyncDoubleBufferGroupOffloadHandler)
spreads the n copies over windows of L / n layers instead, which gives the same sum where copies
are exposed (n c - about L t). The peak of saved activations is that of L - n layers
(`_default_offload_sync_init`'s docstring); the copies run beside compute on the copy engines, so
they take no SM time (the HBM traffic they add, 2 A per layer, is not priced).

Optimizer offload (`Plan.offload_optimizer` = f; Megatron-Core's `--optimizer-cpu-offload
--optimizer-offload-fraction f`, megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py
`HybridDeviceOptimizer`; DeepSpeed ZeRO-Offload's `offload_optimizer` at f = 1, Ren et al. 2021):
the fp32 master weights and Adam moments of a share f of a GPU's optimizer shard live in host
memory. Each step that share's gradients go out and its updated 16-bit parameters come back over
the host link, and the host CPU runs Adam on them in between (`optimizer_host_s`): P f (g + w) / B
+ P f / R for P parameters in the GPU's shard, g and w bytes per gradient and weight, R the CPU
Adam's parameters per second (`Gpu.host_adam_params_per_s`, the host's rate shared by its GPUs).
Serial after the backward pass: Megatron-Core's `--overlap-cpu-optimizer-d2h-h2d` overlaps the
copies with the CPU step per parameter group, which Megatron-Bridge measures at 7% of a fully
offloaded step (docs/training/cpu-offloading.md: CPU Adam dominates), not modelled; nor is
DeepSpeed's delayed parameter update (the CPU step of one iteration beside the next one's passes).

Not modelled here: a host link shared by several GPUs (a PCIe switch or a socket shared by GPUs
that all offload at once: give the share as `host_link`), the host memory's own bandwidth (Grace's
LPDDR5X: 512 GB/s per CPU, above what its two GPUs' copies move), Megatron-Core's newer
fine-grained offloading (`--fine-grained-activation-offloading --offload-modules`), and
parameter offload (ZeRO-Infinity's and FSDP's `CPUOffload`: the 16-bit weights on the host too).
"""

from __future__ import annotations

from shardwise.arrays import as_array, ifelse, maximum, minimum
from shardwise.specs._checks import Number


def exposed_copy_s(layers: Number, offloaded: Number, copy_s: Number, layer_s: Number) -> Number:
    """Seconds one pass over a stage's `layers` layers (each `layer_s`) takes longer because
    `offloaded` of them copy their activations over the host link (each `copy_s`): the longest
    path of the module docstring less the compute, 0 without offload."""
    L, c, t = (as_array(x) for x in (layers, copy_s, layer_s))
    n = minimum(as_array(offloaded), maximum(L - 1.0, 0.0))  # a stage without layers copies nothing
    spread = maximum(0.0, n * c - (L - 2.0) * t)  # k >= 1
    tight = n * c  # k == 0: n = L - 1
    return ifelse(n > 0, ifelse(L - n - 1 >= 1, spread, tight), 0.0)


def copy_s(activation_bytes: Number, host_link_bytes_per_s: Number) -> Number:
    """One layer's saved activations over the host link, one way (0 where no rate is given)."""
    rate = as_array(host_link_bytes_per_s)
    return ifelse(rate > 0, as_array(activation_bytes) / maximum(rate, 1e-30), 0.0)


def held_fraction(layers: Number, offloaded: Number) -> Number:
    """The share of a stage's saved activations still on the GPU at the end of a micro-batch's
    forward pass: those of L - n of its L layers."""
    L = maximum(as_array(layers), 1.0)
    return 1.0 - minimum(as_array(offloaded), L) / L


def optimizer_host_s(
    params: Number,
    share: Number,
    grad_bytes: Number,
    weight_bytes: Number,
    host_link_bytes_per_s: Number,
    host_adam_params_per_s: Number,
) -> Number:
    """Seconds the host's share `share` of a GPU's `params`-parameter optimizer shard adds to the
    step: gradients out and parameters back over the host link and the CPU Adam between them (the
    module docstring); 0 where the share is 0."""
    n = as_array(params) * as_array(share)
    link, adam = as_array(host_link_bytes_per_s), as_array(host_adam_params_per_s)
    copies = n * (as_array(grad_bytes) + as_array(weight_bytes)) / maximum(link, 1e-30)
    return ifelse(as_array(share) > 0, copies + n / maximum(adam, 1e-30), 0.0)
