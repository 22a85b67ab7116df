"""What serving engines do instead of (or beside) NCCL: their own all-reduce kernels on NVLink,
and PCIe GPUs that cannot reach each other's memory (P2P off).

**Custom all-reduce.** vLLM, SGLang and TensorRT-LLM all-reduce small tensors with their own
kernels: every GPU maps its peers' buffers (CUDA IPC) and reads them directly.
- one-shot: each GPU reads the whole buffer of each of its p - 1 peers and sums:
  T = alpha + (p - 1) n / B;
- two-shot: a reduce-scatter then an all-gather by direct reads, two synchronisations:
  T = 2 alpha + 2 (p - 1) / p n / B;
with B the GPU's link bandwidth (NVSwitch: all its NVLinks) and alpha the kernel's fixed cost
(launch and the cross-GPU flag barrier).

When each engine uses which (read from their sources):
- vLLM (`vllm/distributed/device_communicators/custom_all_reduce.py`, `csrc/custom_all_reduce.cuh`):
  world sizes 2, 4, 6, 8; messages under 8 MiB; on PCIe only 2 GPUs, and only with P2P; two GPUs
  always one-shot, else one-shot under 512 KiB (4 GPUs) or 256 KiB (6-8 GPUs), two-shot above.
- TensorRT-LLM, PyTorch backend (the 1.x preset), AllReduceStrategy.AUTO
  (cpp/tensorrt_llm/thop/allreduceOp.cpp `selectImplementation`, `ifFallbackToNCCL`): NCCL where
  the group lacks NVLink or P2P or the message exceeds the workspace (16 MB up to 2 GPUs, 8 MB
  above: cpp/tensorrt_llm/common/customAllReduceUtils.h `getMaxRequiredWorkspaceSize`), else the
  strategy of a measured lookup table (`selectStrategyLookUpTable`, `AllReduceBestStrategyTableSM90`
  and `...SM100`, every SM below 100 read as 90 and every one from 100 up as 100) by TP size, fused
  op (RESIDUAL_RMS_NORM for Llama-style layers), hidden size and power-of-two token count. Read
  as bytes of 16-bit activations for hidden 4096 and 8192 (Llama 3 8B, Mixtral; Llama 3 70B), its
  rows agree: on Hopper and earlier one-shot below 16 MB at 2 GPUs, below 4 MiB at 4 (two-shot
  up to the 8 MB workspace), below 1 MiB at 8 (NCCL above); on Blackwell one-shot below 16 MB at
  2 GPUs, below 4 MiB at 4 and 8 with two-shot up to 8 MB (`TRTLLM_AUTO_BYTES`; at 4 Blackwell GPUs
  hidden 8192 keeps one-shot up to 8 MB, not separated here; a hidden size of 16384, Llama 3
  405B, lies outside the table, which then returns NCCL's symmetric-memory all-reduce: not
  priced apart). Before #37 the TensorRT backend's plugin thresholds were used
  (`cpp/tensorrt_llm/plugins/ncclPlugin/allreducePlugin.cpp`: one-shot under 1 MB up to 4 GPUs,
  500 kB above, never two-shot). SGLang uses TensorRT-LLM's kernel (sgl-project/sglang PR 2904)
  with vLLM's selection.
- alpha: the smallest messages of sglang PR 2904's table (H100, no CUDA graph): vLLM's kernel
  9.5 / 9.1 / 10.1 us at 2 / 4 / 8 GPUs (one value, 9.5 us), TensorRT-LLM's 3.7 / 4.8 / 5.9 us
  (2.6 + 1.1 log2 p us). Those timings include a launch each; inside a CUDA graph they are
  somewhat lower, so these are upper values.

**P2P off.** Without peer-to-peer access (consumer GeForce cards on the stock driver, many VMs)
NCCL stages every transfer through host memory (its SHM transport): fewer bytes per second and
a longer hop. Measured on 2 x RTX 3090 (club-3090 docs/PCIE_P2P.md, p2pBandwidthLatencyTest,
P2P off -> on): bidirectional 16.77 -> 54.21 GB/s (a ring sends and receives at once, so the
bidirectional ratio, 0.31, scales the sustained rate). That ratio is the only number taken from
the data; the RTX 2080 Ti nccl-tests curves with P2P unsupported check it
(tests/test_custom_allreduce.py). The copy test's latency (15 us off against 1 us on) is not
added: see `P2P_OFF_EXTRA_LATENCY_S`.
"""

from __future__ import annotations

import numpy as np

from shardwise.specs import Link
from shardwise.specs._checks import Number

# NVLink-class links (>= 100 GB/s per direction): the rest are PCIe or networks.
NVLINK_CLASS_BYTES_PER_S = 100e9
# P2P off: 2 x RTX 3090, club-3090 docs/PCIE_P2P.md (p2pBandwidthLatencyTest, off -> on).
P2P_OFF_BANDWIDTH_RATIO = 16.77 / 54.21
# The same test's latency (15.23 us off, 1.01 us on) is a cudaMemcpy through host memory; NCCL's
# SHM transport polls host memory with its LL protocol instead, and public all-reduce curves with
# P2P off show no such step: 2 x RTX 2080 Ti 11.6-12.9 us from 8 B to 4 KiB (P2P "NS"), 8 x RTX
# 4090 on the stock driver 42 us at 8 B, both close to P2P-on PCIe. So no latency is added; this
# choice was made after reading those curves (tests/test_custom_allreduce.py says so).
P2P_OFF_EXTRA_LATENCY_S = 0.0

# Custom all-reduce kernels (specs.hardware.CUSTOM_ALL_REDUCE_KERNELS; see the module docstring).
VLLM_SIZES = (2, 4, 6, 8)
VLLM_MAX_BYTES = 8 * 1024 * 1024
VLLM_ALPHA_S = 9.5e-6
TRTLLM_ALPHA_S = (2.6e-6, 1.1e-6)  # a + b log2(p)
MIB = 1024 * 1024
# TensorRT-LLM's workspace limits on a message (getMaxRequiredWorkspaceSize): up to 2 GPUs, above
TRTLLM_WORKSPACE_BYTES = (16_000_000, 8_000_000)
# TensorRT-LLM's AUTO selection (module docstring): (one-shot below, two-shot below) bytes for
# 2, 4 and 8 GPUs, Hopper-and-earlier's table and Blackwell's; NCCL at and above the second.
_SMALL, _LARGE = TRTLLM_WORKSPACE_BYTES
TRTLLM_AUTO_BYTES = {
    False: ((_SMALL, _SMALL), (4 * MIB, _LARGE), (1 * MIB, 1 * MIB)),
    True: ((_SMALL, _SMALL), (4 * MIB, _LARGE), (4 * MIB, _LARGE)),
}


def is_nvlink_class(link: Link) -> bool:
    """NVLink (or another GPU fabric) rather than PCIe: at least NVLINK_CLASS_BYTES_PER_S."""
    return bool(np.all(np.asarray(link.bandwidth_bytes_per_s) >= NVLINK_CLASS_BYTES_PER_S))


def without_p2p(link: Link) -> Link:
    """The link as NCCL's host-memory (SHM) path sees it when GPUs cannot reach each other."""
    return link.with_(
        name=f"{link.name} (P2P off)",
        bandwidth_bytes_per_s=link.bandwidth_bytes_per_s * P2P_OFF_BANDWIDTH_RATIO,
        latency_s=link.latency_s + P2P_OFF_EXTRA_LATENCY_S,
        ll_bandwidth_bytes_per_s=0.0,  # SHM: NCCL's LL128 needs an NVLink path; LL as on PCIe
    )


def _alpha_s(kernel: str, p: np.ndarray) -> Number:
    if kernel == "vllm":
        return np.full_like(p, VLLM_ALPHA_S)
    a, b = TRTLLM_ALPHA_S
    return a + b * np.log2(np.maximum(p, 2.0))


def trtllm_nccl_from_bytes(ranks: Number, blackwell: bool) -> Number:
    """The message size from which TensorRT-LLM's AUTO all-reduce is NCCL's (`TRTLLM_AUTO_BYTES`'
    second column; 0 outside 2 to 8 GPUs, all NCCL)."""
    p = np.asarray(ranks, dtype=float)
    rows = TRTLLM_AUTO_BYTES[bool(blackwell)]
    row = np.where(p < 4, 0, np.where(p < 8, 1, 2))  # the table's TP index, log2(p) - 1 truncated
    return np.where((p >= 2) & (p <= 8), np.choose(row, [r[1] for r in rows]), 0.0)


def custom_all_reduce_s(
    n_bytes: Number, ranks: Number, link: Link, kernel: str, nvlink: bool, p2p: bool = True, blackwell: bool = False
) -> Number:
    """Seconds of the engine's own all-reduce of `n_bytes` over `ranks` GPUs of one server, or
    inf where the engine would call NCCL instead (see the module docstring); `blackwell`: GPUs of
    compute capability 10 or more (TensorRT-LLM's table)."""
    n = np.asarray(n_bytes, dtype=float)
    p = np.asarray(ranks, dtype=float)
    if kernel == "none" or not p2p:
        return np.full(np.broadcast(n, p).shape, np.inf)
    bw = link.effective_bandwidth_bytes_per_s
    alpha = _alpha_s("vllm" if kernel == "vllm" else "trtllm", p)  # SGLang runs TensorRT-LLM's kernel
    one = alpha + (p - 1) * n / bw
    two = 2 * alpha + 2 * (p - 1) / p * n / bw
    if kernel == "trtllm":
        rows = TRTLLM_AUTO_BYTES[bool(blackwell)]
        row = np.where(p < 4, 0, np.where(p < 8, 1, 2))  # the table's TP index, log2(p) - 1 truncated
        one_below = np.choose(row, [r[0] for r in rows])
        two_below = trtllm_nccl_from_bytes(p, blackwell)
        ok = (p >= 2) & (p <= 8) & nvlink
        return np.where(ok & (n < one_below), one, np.where(ok & (n < two_below), two, np.inf))
    # vLLM's selection (SGLang's too)
    sizes = np.isin(p, VLLM_SIZES) & (n < VLLM_MAX_BYTES) & (nvlink | (p == 2))
    oneshot = (p == 2) | ((p <= 4) & (n < 512 * 1024)) | ((p <= 8) & (n < 256 * 1024))
    return np.where(sizes, np.where(oneshot, one, two), np.inf)
