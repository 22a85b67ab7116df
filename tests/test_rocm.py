"""MI300X (ROCm) against its kernel benchmarks: CK FlashAttention-2, PyTorch SDPA's AOTriton
backend, hipBLASLt's FP8 GEMMs (presets/gpus.yaml, physics/compute.py)."""

import pytest

from shardwise import presets
from shardwise.errors import SpecError
from shardwise.physics import compute
from shardwise.physics.compute import gemm_s, layer_times, sdpa_flash_fractions
from shardwise.physics.flops import Gemm, layer_forward

# CK FlashAttention-2 on MI300X, head dim 128, 16k tokens, non-causal, batch 1-8, ROCm 6.3.2
# (ROCm/flash-attention#142): TFLOP/s
CK_FORWARD = (309.6, 355.5)
CK_BACKWARD = (194.4, 206.7)


def _times(gpu_name: str, kernel: str):
    fwd = layer_forward(presets.model("llama3-8b", seq_len=16384), 1, 1, False, 2.0)
    return layer_times(fwd, presets.gpu(gpu_name), "bf16", True, attention_kernel=kernel)


def test_mi300x_flash_attention_backward_lags_its_forward_as_ck_measures():
    # at one shape the plateau slowdowns cancel between GPUs: MI300X's backward-to-forward time
    # ratio over H100's is CK's (2.5 x forward / backward TFLOP/s) over Dao's A100 one (2.5 x 73/63)
    mi, h100 = _times("mi300x", "flash2"), _times("h100-sxm5-80gb", "flash2")
    ratio = (float(mi.attention_bwd_s) / float(mi.attention_s)) / (
        float(h100.attention_bwd_s) / float(h100.attention_s)
    )
    low = 2.5 * CK_FORWARD[0] / CK_BACKWARD[1] / compute.FLASH_BACKWARD_RATIO
    high = 2.5 * CK_FORWARD[1] / CK_BACKWARD[0] / compute.FLASH_BACKWARD_RATIO
    assert low <= ratio <= high
    assert ratio > 1.25  # without the MI300X's own backward figure it would be 1


def test_mi300x_flash_attention_plateau_is_cks_measured_speed():
    gpu = presets.gpu("mi300x")
    gemm = float(gpu.peak_flops_per_s_16bit * gpu.matmul_efficiency)
    forward = gemm * float(compute.attention_relative_efficiency(gpu, "flash2"))
    # the backward's TFLOP/s on its 2.5x FLOP count at the efficiency the kernel is priced at
    rel_bwd = float(compute.attention_backward_relative_efficiency(gpu, "flash2"))
    backward = gemm * rel_bwd * compute.FLASH_BACKWARD_FLOPS / compute.FLASH_BACKWARD_RATIO
    # the MAMF-relative efficiencies carry the preset's 0.978 of the MAMF: within 3% of the range
    assert 0.97 * CK_FORWARD[0] * 1e12 <= forward <= 1.03 * CK_FORWARD[1] * 1e12
    assert 0.97 * CK_BACKWARD[0] * 1e12 <= backward <= 1.03 * CK_BACKWARD[1] * 1e12


def test_sdpa_on_rocm_is_aotriton_not_pytorchs_cuda_flash_attention():
    mi, h100 = presets.gpu("mi300x"), presets.gpu("h100-sxm5-80gb")
    assert mi.sdpa_flash_backend == "aotriton" and h100.sdpa_flash_backend == "fa2"
    assert sdpa_flash_fractions(mi) == (compute.AOTRITON_FORWARD_FRACTION, compute.AOTRITON_BACKWARD_FRACTION)
    f, b = sdpa_flash_fractions(h100)
    assert (float(f), float(b)) == (compute.SDPA_FLASH_FORWARD_FRACTION, compute.SDPA_FLASH_BACKWARD_FRACTION)
    # priced through the AOTriton fractions: SDPA over CK's FA2 on MI300X, forward and backward
    sdpa, ck = _times("mi300x", "sdpa-flash2"), _times("mi300x", "flash2")
    assert float(ck.attention_s) / float(sdpa.attention_s) == pytest.approx(compute.AOTRITON_FORWARD_FRACTION)
    assert float(ck.attention_bwd_s) / float(sdpa.attention_bwd_s) == pytest.approx(compute.AOTRITON_BACKWARD_FRACTION)
    # the same GPU flagged CUDA would take the H100's SDPA fractions: slower than AOTriton as taken
    cuda = layer_times(
        layer_forward(presets.model("llama3-8b", seq_len=16384), 1, 1, False, 2.0),
        mi.with_(sdpa_flash_backend="fa2"),
        "bf16",
        True,
        attention_kernel="sdpa-flash2",
    )
    assert float(cuda.attention_bwd_s) > 1.3 * float(sdpa.attention_bwd_s)


def test_mi300x_fp8_gemms_run_at_hipblaslts_measured_speed_not_twice_bf16():
    # hipblaslt-bench f8 8192^3: 907 TFLOP/s (ROCm/hipBLASLt#1721); HipKittens' FP8 GEMM 963;
    # BF16 MAMF 668.4 (TunableOp) at its best shape, x 0.833 at a workload's shapes (AMD's TAF,
    # tests/test_rocm_gemm.py)
    gpu = presets.gpu("mi300x")
    m = n = k = 8192
    flops = 2.0 * m * n * k
    fp8 = Gemm(flops, float(m * k + k * n), m, n, k, 1, 1.0, 1.0, 2.0)
    bf16 = Gemm(flops, 2.0 * (m * k + k * n), m, n, k)
    rate_fp8 = flops / float(gemm_s(fp8, gpu, "fp8"))
    rate_bf16 = flops / float(gemm_s(bf16, gpu, "bf16"))
    assert 0.85 * 907e12 <= rate_fp8 <= 963e12
    assert 0.85 * 0.833 * 668.4e12 <= rate_bf16 <= 0.833 * 668.4e12
    # FP8 over BF16: 1.36 at the best shapes (907 / 668.4), 1.85 at AMD's typical ones (MI325X TAF
    # 1143.18 / 616.42)
    assert 1.3 < rate_fp8 / rate_bf16 < 1.85


@pytest.mark.parametrize(
    "change, message",
    [
        ({"sdpa_flash_backend": "cudnn"}, "sdpa_flash_backend: 'cudnn' is not allowed; choose one of fa2, aotriton"),
        ({"flash2_backward_efficiency": 1.5}, "flash2_backward_efficiency"),
    ],
)
def test_bad_rocm_fields_are_refused_in_one_line(change, message):
    with pytest.raises(SpecError, match=message):
        presets.gpu("mi300x").with_(**change)
