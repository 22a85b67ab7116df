"""MI300X (ROCm) against its kernel benchmarks: CK FlashAttention-2, PyTorch SDPA's AOTriton
backend, hipBLASLt's FP8 GEMMs (presets/gpus.yaml, physics/compute.py)."""

from dataclasses import replace

import pytest

from shardwise import presets
from shardwise.engines.dp_comm import contention_share
from shardwise.engines.tp_overlap import NCCL_OVERLAP_SMS, collective_sms
from shardwise.engines.training import estimate_training_step
from shardwise.errors import SpecError
from shardwise.physics import compute
from shardwise.physics.compute import gemm_s, layer_times, sdpa_flash_fractions
from shardwise.physics.flops import Gemm, layer_forward
from shardwise.specs import Plan, Recompute, Scenario

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
    # (the roofline's memory term does not scale: 1e-3)
    assert float(ck.attention_bwd_s) / float(sdpa.attention_bwd_s) == pytest.approx(
        compute.AOTRITON_BACKWARD_FRACTION, rel=1e-3
    )
    # the same GPU flagged CUDA would take the H100's SDPA fractions: faster than AOTriton's Triton backward
    cuda = layer_times(
        layer_forward(presets.model("llama3-8b", seq_len=16384), 1, 1, False, 2.0),
        mi.with_(sdpa_flash_backend="fa2"),
        "bf16",
        True,
        attention_kernel="sdpa-flash2",
    )
    assert float(sdpa.attention_bwd_s) > 1.3 * float(cuda.attention_bwd_s)


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


# AOTriton 0.11b's operator tuning database (ROCm/aotriton v3python/rules/op_database.sqlite3, table
# FLASH$op_attn_bwd, gpu gfx942_mod0, bf16, head dim 128, no dropout or bias, Triton split backend 0):
# its TFLOPS column, 4 b h s^2 d (the forward's, full rectangle) over the backward's time, by length
AOTRITON_DB_CAUSAL = {1024: 53.58, 2048: 62.38, 4096: 44.91, 8192: 60.48}
AOTRITON_DB_NONCAUSAL = {1024: 42.60, 2048: 44.92, 4096: 43.37, 8192: 45.69}


def _aotriton_over_ck(seq: int, causal: bool) -> float:
    """AOTriton's measured backward time over the one `mi300x` prices CK's at, one Llama 3 8B layer."""
    model = presets.model("llama3-8b", seq_len=seq)
    fwd = layer_forward(model, 1, 1, False, 2.0)
    if not causal:  # the same layer without the mask: the whole rectangle, at the non-causal ramp
        fwd = replace(fwd, causal_fraction=1.0)
    ck = layer_times(fwd, presets.gpu("mi300x"), "bf16", True, attention_kernel="flash2").attention_bwd_s
    if not causal:
        from shardwise.physics import attention as at

        ck = float(ck) / float(at.backward_slowdown(seq, seq)) / at.ramp(seq, at.BACKWARD_TILE_OVERHEAD_TOKENS)
    table = AOTRITON_DB_CAUSAL if causal else AOTRITON_DB_NONCAUSAL
    aotriton = 4.0 * model.heads * seq * seq * model.head_dim / (table[seq] * 1e12)
    return float(ck) / aotriton


def test_aotriton_backward_fraction_is_its_own_tuning_databases_speed_against_cks():
    causal = {s: _aotriton_over_ck(s, True) for s in AOTRITON_DB_CAUSAL}
    plain = {s: _aotriton_over_ck(s, False) for s in AOTRITON_DB_NONCAUSAL}
    # the mask's cost to AOTriton beyond CK's causal ramp, where the tuner's grids are full (8 x 12 heads)
    mask = (causal[1024] / plain[1024] + causal[2048] / plain[2048]) / 2
    assert 0.85 < mask < 0.95
    # the 8k non-causal cell (3 x 4 heads) times it: the constant
    assert plain[8192] * mask == pytest.approx(compute.AOTRITON_BACKWARD_FRACTION, abs=0.01)
    # the 8k causal cell (2 x 2 heads, a small dQ grid) reads lower, the full-grid causal cells higher
    assert causal[8192] == pytest.approx(0.45, abs=0.02)
    assert causal[8192] < compute.AOTRITON_BACKWARD_FRACTION < min(causal[1024], causal[2048])
    # AOTriton's backward is Triton's, slower than CK's at every length measured, causal or not
    assert max(*causal.values(), *plain.values()) < 0.7


def _fsdp_step(sms: int | None = None):
    cluster = presets.system("mi300x-8x")
    if sms is not None:
        cluster = replace(cluster, gpu=cluster.gpu.with_(collective_sms=sms))
    flags = presets.framework("torchtitan-compile")
    zero = flags.pop("zero_stage")
    plan = Plan(dp=8, global_batch=8, recompute=Recompute.SELECTIVE, zero_stage=zero, **flags)
    return estimate_training_step(Scenario(presets.model("llama3-8b", seq_len=8192), cluster, plan))


def test_rccl_holds_56_cus_on_the_mi300x_mesh_where_nccl_holds_16_sms():
    mi, h100 = presets.gpu("mi300x"), presets.gpu("h100-sxm5-80gb")
    assert float(collective_sms(mi)) == 56 and float(collective_sms(h100)) == NCCL_OVERLAP_SMS
    assert float(contention_share(mi.sm_count, collective_sms(mi))) == pytest.approx(56 / 304)
    assert float(contention_share(h100.sm_count)) == pytest.approx(16 / 132)
    # FSDP2's hidden gathers and reductions slow the compute beside them by RCCL's share of the CUs
    rccl, nccl_like = _fsdp_step(), _fsdp_step(sms=0)
    added = float(rccl.breakdown.dp_comm_s) - float(nccl_like.breakdown.dp_comm_s)
    hidden = float(nccl_like.hidden_comm_s["dp_comm"])  # what NCCL's 16 would leave hidden
    assert added == pytest.approx((56 - 16) / 304 * hidden, rel=0.1)
    assert float(rccl.step_time_s) - float(nccl_like.step_time_s) == pytest.approx(added, rel=1e-6)


def test_a_negative_collective_sms_is_refused_in_one_line():
    with pytest.raises(SpecError, match="collective_sms"):
        presets.gpu("mi300x").with_(collective_sms=-1)
