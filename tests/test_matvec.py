"""Weight-only quantised GEMMs of few rows run as matrix-vector kernels (`physics.kernels.matvec_s`:
llama.cpp's `mul_mat_vec_q` up to 8 tokens), not as 128-row tensor-core tiles."""

from __future__ import annotations

import numpy as np
import pytest

from shardwise import presets
from shardwise.physics.kernels import MATVEC_MAX_ROWS, gemm_s, gemms_s, matvec_s
from shardwise.physics.layer_parts import gemm
from shardwise.specs.serving import STORAGE_BYTES

GPU = presets.gpu("rtx-4090")
MXFP4 = STORAGE_BYTES["mxfp4"]


def _roof_s(g) -> float:
    return float(
        (g.operand_bytes + g.m * g.n * g.batch * g.out_bytes)
        / (GPU.memory_bandwidth_bytes_per_s * GPU.memory_efficiency)
    )


def test_one_token_through_four_mxfp4_experts_costs_their_bytes():
    """GPT-OSS-120B's up projection of 4 experts for one token: 35 MB, about 41 us at the 4090's
    bandwidth; as 128-row tiles it was priced near 120 us."""
    g = gemm(1.0, 5760, 2880, 2, batch=4, weight_bytes=MXFP4)
    t = float(gemm_s(g, GPU, "bf16"))
    assert t == pytest.approx(_roof_s(g), rel=0.1)
    assert t < 0.5 * float(gemm_s(g._replace(m=MATVEC_MAX_ROWS + 1), GPU, "bf16"))


def test_only_weight_only_gemms_of_few_rows_change():
    """16-bit weights and more than 8 rows keep the tile model; an array of row counts takes each
    its own kernel."""
    rows = np.array([1.0, 8.0, 9.0, 512.0])
    quantised = gemm(rows, 5760, 2880, 2, weight_bytes=MXFP4)
    dense = gemm(rows, 5760, 2880, 2)
    (t_q,) = gemms_s([quantised], GPU, "bf16")
    few = rows <= MATVEC_MAX_ROWS
    assert np.allclose(t_q[few], matvec_s(quantised, GPU, "bf16")[few])
    assert not np.allclose(t_q[~few], matvec_s(quantised, GPU, "bf16")[~few])
    (t_d,) = gemms_s([dense], GPU, "bf16")
    assert np.all(t_d > 0) and not np.allclose(t_d, matvec_s(dense, GPU, "bf16"))
