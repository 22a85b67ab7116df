"""A prompt's routed experts as llama.cpp's CUDA backend multiplies them on GPUs without FP4 tensor
cores (issue #37), read in ggml-org/ggml@ba70f8ed (the sync of llama.cpp PR 19378, merged
2026-04-09: `src/ggml-cuda/ggml-cuda.cu` `ggml_cuda_mul_mat_id`, `mmq.cu` `ggml_cuda_mul_mat_q`,
`mmq.cuh` `mul_mat_q_case`, `launch_mul_mat_q`, `mul_mat_q_process_tile`).

- Which kernel (`ggml_cuda_mul_mat_id`, review 52): up to `get_mmvq_mmid_max_batch` tokens the
  matrix-vector kernel with ids (8, `MMVQ_MAX_BATCH_SIZE`; 7 for MXFP4 on Turing and Ampere,
  `get_mmvq_mmid_max_batch_turing_plus`: Volta and Ada on take 8), above it `mul_mat_q` with the
  expert ids where `ggml_cuda_should_use_mmq` says so: always with Turing's INT8 MMA
  (`turing_mma_available`) and on CDNA3 ("rocblas/tensile performs very poorly on CDNA3"); on Volta
  (FP16 tensor cores, no INT8 MMA) only below `MMQ_DP4A_MAX_BATCH_SIZE` (64) tokens, in dp4a, else
  cuBLAS (the experts' 16-bit pricing). One launch for all experts (a device-side `mm_ids_helper`
  sorts the token copies; no host sync, no launch per expert). CDNA1/2's and RDNA's finer rules
  (by expert count and type) are not priced: an AMD GPU is taken as CDNA3. The activations are
  quantised to q8_1 and the MMA is INT8 (`mma.cuh`, m16n8k32); MXFP4 weights are turned into INT8
  through a lookup table as each tile is loaded (`use_native_mxfp4` only where `blackwell_mma_available`).
- The token tile is sized from the micro-batch, not from an expert's share of it: `ncols_max` is
  `ne12`, every token of the micro-batch (an expert may get all of them), and `mul_mat_q_case`
  picks the token tile mmq_x (8 to 128 in steps of 8, of 16 from 48) with the fewest tiles over
  `ncols_max`: 128 for a micro-batch of 512. Each expert holding tokens runs its tiles at that
  width; columns past its own tokens are computed and not written back (`tile_y_max_j` guards the
  write only). GPT-OSS's 512 tokens x 4 over 128 experts give 16 tokens an expert in a 128-wide
  tile: 8x the MMAs of its tokens. (llama.cpp PR 24546, later, sizes this tile from the typical
  expert width on RDNA3 alone.)
- Loads and MMAs take turns: the stream-k launch is `nsm` blocks of 256 threads, one per SM, and
  `mul_mat_q_process_tile` loads a weight tile and an activation tile, `__syncthreads()`, runs the
  MMAs, `__syncthreads()`, with no second stage in flight. So a tile costs its load plus its MMAs,
  and the kernel its weight bytes at the memory rate plus its padded MMAs at the INT8 rate, not the
  larger of the two as a pipelined GEMM (`physics.kernels.roofline_s`).

Not priced here: the activation tile's re-reads from L2 for every weight tile, the stream-k fixup
kernel (none where the tiles divide over the SMs: 128 experts on 128 SMs), the q8_1 quantisation and
id kernels (the layer's element-wise bytes, `physics.moe`). Dense quantised products keep their
pricing (`physics.kernels`).
"""

from __future__ import annotations

import numpy as np

from shardwise.physics.gemm import kernel_fixed_s
from shardwise.physics.layer_parts import Gemm
from shardwise.physics.linears import GemmTimes
from shardwise.specs import Gpu
from shardwise.specs._checks import Number
from shardwise.specs.serving import STORAGE_BYTES

MXFP4_BYTES = STORAGE_BYTES["mxfp4"]

MMVQ_MAX_BATCH_SIZE = 8  # mmvq.cuh: up to this many tokens the experts run `mul_mat_vec_q` with ids
MMVQ_MMID_MXFP4_TURING_AMPERE = 7  # mmvq.cu `get_mmvq_mmid_max_batch_turing_plus` (sm75 to sm87)
MMQ_DP4A_MAX_BATCH_SIZE = 64  # mmq.cuh: without INT8 MMA (Volta) MMQ below this many tokens, cuBLAS from it
MMQ_X_MAX = 128  # mmq.cuh `get_mmq_x_max_host` with Turing MMA and later
MMQ_X_STEP = 8
MMQ_X_COARSE_FROM = 48  # `mmq_get_granularity_host`: from here mmq_x is a multiple of 16
MMQ_X_COARSE_STEP = 16
TOKEN_TILES = np.array(
    [x for x in range(MMQ_X_STEP, MMQ_X_MAX + 1, MMQ_X_STEP) if x < MMQ_X_COARSE_FROM or x % MMQ_X_COARSE_STEP == 0],
    dtype=float,
)
# dense INT8 tensor rate over the dense 16-bit one where a GPU states no INT8 peak: NVIDIA's data-centre
# and professional cards run INT8 at twice their 16-bit rate (A100 624 / 312, H100 SXM 1,979 / 989, L40S
# 733 / 362 TOPS, datasheets); GeForce cards, whose 16-bit peak is halved with FP32 accumulation, state
# theirs (`Gpu.peak_ops_per_s_int8`: RTX 4090 660.6, RTX 3090 284, 4x)
INT8_OVER_16BIT = 2.0


def int8_ops_per_s(gpu: Gpu) -> Number:
    """The GPU's dense INT8 tensor-core peak (`Gpu.peak_ops_per_s_int8`, else `INT8_OVER_16BIT` x 16-bit)."""
    stated = np.asarray(gpu.peak_ops_per_s_int8, dtype=float)
    return np.where(stated > 0, stated, INT8_OVER_16BIT * np.asarray(gpu.peak_flops_per_s_16bit, dtype=float))


def mmvq_max_tokens(gpu: Gpu, weight_bytes: Number) -> Number:
    """`get_mmvq_mmid_max_batch`: the most tokens the experts run as matrix-vector products, 7 for
    MXFP4 (`STORAGE_BYTES`: 17 bytes a block of 32) on NVIDIA's Turing and Ampere, told here by INT8
    MMA without FP8 (Ada on has FP8), else 8."""
    mxfp4 = np.isclose(np.asarray(weight_bytes, dtype=float), MXFP4_BYTES)
    turing_ampere = (gpu.vendor == "nvidia") & np.asarray(gpu.int8_mma, dtype=bool)
    turing_ampere = turing_ampere & (np.asarray(gpu.peak_flops_per_s_fp8, dtype=float) <= 0)
    return np.where(mxfp4 & turing_ampere, MMVQ_MMID_MXFP4_TURING_AMPERE, MMVQ_MAX_BATCH_SIZE)


def token_tile(tokens: Number) -> Number:
    """mmq_x, the token tile `mul_mat_q_case` picks for a product of `tokens` columns (`ncols_max`):
    the narrowest of `TOKEN_TILES` with the fewest tiles (module docstring): 128 from 113 tokens on."""
    t = np.maximum(np.asarray(tokens, dtype=float), 1.0)
    tiles = np.ceil(t[..., None] / TOKEN_TILES - 1e-9)
    return TOKEN_TILES[np.argmin(tiles, axis=-1)]


def mmq_ids_s(g: Gemm, tokens: Number, gpu: Gpu) -> Number:
    """Seconds of `g`, the experts' product (`g.m` tokens an expert on average, `g.batch` experts
    with tokens), as `mul_mat_q` with ids runs it for a micro-batch of `tokens` tokens: each expert
    in tiles of `token_tile(tokens)` columns, its weights read once a tile, its bytes at the memory
    rate plus its padded MMAs at the INT8 rate (loads and MMAs take turns), one kernel."""
    x = token_tile(tokens)
    m = np.asarray(g.m, dtype=float)
    tiles = np.maximum(np.ceil(m / x - 1e-6), 1.0)  # m an expectation: an expert with tokens has a tile
    flops = 2.0 * g.batch * tiles * x * g.n * g.k
    weights = g.batch * g.b_bytes * g.k * g.n
    moved = tiles * weights + g.batch * m * (g.a_bytes * g.k + g.out_bytes * g.n)
    load_s = moved / (gpu.memory_bandwidth_bytes_per_s * gpu.memory_efficiency)
    # ASSUMPTION (review 52): the INT8 MMAs sustain the GPU's 16-bit cuBLAS GEMM efficiency
    # (`Gpu.matmul_efficiency`, 0.95 on the RTX 4090 from torch BF16 GEMMs); no MMQ INT8 throughput of
    # one GEMM shape was found (llama.cpp PRs 7676, 8062 give whole-model llama-bench rows), none is
    # fitted. At 0.7 the GPT-OSS-120B pairs go from -6/-6/-6/-3% to -16/-10/-16/-7% (docs/serving.md).
    # Dense quantised products, the same `mul_mat_q`, keep the 16-bit rate (`physics.kernels`).
    mma_s = flops / (int8_ops_per_s(gpu) * gpu.matmul_efficiency)
    return load_s + mma_s + gpu.kernel_launch_s + kernel_fixed_s(gpu)


def experts_times(
    times: tuple[GemmTimes, GemmTimes], gemms: tuple[Gemm, Gemm], tokens: Number, gpu: Gpu, precision: str
) -> tuple[GemmTimes, GemmTimes]:
    """The experts' up and down products' `times` with their forward as llama.cpp's MMQ runs it
    (`mmq_ids_s`) where it does: more than `MMVQ_MAX_BATCH_SIZE` tokens, weights stored narrower
    than the activations, multiplied in 16 bits (no FP4 tensor cores: `engines.serving.compute_precision`)."""
    t = np.asarray(tokens, dtype=float)
    sixteen = precision in ("bf16", "fp16")
    out = []
    for gt, g in zip(times, gemms, strict=True):
        on = (t > mmvq_max_tokens(gpu, g.b_bytes)) & (np.asarray(g.b_bytes) < np.asarray(g.a_bytes)) & sixteen
        on = on & (np.asarray(gpu.int8_mma, dtype=bool) | (t < MMQ_DP4A_MAX_BATCH_SIZE))  # Volta: cuBLAS from 64
        out.append(GemmTimes(np.where(on, mmq_ids_s(g, t, gpu), gt.forward_s), gt.input_grad_s, gt.weight_grad_s))
    return out[0], out[1]
