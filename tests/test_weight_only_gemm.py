"""Weight-only quantised GEMMs of few rows by their own kernels (`physics.kernels.weight_only_s`):
llama.cpp's `mul_mat_vec_q` up to 8 tokens, `mul_mat_q` with its token tile of 8 to 128 above;
not as tensor-core tiles padded to 128 rows."""

from __future__ import annotations

import numpy as np
import pytest

from shardwise import presets
from shardwise.physics.kernels import MATVEC_MAX_ROWS, NARROW_TILE_MAX_ROWS, gemm_s, gemms_s, weight_only_s
from shardwise.physics.layer_parts import Gemm, gemm
from shardwise.specs.serving import STORAGE_BYTES

GPU = presets.gpu("rtx-4090")
MXFP4 = STORAGE_BYTES["mxfp4"]


def _roof_s(g: Gemm) -> float:
    moved = g.operand_bytes + g.m * g.n * g.batch * g.out_bytes
    return float(moved / (GPU.memory_bandwidth_bytes_per_s * GPU.memory_efficiency))


def _flops_s(g: Gemm) -> float:
    return float(g.flops / (GPU.peak_flops_per_s_16bit * GPU.matmul_efficiency))


def test_one_token_through_four_mxfp4_experts_costs_their_bytes():
    """GPT-OSS-120B's up projection of 4 experts for one token: 35 MB, about 41 us at the 4090's
    bandwidth; as 128-row tiles it was priced near 120 us."""
    g = gemm(1.0, 5760, 2880, 2, batch=4, weight_bytes=MXFP4)
    t = float(gemm_s(g, GPU, "bf16"))
    assert t == pytest.approx(_roof_s(g), rel=0.1)
    assert t < 0.5 * float(gemm_s(g._replace(m=NARROW_TILE_MAX_ROWS + 1), GPU, "bf16"))


def test_an_experts_share_of_a_prompt_is_padded_to_the_token_tile_not_to_128():
    """A weight-only product of 16 rows in 16 batches (the experts' shape of 512 tokens over 128
    experts, 4 each): 16 rows, not 128, the FLOPs or the bytes, whichever is longer. llama.cpp's
    experts are priced apart (`physics.mmq_ids`: its tile is sized from the micro-batch)."""
    g = gemm(16.0, 5760, 2880, 2, batch=128, weight_bytes=MXFP4)
    t = float(gemm_s(g, GPU, "bf16"))
    assert t == pytest.approx(max(_flops_s(g), _roof_s(g)), rel=0.05)
    padded = gemm(17.0, 5760, 2880, 2, batch=128, weight_bytes=MXFP4)  # to 24 rows
    assert float(gemm_s(padded, GPU, "bf16")) >= 24 / 17 * _flops_s(padded) * 0.99


def test_only_weight_only_gemms_of_few_rows_change():
    """16-bit weights and more than 128 rows keep the tile model; an array of row counts takes each
    its own kernel."""
    rows = np.array([1.0, float(MATVEC_MAX_ROWS), 16.0, 128.0, 129.0, 512.0])
    quantised = gemm(rows, 5760, 2880, 2, weight_bytes=MXFP4)
    dense = gemm(rows, 5760, 2880, 2)
    (t_q,) = gemms_s([quantised], GPU, "bf16")
    narrow = rows <= NARROW_TILE_MAX_ROWS
    assert np.allclose(t_q[narrow], weight_only_s(quantised, GPU, "bf16")[narrow])
    assert not np.allclose(t_q[~narrow], weight_only_s(quantised, GPU, "bf16")[~narrow])
    (t_d,) = gemms_s([dense], GPU, "bf16")
    assert np.all(t_d > 0) and not np.allclose(t_d, weight_only_s(dense, GPU, "bf16"))
