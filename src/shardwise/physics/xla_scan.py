"""FSDP collectives at the edges of XLA's scanned layers, without the collective pipeliner
(`Plan.scan_unpipelined`).

A JAX stack that scans its repeated layers (Praxis' StackedTransformerRepeated, MaxText's
scan_layers) compiles one layer into the body of an XLA while loop. XLA's SPMD partitioner puts
each sharded weight's all-gather in the body, before the dot that reads it, and each weight
gradient's reduce-scatter after the dot that makes it. The latency-hiding scheduler orders one
computation at a time (xla/service/latency_hiding_scheduler.cc): it overlaps a collective only with
work of the same iteration. Unless XLA's collective pipeliner moves a layer's all-gathers into the
iteration before and its reduce-scatters into the iteration after
(`--xla_gpu_enable_pipelined_all_gather`, `--xla_gpu_enable_pipelined_reduce_scatter`, with
`--xla_gpu_enable_while_loop_double_buffering`; NVIDIA/JAX-Toolbox rosetta/docs/GPU_performance.md
lists them under "Enable Optimizations for FSDP communication"), the gather of the first weight an
iteration reads has nothing before it to hide behind, and the reduce-scatter of the last gradient
it makes has nothing after it: both wait, every layer, every pass.

XLA left the pipeliner off by default until September 2024 (openxla/xla#16953, 2024-09-09, reverts
the commit that had just enabled `--xla_gpu_enable_pipelined_{all_gather,all_reduce,...}`), and
JAX-Toolbox's Paxml launch flags of the 23.10 and 24.04 releases do not set it
(rosetta/rosetta/projects/pax/xla_flags/common.env, gpt-5b.env: the latency-hiding scheduler, the
all-reduce combine threshold and `--xla_gpu_graph_level=0` only). dgxc-benchmarking's Paxml
launch sets it (paxml/configure.sh: `--xla_gpu_enable_pipelined_all_gather=true
--xla_gpu_enable_pipelined_reduce_scatter=true`), as do MaxText's GPU scripts.

What waits, per micro-batch and layer: the all-gather of the attention's input projection (query,
key and value, with its bias: the first weight a transformer layer reads after its norm) in the
forward pass and again in the backward pass, and the reduce-scatter of that projection's gradient
(the last weight gradient the layer's backward makes). A simplification for the backward's
first gather: a remat policy that recomputes the layer from its input (save_nothing) reads the
same projection first; one that keeps the dots starts the backward with the MLP's output
projection, whose gather the recomputed attention partly hides -- taken as the QKV's here for
every policy. Each edge collective is priced as its share (bytes) of the stage's whole gather and
reduce-scatter, which are bandwidth-bound at these sizes (tens to hundreds of MB a layer).
"""

from __future__ import annotations

from shardwise.arrays import maximum, minimum
from shardwise.specs import Model
from shardwise.specs._checks import Number

# per micro-batch and layer: the forward's and the backward's first gather, the backward's last
# reduce-scatter (see the module docstring)
EDGE_GATHERS_PER_MICRO_BATCH = 2
EDGE_REDUCE_SCATTERS_PER_MICRO_BATCH = 1


def edge_params(model: Model) -> Number:
    """Parameters of one layer's attention input projection (query, key and value heads, and
    their bias when the model has biases), before any tensor-parallel split: what a scanned
    layer gathers first in each pass and reduce-scatters last."""
    qkv_out = model.q_dim + 2 * model.kv_heads * model.head_dim
    return model.hidden * qkv_out + (qkv_out if model.bias else 0)


def edge_exposed_s(
    gather_s: Number,
    reduce_scatter_s: Number,
    edge_params_per_gpu: Number,
    layers: Number,
    weights_per_gpu: Number,
    grads_per_gpu: Number,
    micro_batches: Number,
) -> Number:
    """Seconds per step the scanned layers' edge collectives wait with nothing beside them: per
    micro-batch and layer, two gathers and one reduce-scatter of `edge_params_per_gpu`, each the
    same share of the stage's whole gather (`gather_s`, of `weights_per_gpu`) and reduce-scatter
    (`reduce_scatter_s`, of `grads_per_gpu`), at most a layer's share of either."""
    layers = maximum(layers, 1.0)
    gather = EDGE_GATHERS_PER_MICRO_BATCH * gather_s * minimum(edge_params_per_gpu / weights_per_gpu, 1.0 / layers)
    # a layer reduces at most its share of the trained parameters (LoRA: its adapters' gradients)
    reduce = (
        EDGE_REDUCE_SCATTERS_PER_MICRO_BATCH
        * reduce_scatter_s
        * minimum(edge_params_per_gpu / grads_per_gpu, 1.0 / layers)
    )
    return micro_batches * layers * (gather + reduce)
