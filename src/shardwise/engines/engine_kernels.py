"""Kernels one dense decoder layer launches per forward, per serving engine, read from each
engine's source (issue #37 item 5). Each kernel costs its runtime's gap on the GPU
(`engines.serving.RUNTIMES`), so decode at small batches, where a layer's kernels are short, is
set by this count; docs/serving.md "Kernel gaps".

Counted for a dense layer (attention with a KV cache, then an MLP), one decode step, 16-bit
weights, tensor parallelism 1; the all-reduces of tp > 1 are priced as collectives
(`physics.collectives`, `physics.custom_allreduce`), and an engine that fuses the residual add and
the norm into its all-reduce kernel loses those norm kernels there (`norms_in_all_reduce`):

- FasterTransformer 5.x, `ParallelGptDecoder::forward` (NVIDIA/FasterTransformer
  src/fastertransformer/models/multi_gpu_gpt/ParallelGptDecoder.cc@6fddeac5): the pre-layer-norm
  (`invokeGeneralLayerNorm`), the QKV GEMM, `fusedQKV_masked_attention_dispatch` (QKV bias, rotary
  where the model has it, the KV-cache write and masked attention in one kernel:
  layers/attention_layers/DecoderSelfAttentionLayer.cc@6fddeac5), the output GEMM,
  `invokeGeneralAddBiasResidualPreLayerNorm` (output bias, residual add and the second layer norm
  in one), the FFN's first GEMM, its bias and GELU, its second GEMM and `invokeAddBiasResidual`:
  9. One of its two residual adds is fused with a norm.
- TensorRT-LLM 1.x, PyTorch backend (`LlamaDecoderLayer`, NVIDIA/TensorRT-LLM
  tensorrt_llm/_torch/models/modeling_llama.py@3a5901cd): the residual add and RMSNorm in one kernel
  twice (`post_attention_layernorm` and `next_layer_layernorm` take the residual), the QKV GEMM,
  the attention op's QKV preprocessing (bias, rotary, KV-cache write) and its generation kernel
  (XQA / masked MHA), the output GEMM, the gate-up GEMM, the fused SwiGLU, the down GEMM: 9. With
  tp > 1 and hidden > 4096 (`enable_fusion`, `PRE_MLP_FUSION` / `POST_MLP_FUSION`) both norms
  (and an FP8 input's quantisation) run inside the all-reduce (`AllReduceFusionOp.
  RESIDUAL_RMS_NORM`): 7 beside the two all-reduce kernels, where its own all-reduce kernel runs;
  where it falls back to NCCL (cpp/tensorrt_llm/thop/allreduceOp.cpp `fallbackRunSubsequentOps`:
  the add and the RMSNorm after NCCL's all-reduce) the norms are kernels again, so the fusion
  stops at the size where the all-reduce price switches to NCCL
  (`physics.custom_allreduce.trtllm_nccl_from_bytes`).
- vLLM 0.34 (V1, torch.compile at its default -O2, docs/design/optimization_levels.md@48b2a2d9;
  CUDA graphs; vllm-project/vllm docs/design/fusions.md@7215f1d5, vllm/model_executor/models/
  llama.py): `fused_add_rms_norm`
  twice ("always", CUDA), the QKV GEMM, the rotary embedding, the KV-cache write
  (`reshape_and_cache_flash`), the attention kernel, the output GEMM, the gate-up GEMM,
  `silu_and_mul`, the down GEMM: 10. With tp > 1 on Hopper and Blackwell whose GPUs reach each
  other's memory (P2P: NVLink, or PCIe with peer access), `fuse_allreduce_rms` moves both norms
  into FlashInfer's all-reduce: 8, on messages below its size table (`VLLM_FUSION_MAX_MIB`); larger
  ones (prefill) run vLLM's all-reduce and `fused_add_rms_norm`: 10. Read in the vLLM 0.34.0 wheel
  (`VLLM_FUSION_VERSION`, the vLLM preset's version): config/vllm.py `enable_allreduce_rms_fusion`
  turns it on at -O2 (the default level) and -O3 where tp > 1, CUDA, FlashInfer installed and the
  device is SM90 or of the SM100 family (10.x) -- no link, pipeline or data-parallel condition (the
  TP + PP and TP + DP exclusions of docs/design/fusions.md@7215f1d5 are gone);
  compilation/passes/fusion/allreduce_rms_fusion.py `AllReduceFusionPass` then needs FlashInfer's
  workspace (distributed/device_communicators/flashinfer_all_reduce.py): on one node MNNVL first
  (NVSwitch multicast), else FlashInfer's TensorRT-LLM backend (flashinfer-python 0.7.4,
  comm/trtllm_ar.py `trtllm_create_ipc_workspace_for_all_reduce_fusion`), whose buffers each rank
  maps from its peers (`SymmDeviceMemory`: cuMemImportFromShareableHandle, cuMemMap and
  cuMemSetAccess on peer memory, which the CUDA driver grants only between peer-capable devices);
  where that fails vLLM logs it and runs the layer unfused. So GPUs without P2P (`Cluster.p2p` off:
  GeForce cards' stock driver) keep 10; PCIe GPUs with P2P (H100 PCIe) fuse, as the code runs it.
  The fused pattern runs where the step's tokens are at most max_size // (hidden x 2 bytes)
  (`is_applicable_for_range`), the message below the table's size.
- SGLang 0.5.x: the same layer as vLLM (sgl-kernel's `fused_add_rmsnorm`, rotary, one KV-cache
  store, the attention backend's decode kernel, `silu_and_mul`): 10; its FlashInfer all-reduce
  fusion (`--enable-flashinfer-allreduce-fusion`) is turned on by default only for MoE
  architectures (python/sglang/srt/server_args.py `_handle_model_specific_adjustments`), so a
  dense layer has 10 at tp > 1 too.
- llama.cpp, 2024 builds (`build_llama`; flash attention off by default then): RMS norm and its
  weight, the Q, K and V products, two RoPEs, two copies into the KV cache, KQ, soft-max, KQV, the
  merge copy, the output product, the residual add, the FFN norm and weight, the gate and up
  products, SiLU, the multiply, the down product and its add: 23 ggml nodes run as CUDA kernels
  (views, reshapes and permutes are none); with quantised weights each of the 7 weight products
  first quantises its input to q8_1 (`quantize_row_q8_1_cuda`): 30. No residual add is fused with
  a norm. Its products of one token (16-bit weights: `dequantize_mul_mat_vec`, ne11 == 1) or up to 8
  (quantised: `mul_mat_vec_q`, MMVQ_MAX_BATCH_SIZE, ggml-cuda/mmvq.cuh) are matrix-vector kernels
  that reduce K inside the kernel, no split-K reduction kernel beside them (`Gpu.matvec_max_rows`),
  so the 23 are all of its decode kernels. Later builds fuse more (flash attention on by default,
  RMS norm with its weight, RoPE with the cache write, SwiGLU): not counted here, the 2024 count used for every build.
- PyTorch (eager): 0, the stack's fused count (`physics.layer_parts.ELEMENTWISE_KERNELS`).

The model prices a dense layer's four GEMMs (QKV, output, up, down) and one attention kernel
apart (`physics.layer_parts.PRICED_GEMM_KERNELS`), so an engine's other kernels are its count less
five: llama.cpp's separate Q, K, V and gate products and its unfused attention's extra kernels
are priced as gaps. Mixture-of-experts layers, latent attention (MLA) and hybrid Mamba layers keep
the shared count (`engines.costs.layer_cost`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardwise.specs._checks import Number

# the GEMM kernels (`Gpu.gemm_kernels`) of the GPUs on which vLLM fuses all-reduce and RMSNorm (Hopper, Blackwell)
HOPPER_AND_LATER = ("sm90", "sm100")
# the vLLM release the size table is read from (the vLLM preset's, `engines.engine_presets`; a test
# checks they agree, so a new preset version means reading the table again)
VLLM_FUSION_VERSION = "0.34"
# vLLM's FI_ALLREDUCE_FUSION_MAX_SIZE_MB (compilation/passes/fusion/allreduce_rms_fusion.py, 0.34.0;
# PassConfig.flashinfer_max_size reads it as MiB, `int(max_size_mb * MiB)`, for tp 2, 4, 8, 16) by
# GEMM kernels, then tp. Earlier releases (vllm/config/compilation.py@002284db) had 1 MiB at tp 8 on
# SM90 and no tp 16. SM103 (B300, GB300: 64 / 64 / 4 / 64 MiB) is priced with SM100's rows: the
# GPU presets tell data-centre Blackwell by its GEMM kernels (`sm100`), not its compute capability.
VLLM_FUSION_MAX_MIB = {"sm90": {2: 64, 4: 2, 8: 0.5}, "sm100": {2: 64, 4: 32, 8: 1, 16: 64}}
# kernels a dense layer's two all-reduces absorb where they run the residual add and the norm after them
FUSED_ALL_REDUCE_NORMS = 2


@dataclass(frozen=True)
class LayerKernels:
    """One engine's kernels per dense decoder layer (module docstring for the counts' sources)."""

    kernels: int  # tp = 1, 16-bit weights; 0: the stack's fused count
    quantised_extra: int = 0  # more with quantised weights (llama.cpp's q8_1 input quantisation)
    norms_in_all_reduce: int = 0  # kernels the all-reduce absorbs at tp > 1 (residual add + norm)
    fusion_min_hidden: int = 0  # ... only above this hidden size (TensorRT-LLM: > 4096)
    fusion_needs_hopper: bool = False  # ... only on Hopper and Blackwell with P2P, by its size table (vLLM)
    fused_residual_norms: int = 0  # residual adds fused with the norm after them, of 2
    source: str = ""
    matvec_rows: tuple[int, int] = (0, 0)  # products of up to so many rows as matrix-vector kernels: 16-bit, quantised
    mmq_ids: bool = False  # a prompt's quantised experts in token tiles sized from the micro-batch (`physics.mmq_ids`)

    def gpu_fields(self, quantised: bool) -> dict[str, object]:
        """What the engine's kernels set on the GPU it serves on (`engines.serving.serving_scenario`)."""
        return {"matvec_max_rows": self.matvec_rows[quantised], "mmq_token_tiles": self.mmq_ids and quantised}


KERNELS = {
    "fastertransformer": LayerKernels(9, fused_residual_norms=1, source="ParallelGptDecoder.cc@6fddeac5"),
    "tensorrt-llm": LayerKernels(9, norms_in_all_reduce=2, fusion_min_hidden=4096, fused_residual_norms=2,
                                 source="tensorrt_llm/_torch/models/modeling_llama.py@3a5901cd"),
    "vllm": LayerKernels(10, norms_in_all_reduce=2, fusion_needs_hopper=True, fused_residual_norms=2,
                         source="docs/design/fusions.md@7215f1d5, models/llama.py"),
    "sglang": LayerKernels(10, fused_residual_norms=2, source="models/llama.py, server_args.py"),
    "llama.cpp": LayerKernels(23, quantised_extra=7, matvec_rows=(1, 8), mmq_ids=True,
                              source="src/llama.cpp build_llama (2024)"),
    "pytorch": LayerKernels(0),
}  # fmt: skip
assert all(k.norms_in_all_reduce in (0, FUSED_ALL_REDUCE_NORMS) for k in KERNELS.values())
assert all(k.kernels == 0 or k.kernels - k.norms_in_all_reduce >= 5 for k in KERNELS.values())


def layer_kernels(engine: str, quantised: bool) -> int:
    """Kernels of one dense layer's forward as `engine` runs it (`LayerKernels`): its tp = 1
    count, more with quantised weights; the norms its all-reduce absorbs are taken off where the
    message size is known (`fused_kernels`, `norm_fusion_max_bytes`)."""
    k = KERNELS[engine]
    return 0 if k.kernels == 0 else k.kernels + (k.quantised_extra if quantised else 0)


def norm_fusion_max_bytes(
    engine: str, tp: Number, hidden: int, gemm_kernels: str, p2p: Number, trtllm_max: Number
) -> Number:
    """All-reduce messages below which `engine` runs the residual add and the norm after each of a
    dense layer's all-reduces inside the all-reduce kernel (module docstring), 0 where never:
    vLLM's FlashInfer fusion by its size table (`VLLM_FUSION_MAX_MIB`) where the TP group's GPUs
    reach each other by P2P (`p2p`, `physics.pcie.p2p_reach`: its workspace maps peer memory),
    TensorRT-LLM's where its own kernel runs
    (`trtllm_max`: the size from which its all-reduce is NCCL's, 0 without its kernel)."""
    k = KERNELS[engine]
    t = np.asarray(tp)
    if not k.norms_in_all_reduce:
        return np.zeros(t.shape) if t.ndim else 0.0
    on = t > 1
    if k.fusion_min_hidden:
        on = on & (hidden > k.fusion_min_hidden)
    if k.fusion_needs_hopper:
        table = VLLM_FUSION_MAX_MIB.get(gemm_kernels, {})
        mib = sum(np.where(t == p, m, 0.0) for p, m in table.items()) if table else np.zeros(t.shape)
        out = np.where(on & np.asarray(p2p, dtype=bool), mib * 1024.0**2, 0.0)
    else:
        out = np.where(on, trtllm_max, 0.0)
    return float(out) if out.ndim == 0 else out


def fused_kernels(kernels: Number, max_bytes: Number, tp: Number, message_bytes: Number) -> Number:
    """A dense layer's engine count (`layer_kernels`) less the norms its all-reduces absorb where
    their message (`message_bytes`, each all-reduce's) lies below `max_bytes` (`Plan.norm_fusion_max_bytes`)."""
    fuses = (np.asarray(tp) > 1) & (np.asarray(message_bytes) < np.asarray(max_bytes))
    return np.where(fuses & (np.asarray(kernels) > 0), np.asarray(kernels) - FUSED_ALL_REDUCE_NORMS, kernels)
