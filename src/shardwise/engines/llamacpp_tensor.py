"""llama.cpp's tensor split (`-sm tensor`, PR ggml-org/llama.cpp#19378) as its source runs it, on
top of the Megatron-style TP that `engines.iteration.stage_costs` prices (read in 2026:
`ggml/src/ggml-backend-meta.cpp`, `ggml/src/ggml-cuda/ggml-cuda.cu`, `src/llama-model.cpp`).

What is split and what is replicated (`llama_meta_device_get_split_state`, llama-model.cpp): Q, K,
V, gate and up by output columns, the attention output and down projections (dense and expert) by
input rows, the KV cache by heads; `output.weight` by vocabulary; "everything else" MIRRORED: the
norms, the token embedding, and a tied output matrix, which llama.cpp loads as
`token_embd.weight` (TENSOR_DUPLICATED) and so does not match the `output\\.weight` pattern: with
tied embeddings every GPU runs the whole output layer on the whole vocabulary.

How it runs (`ggml_backend_meta_graph_compute`): the graph is cut after every tensor whose split
state is PARTIAL (a row-split product's output: attention output and FFN / MoE down, the experts'
sum delayed into the same cut), two per layer; one host thread launches each piece on every GPU in
turn (`ggml_backend_graph_compute_async`), then one all-reduce over the GPUs. The embedding is
mirrored: no all-reduce after the lookup (the Megatron embedding's reduce is not run).

The all-reduce (`ggml_backend_cuda_comm_allreduce_nccl`, NCCL on Linux by default): "for small
tensors" FP32 in place, small meaning fewer than 32,768 elements on 2 GPUs, 131,072 on 3, 262,144
on 4 or more ("based on RTX 4090s connected via 16x PCIe 4.0"); above, every GPU converts its
FP32 partial sum to BF16 (`to_bf16`, reads 4 bytes and writes 2 per element), NCCL reduces the
BF16 buffer, and every GPU converts it back (`to_fp32`, reads 2, writes 4): two memory-bound
kernels beside the BF16 all-reduce.

Not priced here: the host's launches of each piece on every GPU in turn (CUDA graphs per piece
under token generation; eager launches of every kernel for prompts), which the public rows do not
separate from the all-reduce's own time (docs/serving.md, llama.cpp).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from shardwise.engines.forward import ForwardStages
from shardwise.engines.stage_ends import head_forward_s, head_inference_tp_s
from shardwise.engines.tp_overlap import TpComm, tp_comm
from shardwise.physics.collectives import Fabric
from shardwise.physics.kernels import memory_s
from shardwise.physics.topology import placement
from shardwise.specs import Model, Scenario
from shardwise.specs._checks import Number
from shardwise.specs.hardware import Gpu

# ggml-cuda.cu `ggml_backend_cuda_comm_allreduce_nccl`: below this many elements the all-reduce
# runs in FP32, at or above it in BF16 with a conversion each way: 2 GPUs, 3, 4 or more.
FP32_BELOW_ELEMENTS_2_GPUS = 32_768
FP32_BELOW_ELEMENTS_3_GPUS = 131_072
FP32_BELOW_ELEMENTS_4_GPUS = 262_144
F32_BYTES = 4.0
BF16_BYTES = 2.0
# to_bf16 reads 4 and writes 2 bytes per element, to_fp32 reads 2 and writes 4
CONVERSION_BYTES_PER_ELEMENT = (F32_BYTES + BF16_BYTES) * 2
CONVERSION_KERNELS = 2
# all-reduces per decoder layer: after the attention output and after the FFN (or the experts' sum)
ALL_REDUCES_PER_LAYER = 2


def fp32_threshold_elements(gpus: Number) -> Number:
    """Elements below which llama.cpp's NCCL all-reduce stays in FP32 (module docstring)."""
    g = np.asarray(gpus, dtype=float)
    return np.where(
        g <= 2, FP32_BELOW_ELEMENTS_2_GPUS, np.where(g == 3, FP32_BELOW_ELEMENTS_3_GPUS, FP32_BELOW_ELEMENTS_4_GPUS)
    )


def all_reduce_s(comm: TpComm, gpu: Gpu, elements: Number, gpus: Number) -> Number:
    """Seconds of one llama.cpp all-reduce of `elements` FP32 values over `gpus` GPUs (`comm` the
    TP group's collectives): FP32 on the wire below the threshold, else the BF16 all-reduce and its
    two conversion kernels on every GPU (module docstring); 0 on one GPU."""
    n = np.asarray(elements, dtype=float)
    small = n < fp32_threshold_elements(gpus)
    fp32 = comm.group.all_reduce(F32_BYTES * n)
    bf16 = comm.group.all_reduce(BF16_BYTES * n) + memory_s(CONVERSION_BYTES_PER_ELEMENT * n, gpu, CONVERSION_KERNELS)
    return np.where(np.asarray(gpus) > 1, np.where(small, fp32, bf16), 0.0)


def tensor_split_stages(fs: ForwardStages, scn: Scenario, tokens: Number, logits_tokens: Number) -> ForwardStages:
    """`fs`, one micro-batch of `tokens` tokens on one stage priced as Megatron-style TP by
    `engines.iteration.stage_costs`, as llama.cpp's tensor split runs it: its communication is
    two all-reduces per layer at llama.cpp's precision with their conversions (none after the
    mirrored embedding) and the logits of `logits_tokens` tokens read back; a model whose output
    layer is tied to its embedding runs that layer whole on every GPU, with nothing to gather
    (module docstring). Changes nothing on one GPU; a pipeline (pp > 1) is not a tensor split."""
    model, plan, cluster = scn.model, scn.plan, scn.cluster
    g = np.asarray(plan.tp, dtype=float)
    split = (g > 1) & (np.asarray(plan.pp) == 1)
    one = replace(scn, plan=plan.with_(micro_batch=1, global_batch=plan.dp))
    place = placement(plan, cluster.gpus_per_node, experts=model.is_moe)
    comm = tp_comm(one, Fabric.of(cluster), place["tp"], tokens)
    elements = np.asarray(tokens, dtype=float) * model.hidden
    comm_s = model.layers * ALL_REDUCES_PER_LAYER * all_reduce_s(comm, cluster.gpu, elements, g)
    head_delta = 0.0
    if model.tied_embeddings:  # token_embd.weight: MIRRORED, the whole output layer on every GPU
        gpus = one.plan.dp * one.plan.tp  # the same GPUs, the output layer unsplit
        whole = replace(one, plan=one.plan.with_(tp=1, dp=gpus, global_batch=gpus))
        head_delta = head_forward_s(whole, logits_tokens) - head_forward_s(one, logits_tokens)
    else:  # output.weight split by vocabulary: the logits come back from every GPU
        comm_s = comm_s + head_inference_tp_s(one, comm, logits_tokens)
    tp = tuple(np.where(split, comm_s, t) for t in fs.tp_comm)
    compute = tuple(np.where(split, c + head_delta, c) for c in fs.compute)
    return replace(fs, compute=compute, tp_comm=tp)  # type: ignore[arg-type]


def stage_params_delta(model: Model, tp: Number, pp: Number) -> tuple[Number, Number, Number]:
    """Parameters a llama.cpp GPU of the first, a middle and the last stage holds beyond (or short
    of) what `engines.moe.stage_params` counts (Megatron's placement: the word embedding on the
    first stage and the output matrix on the last, each split by vocabulary over tp, one matrix at
    pp = 1 when tied). llama.cpp keeps the input embedding in host memory ("there is very little
    benefit to offloading the input layer, so always keep it on the CPU", `dev_input`,
    llama-model.cpp) and the output layer on the last GPU, or, under `-sm tensor`, split by
    vocabulary when it is `output.weight` and whole on every GPU when tied (module docstring)."""
    t, p = np.asarray(tp, dtype=float), np.asarray(pp, dtype=float)
    word = float(model.vocab * model.hidden)
    output = word if model.tied_embeddings else word / t  # what a llama.cpp GPU of the last stage holds
    first = np.where(p > 1, -word / t, 0.0)
    last_piped = output - word / t  # Megatron's last stage holds word / t (a copy when tied)
    untied_single = 0.0 if model.tied_embeddings else word / t  # the second matrix at pp = 1
    single = output - word / t - untied_single
    return (np.where(p > 1, first, single), np.where(p > 1, 0.0, single), np.where(p > 1, last_piped, single))
