"""EuroHPC system presets of the Modalities scaling runs: MareNostrum 5's accelerated partition (BSC's
user guide: 4 H100 64GB per node, 4 x NDR200) beside Leonardo Booster (presets/systems.yaml, gpus.yaml)."""

import pytest

from shardwise import presets
from shardwise.calibration.spreads import FITTED_FROM

GBIT = 1e9 / 8  # bytes per second in one Gb/s


def test_marenostrum5_acc_is_four_h100_64gb_with_one_ndr200_port_each():
    cluster = presets.system("marenostrum5-acc")
    gpu = cluster.gpu
    assert (gpu.name, cluster.gpus_per_node) == ("h100-sxm5-64gb", 4)
    assert cluster.inter_node_link.bandwidth_bytes_per_s == pytest.approx(200 * GBIT)  # 800 Gb/s over 4 GPUs
    assert cluster.intra_node_link.bandwidth_bytes_per_s == presets.link("nvlink4").bandwidth_bytes_per_s


def test_h100_64gb_is_h100_sxm_silicon_with_less_hbm():
    """Same GH100 SXM5 compute (peak, SMs, efficiencies, L2, warpgroup tiles, fitted scale) as the
    80 GB part; four HBM2e stacks instead of five HBM3: less memory and bandwidth."""
    small, big = presets.gpu("h100-sxm5-64gb"), presets.gpu("h100-sxm5-80gb")
    same = ("peak_flops_per_s_16bit", "peak_flops_per_s_fp8", "sm_count", "matmul_efficiency", "flash2_efficiency")
    assert all(getattr(small, f) == getattr(big, f) for f in same)
    assert small.memory_bytes < big.memory_bytes and small.memory_bandwidth_bytes_per_s == pytest.approx(1.6e12)
    assert small.gemm_kernels == big.gemm_kernels == "sm90"
    assert (small.l2_bytes, small.l2_bandwidth_bytes_per_s) == (big.l2_bytes, big.l2_bandwidth_bytes_per_s)
    assert FITTED_FROM[small.name] == big.name
