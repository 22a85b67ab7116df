"""A fused attention kernel below its plateau (physics/attention.py) against the published kernel
benchmarks, and PyTorch's ring bookkeeping under context parallelism."""

import numpy as np
import pytest

from shardwise import presets
from shardwise.physics import attention as at
from shardwise.physics.compute import layer_times, torch_ring_s
from shardwise.physics.flops import layer_forward

# FlashAttention-2 forward on H100 SXM5, BF16, head dim 128 (Shah et al. 2024, Fig. 4), TFLOP/s at
# 512, 1k, 2k, 4k, 8k, 16k tokens: causal, and non-causal
FA2_CAUSAL = (191, 260, 298, 319, 333, 335)
FA2_PLAIN = (309, 350, 362, 368, 370, 370)
FA2_BACKWARD = (214, 260, 291, 310, 318, 322)
LENGTHS = np.array([512, 1024, 2048, 4096, 8192, 16384])


def test_causal_forward_follows_flashattention2_on_h100_within_ten_percent():
    # the model's speed relative to the non-causal plateau against the measured one
    model = 1.0 / at.forward_slowdown(LENGTHS, LENGTHS)
    measured = np.array(FA2_CAUSAL) / FA2_PLAIN[-1]
    assert np.all(np.abs(model / measured - 1) < 0.10)


def test_non_causal_and_backward_ramps_follow_flashattention2_within_seven_percent():
    # both relative to their 16k value
    plain = at.ramp(LENGTHS, at.FORWARD_TILE_OVERHEAD_TOKENS)
    plain = plain / plain[-1]
    back = at.ramp(LENGTHS, at.BACKWARD_TILE_OVERHEAD_TOKENS)
    back = back / back[-1]
    assert np.all(np.abs(plain / (np.array(FA2_PLAIN) / FA2_PLAIN[-1]) - 1) < 0.05)
    assert np.all(np.abs(back / (np.array(FA2_BACKWARD) / FA2_BACKWARD[-1]) - 1) < 0.07)  # 6.7% at 512


def test_causal_is_slower_than_plain_and_short_is_slower_than_long():
    assert at.forward_slowdown(4096, 4096) > at.slowdown(1, 4096, 1, at.FORWARD_TILE_OVERHEAD_TOKENS)
    assert at.forward_slowdown(1024, 1024) > at.forward_slowdown(16384, 16384)
    assert at.backward_slowdown(2048, 2048) > at.forward_slowdown(2048, 2048)


def test_ring_steps_are_the_mean_of_one_causal_diagonal_and_cp_minus_one_half_rectangles():
    s_l, cp = 4096, 4
    diagonal = 1 / at.ramp(s_l / 2, at.FORWARD_TILE_OVERHEAD_TOKENS, True)
    half = 1 / at.ramp(s_l / 2, at.FORWARD_TILE_OVERHEAD_TOKENS)
    assert at.forward_slowdown(s_l, cp * s_l, cp) == pytest.approx((diagonal + (cp - 1) * half) / cp)
    # long chunks: the ring's non-causal steps run nearer the plateau than one causal call
    assert at.forward_slowdown(32768, 8 * 32768, 8) < at.forward_slowdown(32768, 32768)


def test_pytorch_ring_bookkeeping_only_with_context_parallelism_and_grows_with_steps():
    model = presets.model("llama3-8b").with_(seq_len=4096)
    gpu = presets.gpu("h100-sxm5-80gb")
    none = torch_ring_s(layer_forward(model, 1, 1, False, 2.0, kv_len=4096, cp=1), gpu)
    two = torch_ring_s(layer_forward(model, 1, 1, False, 2.0, kv_len=8192, cp=2), gpu)
    eight = torch_ring_s(layer_forward(model, 1, 1, False, 2.0, kv_len=32768, cp=8), gpu)
    assert none == (0.0, 0.0)
    assert 0 < two[0] < eight[0] and 0 < two[1] < eight[1]
    # per output element (4096 x 4096 of them) at the achievable HBM bandwidth: 46 bytes for the
    # one step after the first, 20 once per layer (step 0's cast, the cast back, K, V contiguous);
    # backward 60 per step and 84 per layer
    out = 4096 * model.heads * model.head_dim
    bw = gpu.memory_bandwidth_bytes_per_s * gpu.memory_efficiency
    assert two[0] == pytest.approx((46 + 20) * out / bw + (6 + 6) * gpu.kernel_launch_s)
    assert two[1] == pytest.approx((60 + 84) * out / bw + (7 + 11) * gpu.kernel_launch_s)


def test_fused_kernel_pays_no_pytorch_ring_bookkeeping():
    model = presets.model("llama3-8b").with_(seq_len=4096)
    gpu = presets.gpu("h100-sxm5-80gb")
    fwd = layer_forward(model, 1, 1, False, 2.0, kv_len=16384, cp=4)
    fused = layer_times(fwd, gpu, "bf16", True, attention_kernel="fused")
    flash2 = layer_times(fwd, gpu, "bf16", True, attention_kernel="flash2")
    ring_f, _ = torch_ring_s(fwd, gpu)
    # flash2 is slower on H100 (its own efficiency) and pays the ring bookkeeping on top
    plain = fused.attention_s * at_relative(gpu)
    assert flash2.attention_s == pytest.approx(plain + ring_f, rel=1e-3)


def test_collective_context_parallelism_pays_no_ring_bookkeeping():
    # all_gather and a2a (Ulysses) run one attention call over the gathered keys: no per-step merge
    model = presets.model("llama3-8b").with_(seq_len=4096)
    gpu = presets.gpu("h100-sxm5-80gb")
    fwd = layer_forward(model, 1, 1, False, 2.0, kv_len=16384, cp=4)
    ring = layer_times(fwd, gpu, "bf16", True, attention_kernel="flash2")
    ring_f, ring_b = torch_ring_s(fwd, gpu)
    for comm in ("all_gather", "a2a"):
        plain = layer_times(fwd, gpu, "bf16", True, attention_kernel="flash2", cp_comm=comm)
        assert plain.attention_s == pytest.approx(ring.attention_s - ring_f)
        assert plain.attention_bwd_s == pytest.approx(ring.attention_bwd_s - ring_b)


def at_relative(gpu):
    """The fused kernel's time over FlashAttention-2's at the same shape: their plateau
    efficiencies' inverse ratio (compute-bound shapes)."""
    from shardwise.physics.compute import FLASH_RELATIVE_EFFICIENCY

    return FLASH_RELATIVE_EFFICIENCY / gpu.flash2_efficiency


def _cp_scenario(kernel: str, seq_len: int, cp: int):
    from shardwise.specs import Plan, Scenario

    model = presets.model("llama3-8b", seq_len=seq_len)
    plan = Plan(cp=cp, dp=8 // cp, global_batch=8 // cp, attention_kernel=kernel, precision="bf16")
    return Scenario(model, presets.system("dgx-h100"), plan)


def test_pytorch_ring_gathers_every_ranks_keys_and_passes_fp32_key_gradients():
    """torchtitan's ring (flash2) on Llama 3 8B at 64K tokens, cp 2, one DGX H100: one all-gather of
    both ranks' KV chunks (32 query heads: repeat_kv) per pass, and dK, dV in fp32 after each step;
    Megatron's ring (fused) sends one chunk (8 KV heads) per step."""
    from shardwise.engines.context_parallel import cp_kv_chunk_bytes, cp_step_s
    from shardwise.physics.collectives import Fabric
    from shardwise.physics.topology import placement

    torch_ring, megatron = _cp_scenario("flash2", 65536, 2), _cp_scenario("fused", 65536, 2)
    fabric = Fabric.of(torch_ring.cluster)
    chunk = 2 * 2 * 32768 * 32 * 128  # K and V, bf16, 32K tokens, 32 heads of 128
    assert float(cp_kv_chunk_bytes(torch_ring)) == chunk
    comm = cp_step_s(torch_ring, fabric, placement(torch_ring.plan, 8))
    assert float(comm.gather_s) == pytest.approx(float(fabric.group(2, 2).all_gather(2 * chunk)))
    assert float(comm.grad_step_s) == pytest.approx(float(fabric.p2p(2 * chunk, False)))  # fp32: twice the bytes
    assert comm.ring_step_s == 0.0
    ring = cp_step_s(megatron, fabric, placement(megatron.plan, 8))
    assert float(ring.ring_step_s) == pytest.approx(float(fabric.p2p(chunk / 4, False))) and ring.gather_s == 0.0


def test_only_the_last_key_gradients_of_the_pytorch_ring_stay_exposed_at_long_context():
    """At 32K tokens per rank the gather and every dK, dV but the last hide behind a step's attention:
    the backward's exposed CP time per layer is one fp32 transfer, the forward's none."""
    from shardwise.engines.context_parallel import context_parallel, cp_step_s
    from shardwise.engines.costs import layer_cost
    from shardwise.engines.tp_overlap import tp_comm
    from shardwise.physics.collectives import Fabric
    from shardwise.physics.topology import placement

    scn = _cp_scenario("flash2", 262144, 8)
    fabric = Fabric.of(scn.cluster)
    place = placement(scn.plan, 8)
    comm = cp_step_s(scn, fabric, place)
    local = context_parallel(scn)
    cost, _ = layer_cost(local, tp_comm(local, fabric, place["tp"]), kv_len=262144, cp=8, cp_step=comm)
    assert float(cost.tp_forward_s) == pytest.approx(0.0, abs=1e-9)
    assert float(cost.tp_backward_s) == pytest.approx(float(comm.grad_step_s))
    assert float(comm.grad_step_s) > 1e-3  # 1 GB of fp32 dK, dV on NVLink: milliseconds
    hidden = 2 * float(comm.gather_s) + 7 * float(comm.grad_step_s)
    assert float(cost.tp_hidden_s) == pytest.approx(hidden)


def test_sdpa_flash2_is_slower_than_flash_attn_on_hopper_only():
    # PyTorch SDPA's bundled FlashAttention-2 runs at SDPA_FLASH_FORWARD_FRACTION of the flash-attn
    # package's forward and SDPA_FLASH_BACKWARD_FRACTION of its backward on H100; same on A100
    from shardwise.physics.compute import SDPA_FLASH_BACKWARD_FRACTION, SDPA_FLASH_FORWARD_FRACTION

    model = presets.model("llama3-8b").with_(seq_len=8192)
    fwd = layer_forward(model, 1, 1, False, 2.0)
    h100 = presets.gpu("h100-sxm5-80gb")
    upstream = layer_times(fwd, h100, "bf16", True, attention_kernel="flash2")
    sdpa = layer_times(fwd, h100, "bf16", True, attention_kernel="sdpa-flash2")
    assert sdpa.attention_s == pytest.approx(upstream.attention_s / SDPA_FLASH_FORWARD_FRACTION, rel=1e-3)
    assert sdpa.attention_bwd_s == pytest.approx(upstream.attention_bwd_s / SDPA_FLASH_BACKWARD_FRACTION, rel=1e-3)
    assert SDPA_FLASH_BACKWARD_FRACTION < SDPA_FLASH_FORWARD_FRACTION < 1.0
    a100 = presets.gpu("a100-sxm4-80gb")
    same = layer_times(fwd, a100, "bf16", True, attention_kernel="flash2")
    a_sdpa = layer_times(fwd, a100, "bf16", True, attention_kernel="sdpa-flash2")
    assert a_sdpa.attention_s == pytest.approx(same.attention_s)
    assert a_sdpa.attention_bwd_s == pytest.approx(same.attention_bwd_s)


def test_sdpa_flash2_pays_pytorchs_ring_like_flash2():
    model = presets.model("llama3-8b").with_(seq_len=4096)
    gpu = presets.gpu("a100-sxm4-80gb")  # same kernel speed: only the ring differs from fused
    fwd = layer_forward(model, 1, 1, False, 2.0, kv_len=16384, cp=4)
    flash2 = layer_times(fwd, gpu, "bf16", True, attention_kernel="flash2")
    sdpa = layer_times(fwd, gpu, "bf16", True, attention_kernel="sdpa-flash2")
    assert sdpa.attention_s == pytest.approx(flash2.attention_s)
    assert sdpa.attention_bwd_s == pytest.approx(flash2.attention_bwd_s)


def test_torchtitan_and_hf_presets_call_sdpa_flash2_and_flash_attn_stacks_do_not():
    for name in ("torchtitan", "torchtitan-compile", "fsdp", "fsdp2", "hf-transformers", "nemo-automodel"):
        assert presets.framework(name)["attention_kernel"] == "sdpa-flash2", name
    for name in ("flash-attn-trainer", "composer", "megatron-deepspeed"):
        assert presets.framework(name)["attention_kernel"] == "flash2", name


def test_flash_attention_2_runs_on_blackwell_at_about_its_hopper_speed():
    # FA2 has no sm100 kernels: its Ampere mma.sync code measures 352-362 TFLOP/s forward on a B200
    # at head dim 128 (tritonbench PR #171) against 370 on an H100 (Shah et al. 2024), so its share
    # of a GEMM's speed falls from 370 / 794.5 on Hopper to 362 / 1745 on Blackwell (MAMF GEMMs)
    h100_mamf, b200_mamf = 794.5e12, 1745e12
    hopper = presets.gpu("h100-sxm5-80gb").flash2_efficiency * h100_mamf
    for name in ("b200-sxm-180gb", "gb200", "b300-sxm-270gb", "gb300"):
        blackwell = presets.gpu(name).flash2_efficiency * b200_mamf
        assert 330e12 < blackwell < 400e12, name
        assert blackwell == pytest.approx(hopper, rel=0.05), name
    # so a B200 runs SDPA's flash attention slower than Hopper's ratio would have it
    model = presets.model("llama3-8b", seq_len=8192)
    fwd = layer_forward(model, 1, 1, False, 2.0)
    b200 = presets.gpu("b200-sxm-180gb")
    measured = layer_times(fwd, b200, "bf16", True, attention_kernel="sdpa-flash2").attention_s
    hopper_ratio = layer_times(fwd, b200.with_(flash2_efficiency=0.47), "bf16", True, attention_kernel="sdpa-flash2")
    assert float(measured) / float(hopper_ratio.attention_s) == pytest.approx(0.47 / 0.21, rel=0.02)


# the same figures at head dim 64 (Shah et al. 2024, Fig. 4 and 5): non-causal forward, backward
FA2_PLAIN_HD64 = (282, 306, 318, 321, 322, 324)
FA2_BACKWARD_HD64 = (198, 238, 264, 279, 287, 291)


def test_flash_attention_2_at_head_dim_64_runs_its_measured_share_of_head_dim_128_on_hopper():
    from shardwise.physics.attention_kernels import flash2_head_dim_factors

    h100 = presets.gpu("h100-sxm5-80gb")
    forward, backward = flash2_head_dim_factors(h100, "flash2", 64)
    # the long-sequence plateaus: 324 / 370 forward, 291 / 322 backward, within 2%
    assert float(forward) == pytest.approx(FA2_PLAIN_HD64[-1] / FA2_PLAIN[-1], rel=0.02)
    assert float(backward) == pytest.approx(FA2_BACKWARD_HD64[-1] / FA2_BACKWARD[-1], rel=0.02)
    assert flash2_head_dim_factors(h100, "flash2", 128) == (1.0, 1.0)
    mid = flash2_head_dim_factors(h100, "flash2", 96)[0]  # between the measured points
    assert float(forward) < float(mid) < 1.0
    # the fused (cuDNN / TE) kernels, and other GPUs, keep their plateau
    assert flash2_head_dim_factors(h100, "fused", 64) == (1.0, 1.0)
    assert flash2_head_dim_factors(presets.gpu("a100-sxm4-80gb"), "flash2", 64) == (1.0, 1.0)
    # head dims off FA2's templates are padded (flash_api.cpp: a multiple of 32 up to 128, of 64 above):
    # 80 runs the 96 kernel, 160 the 192 one, on every GPU; on Hopper at that kernel's speed
    a100 = presets.gpu("a100-sxm4-80gb")
    assert flash2_head_dim_factors(a100, "flash2", 80) == (pytest.approx(80 / 96), pytest.approx(80 / 96))
    assert float(flash2_head_dim_factors(a100, "sdpa-flash2", 160)[0]) == pytest.approx(160 / 192)
    assert float(flash2_head_dim_factors(h100, "flash2", 80)[0]) == pytest.approx(float(mid) * 80 / 96)
    assert flash2_head_dim_factors(a100, "fused", 80) == (1.0, 1.0)
    # in a layer: a 1B-shaped model with 64-wide heads pays it in its attention kernel's time
    model = presets.model("llama3.2-1b").with_(seq_len=4096)  # 32 heads of 64
    fwd = layer_forward(model, 1, 1, False, 2.0)
    t = layer_times(fwd, h100, "bf16", True, attention_kernel="flash2")
    wide = layer_times(layer_forward(model.with_(heads=16, kv_heads=4), 1, 1, False, 2.0), h100, "bf16", True,
                       attention_kernel="flash2")  # fmt: skip
    # the same FLOPs (16 heads of 128): the narrow heads take 1 / 0.88 and 1 / 0.90 the time
    assert float(t.attention_s) / float(wide.attention_s) == pytest.approx(1 / float(forward), rel=0.02)
    assert float(t.attention_bwd_s) / float(wide.attention_bwd_s) == pytest.approx(1 / float(backward), rel=0.02)


def test_flash_attention_2_on_ampere_runs_at_its_own_plateau_above_the_fused_kernels_share():
    # Dao 2023, Sec. 4.1 (A100 80GB SXM4): FA2 up to 73% of peak forward, 63% backward, where a
    # large GEMM reaches the MAMF's 271.2 of 312 TFLOP/s: its plateau is 0.84 of the GEMMs', above the
    # fused kernels' 0.75 (cuDNN on H100); SDPA's copy runs the same sm80 kernels (no Hopper fraction)
    from shardwise.physics.attention_kernels import (
        FLASH_BACKWARD_FLOPS,
        FLASH_BACKWARD_RATIO,
        FLASH_RELATIVE_EFFICIENCY,
        attention_backward_relative_efficiency,
        attention_relative_efficiency,
        sdpa_flash_fractions,
    )

    mamf = 271.2 / 312.0
    for name in ("a100-sxm4-80gb", "a100-sxm4-40gb", "a100-sxm4-64gb", "a800-sxm4-80gb", "a100-pcie-80gb"):
        a100 = presets.gpu(name)
        forward = float(attention_relative_efficiency(a100, "flash2"))
        assert forward * mamf == pytest.approx(0.73, abs=0.005) and forward > FLASH_RELATIVE_EFFICIENCY, name
        backward = float(attention_backward_relative_efficiency(a100, "flash2"))
        assert backward * FLASH_BACKWARD_FLOPS / FLASH_BACKWARD_RATIO * mamf == pytest.approx(0.63, abs=0.005), name
        assert tuple(float(f) for f in sdpa_flash_fractions(a100)) == (1.0, 1.0), name
        assert float(attention_relative_efficiency(a100, "sdpa-flash2")) == forward, name
        assert float(attention_relative_efficiency(a100, "fused")) == FLASH_RELATIVE_EFFICIENCY, name
    # Hopper keeps SDPA's slower copy of FA2
    assert float(sdpa_flash_fractions(presets.gpu("h100-sxm5-80gb"))[0]) < 1.0
