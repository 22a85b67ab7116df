"""Kernels one dense decoder layer launches per serving engine (engines/engine_kernels.py; docs/serving.md
"Kernel gaps"): the counts read from each engine's source, the all-reduce fusions at tp > 1, and
that more kernels never make decode faster."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest

from shardwise import presets
from shardwise.engines import engine_kernels
from shardwise.engines.engine_kernels import KERNELS, LayerKernels, fused_kernels, layer_kernels, norm_fusion_max_bytes
from shardwise.engines.serving import ServingWorkload, estimate_serving, plan_for_serving, serving_scenario
from shardwise.physics.flops import layer_forward
from shardwise.physics.layer_parts import ELEMENTWISE_KERNELS, ROPE_KERNELS
from shardwise.specs import Plan, Scenario
from shardwise.specs._checks import SpecError


def test_counts_per_engine_as_read_from_their_source():
    # FasterTransformer ParallelGptDecoder.cc@6fddeac5: LN, QKV, fused masked MHA, output GEMM,
    # add-bias-residual-LN, FFN in, bias + GELU, FFN out, add-bias-residual
    assert KERNELS["fastertransformer"].kernels == 9 and KERNELS["fastertransformer"].fused_residual_norms == 1
    # TensorRT-LLM _torch/models/modeling_llama.py@3a5901cd: 2 add+RMSNorm, QKV, QKV preprocessing
    # (rotary, KV write), XQA, output, gate-up, SwiGLU, down; norms into the all-reduce above hidden 4096
    assert KERNELS["tensorrt-llm"] == LayerKernels(9, 0, 2, 4096, False, 2, KERNELS["tensorrt-llm"].source)
    # vLLM (-O2): 2 fused_add_rms_norm, QKV, rotary, reshape_and_cache_flash, attention, output,
    # gate-up, silu_and_mul, down; fuse_allreduce_rms on Hopper/Blackwell
    assert KERNELS["vllm"].kernels == 10 and KERNELS["vllm"].fusion_needs_hopper
    assert KERNELS["sglang"].kernels == 10 and KERNELS["sglang"].norms_in_all_reduce == 0
    # llama.cpp build_llama (2024): 23 graph nodes, 7 more q8_1 quantisations with quantised weights
    assert (KERNELS["llama.cpp"].kernels, KERNELS["llama.cpp"].quantised_extra) == (23, 7)
    assert KERNELS["pytorch"].kernels == 0  # the stack's fused count


def test_all_reduce_fusions_at_tp_above_one():
    assert layer_kernels("tensorrt-llm", False) == 9 and layer_kernels("llama.cpp", True) == 30
    mib = 1024.0**2
    trt = 8e6  # TensorRT-LLM's own kernel up to its NCCL switch
    assert norm_fusion_max_bytes("tensorrt-llm", 2, 8192, "sm90", True, trt) == trt  # RESIDUAL_RMS_NORM
    assert norm_fusion_max_bytes("tensorrt-llm", 2, 4096, "sm90", True, trt) == 0  # needs hidden > 4096
    assert norm_fusion_max_bytes("tensorrt-llm", 1, 8192, "sm90", True, trt) == 0
    # vLLM 0.34's FI_ALLREDUCE_FUSION_MAX_SIZE_MB: 64 / 2 / 0.5 MiB at tp 2 / 4 / 8 on SM90; 32 MiB at tp 4
    # and 64 MiB at tp 16 (MNNVL) on SM100
    assert np.array_equal(
        norm_fusion_max_bytes("vllm", np.array([2, 4, 8]), 8192, "sm90", True, 0), [64 * mib, 2 * mib, mib / 2]
    )
    assert norm_fusion_max_bytes("vllm", 4, 8192, "sm100", True, 0) == 32 * mib
    assert norm_fusion_max_bytes("vllm", 16, 8192, "sm100", True, 0) == 64 * mib
    assert norm_fusion_max_bytes("vllm", 16, 8192, "sm90", True, 0) == 0  # no SM90 row at tp 16
    assert norm_fusion_max_bytes("vllm", 2, 8192, "generic", True, 0) == 0  # A100: no FlashInfer fusion
    # no P2P: FlashInfer's workspace cannot map the peers' buffers, vLLM runs the layer unfused
    assert norm_fusion_max_bytes("vllm", 2, 8192, "sm90", False, 0) == 0
    # the count at a message size: decode's small all-reduces fuse, prefill's large ones do not
    assert np.array_equal(fused_kernels(10, mib, 8, np.array([16e3, 537e6])), [8, 10])
    assert fused_kernels(10, mib, 1, 16e3) == 10


def test_the_vllm_fusion_table_is_read_at_the_presets_version():
    """`VLLM_FUSION_MAX_MIB` is vLLM 0.34.0's: a vLLM preset of another version asks for it to be read again."""
    from shardwise.engines.engine_kernels import VLLM_FUSION_VERSION
    from shardwise.engines.engine_presets import engine

    assert engine("vllm").version.split()[0] == VLLM_FUSION_VERSION


def test_vllm_fuses_on_pcie_only_with_p2p_and_under_a_pipeline():
    """H100 PCIe: the fusion where the GPUs have P2P, not without (`--p2p off`); 0.34 has no pp condition."""
    cluster = presets.system("h100-pcie-8x-switch")
    wl = ServingWorkload(128, 128, engine="vllm", custom_all_reduce="vllm")
    for p2p, want in ((True, 2 * 1024.0**2), (False, 0.0)):
        scn = Scenario(presets.model("llama3-70b"), cluster.with_(p2p=p2p), plan_for_serving(4, 2))
        assert float(serving_scenario(scn, wl).plan.norm_fusion_max_bytes) == want


def test_vllm_fuses_on_pcie_only_where_the_tp_group_keeps_p2p():
    """h100-pcie-8x-switch (4 GPUs a switch, NCCL's P2P inside it, `p2p_beyond_switch` off): TP 4
    inside one switch fuses, TP 8 across the two switches (and sockets) runs unfused, as the ring's
    rate prices those hops (`physics.pcie.p2p_reach`); with P2P beyond the switch (NCCL_P2P_LEVEL=SYS)
    TP 8 fuses; on NVSwitch TP 8 fuses (0.5 MiB)."""
    from shardwise.physics.pcie import p2p_reach

    cluster = presets.system("h100-pcie-8x-switch")
    wl = ServingWorkload(128, 128, engine="vllm", custom_all_reduce="vllm")

    def fusion(c: object, tp: int) -> float:
        scn = Scenario(presets.model("llama3-70b"), c, plan_for_serving(tp, 1, 8 // tp))
        return float(serving_scenario(scn, wl).plan.norm_fusion_max_bytes)

    assert fusion(cluster, 4) == 2 * 1024.0**2 and fusion(cluster, 8) == 0.0
    beyond = cluster.with_(pcie=replace(cluster.pcie, p2p_beyond_switch=True))
    assert fusion(beyond, 8) == 0.5 * 1024.0**2
    assert fusion(presets.system("dgx-h100"), 8) == 0.5 * 1024.0**2
    assert list(p2p_reach(cluster.pcie, True, np.array([1, 2, 4, 8]))) == [True, True, True, False]
    assert not np.any(p2p_reach(cluster.pcie, False, np.array([2, 4])))


def one_node(gpus: int) -> object:
    return presets.system("dgx-h100").with_(gpus_per_node=gpus)


def test_serving_plan_carries_the_engines_count():
    scn = Scenario(presets.model("llama3-70b"), one_node(2), plan_for_serving(2, 1))
    wl = ServingWorkload(128, 128, engine="tensorrt-llm", custom_all_reduce="trtllm")
    plan = serving_scenario(scn, wl).plan
    assert (plan.serving_layer_kernels, plan.fused_residual_norms) == (9, 2)
    assert plan.norm_fusion_max_bytes == 16e6  # TensorRT-LLM's own kernel below 16 MB at 2 Hopper GPUs
    # on NCCL (no custom all-reduce) it runs fallbackRunSubsequentOps: the norms stay kernels
    nccl = ServingWorkload(128, 128, engine="tensorrt-llm", custom_all_reduce="none")
    assert serving_scenario(scn, nccl).plan.norm_fusion_max_bytes == 0
    plan = serving_scenario(scn, ServingWorkload(128, 128, engine="pytorch")).plan
    assert (plan.serving_layer_kernels, plan.fused_residual_norms) == (0, 0)


def test_elementwise_kernels_are_the_count_less_the_priced_gemms_and_attention():
    model = presets.model("llama3-8b")
    shared = layer_forward(model, 1, 1, False, 2.0, 1, 128)
    assert shared.elementwise_kernels == ELEMENTWISE_KERNELS + ROPE_KERNELS
    assert layer_forward(model, 1, 1, False, 2.0, 1, 128, engine_kernels=23).elementwise_kernels == 23 - 5
    fused = layer_forward(model, 8, 1, False, 2.0, 1, 128, fused_residual_norms=2)
    apart = layer_forward(model, 8, 1, False, 2.0, 1, 128)
    assert apart.elementwise_bytes - fused.elementwise_bytes == pytest.approx(2 * 2.0 * 8 * model.hidden)


def test_more_kernels_never_make_decode_faster(monkeypatch):
    scn = Scenario(presets.model("llama3-8b"), one_node(1), plan_for_serving(1, 1))
    tpots = []
    for count in (5, 9, 14, 23, 40):
        monkeypatch.setitem(engine_kernels.KERNELS, "vllm", LayerKernels(count))
        tpots.append(float(estimate_serving(scn, ServingWorkload(128, 128, 8, engine="vllm")).tpot_s))
    assert all(b > a for a, b in itertools.pairwise(tpots))
    # about one graph gap (1 us) per kernel and layer
    assert (tpots[-1] - tpots[0]) / (35 * 32) == pytest.approx(1.0e-6, rel=0.05)


def test_plan_refuses_a_count_out_of_range():
    with pytest.raises(SpecError, match="serving_layer_kernels"):
        Plan(serving_layer_kernels=-1)
    with pytest.raises(SpecError, match="fused_residual_norms"):
        Plan(fused_residual_norms=3)
    # whole numbers, and a count of 0 (the stack's) or at least the 5 kernels priced apart
    with pytest.raises(SpecError, match=r"serving_layer_kernels: 9\.5 is not allowed; it must be a whole number"):
        Plan(serving_layer_kernels=9.5)
    with pytest.raises(SpecError, match=r"fused_residual_norms: 1\.5 is not allowed; it must be a whole number"):
        Plan(fused_residual_norms=1.5)
    with pytest.raises(SpecError, match=r"serving_layer_kernels 3 is not allowed; it must be 0 .* or at least 5"):
        Plan(serving_layer_kernels=3)
    with pytest.raises(SpecError, match="serving_layer_kernels 4 is not allowed"):
        Plan(serving_layer_kernels=np.array([9, 4]))
    assert Plan(serving_layer_kernels=5.0).serving_layer_kernels == 5


def test_every_engine_has_a_count_and_the_floor_is_what_is_priced_apart():
    from shardwise.physics.layer_parts import PRICED_ATTENTION_KERNELS, PRICED_GEMM_KERNELS
    from shardwise.specs.plan_checks import PRICED_LAYER_KERNELS
    from shardwise.specs.serving import ENGINE_NAMES

    assert set(KERNELS) == set(ENGINE_NAMES)
    assert PRICED_LAYER_KERNELS == PRICED_GEMM_KERNELS + PRICED_ATTENTION_KERNELS


def test_vllm_fuses_on_a_dense_plan_with_replicas():
    """A dense plan's replicas are separate vLLM servers (vLLM's data-parallel size 1, `emit.vllm`):
    the fusion's TP + DP caveat is for --data-parallel-size, data-parallel attention, alone."""
    scn = Scenario(presets.model("llama3-70b"), one_node(4), plan_for_serving(2, 1, 2))
    plan = serving_scenario(scn, ServingWorkload(128, 128, engine="vllm", custom_all_reduce="vllm")).plan
    assert plan.norm_fusion_max_bytes == 64 * 1024.0**2


def test_llama_cpp_preset_says_its_kernel_count_is_a_2024_builds():
    """The preset is a 2026 build; the kernel count is build_llama's of 2024 (later fusions not
    counted from source), and the preset says so where it names its sources."""
    from shardwise.engines.engine_presets import engine

    preset = engine("llama.cpp")
    assert "2026" in preset.version and KERNELS["llama.cpp"].source.endswith("(2024)")
    assert "a 2024 build's count" in preset.source and "not counted" in preset.source


def test_a_count_the_norm_fusion_would_take_below_the_priced_kernels_is_refused():
    """The fused all-reduce takes two norms off `serving_layer_kernels`: with a fusion limit the count
    must leave the GEMMs and attention (review23)."""
    from shardwise.specs import Plan
    from shardwise.specs._checks import SpecError

    with pytest.raises(SpecError, match="serving_layer_kernels 6 is not allowed with norm_fusion_max_bytes"):
        Plan(serving_layer_kernels=6, norm_fusion_max_bytes=1e6)
    assert Plan(serving_layer_kernels=9, norm_fusion_max_bytes=1e6).serving_layer_kernels == 9
