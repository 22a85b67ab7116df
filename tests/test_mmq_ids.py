"""llama.cpp's MMQ with expert ids for a prompt's experts (`physics.mmq_ids`): the token tile sized
from the micro-batch, INT8 MMAs, loads and MMAs in turn; hand counts on GPT-OSS-120B's shapes."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from shardwise import presets
from shardwise.analyses import serving_pcie as sp
from shardwise.analyses.serving_pcie_breakdown import breakdown
from shardwise.engines.serving import serving_scenario
from shardwise.physics.gemm import kernel_fixed_s
from shardwise.physics.layer_parts import gemm
from shardwise.physics.linears import GemmTimes
from shardwise.physics.mmq_ids import experts_times, int8_ops_per_s, mmq_ids_s, mmvq_max_tokens, token_tile
from shardwise.specs import Scenario
from shardwise.specs.serving import STORAGE_BYTES

GPU = presets.gpu("rtx-4090")
MXFP4 = STORAGE_BYTES["mxfp4"]


def test_the_token_tile_is_the_narrowest_with_the_fewest_tiles():
    """mul_mat_q_case: 8 to 128 in steps of 8, of 16 from 48; the first with the fewest tiles."""
    tokens = np.array([1, 9, 40, 50, 100, 300, 512, 8192])
    # 50: 48 needs 2 tiles, 64 one; 100: 104 is no multiple of 16, 112; 300: 3 tiles from 112 on
    assert token_tile(tokens).tolist() == [8, 16, 40, 64, 112, 112, 128, 128]


def test_int8_peak_stated_or_twice_the_16_bit_one():
    assert int8_ops_per_s(GPU) == pytest.approx(660.6e12)
    assert int8_ops_per_s(presets.gpu("rtx-3090")) == pytest.approx(284e12)
    a100 = presets.gpu("a100-sxm4-80gb")
    assert int8_ops_per_s(a100) == pytest.approx(2 * a100.peak_flops_per_s_16bit)


def test_gpt_oss_up_projection_of_a_512_token_micro_batch_by_hand():
    """128 experts, 16 tokens each, 2,880 -> 5,760 in MXFP4 on one RTX 4090: 128-wide tiles, so
    2 x 128 x 128 x 5,760 x 2,880 = 543.6 GFLOP of INT8 MMAs (0.87 ms at 660.6 TOPS x 0.95) after
    1.128 GB of weights, 11.8 MB in and 23.6 MB out (1.36 ms at 1,008 GB/s x 0.85): 2.22 ms, where
    the larger of the two alone gave 1.36."""
    g = gemm(16.0, 5760, 2880, 2, batch=128, weight_bytes=MXFP4)
    load = (128 * 2880 * 5760 * MXFP4 + 128 * 16 * (2880 * 2 + 5760 * 2)) / (1.008e12 * GPU.memory_efficiency)
    mma = 2 * 128 * 128 * 5760 * 2880 / (660.6e12 * 0.95)
    assert load == pytest.approx(1.358e-3, rel=0.01) and mma == pytest.approx(0.866e-3, rel=0.01)
    t = float(mmq_ids_s(g, 512, GPU))
    assert t == pytest.approx(load + mma + GPU.kernel_launch_s + float(kernel_fixed_s(GPU)), rel=1e-9)
    # the same product in a micro-batch of 16 tokens: a 16-wide tile, an eighth of the MMAs
    assert float(mmq_ids_s(g, 16, GPU)) == pytest.approx(t - mma * 7 / 8, rel=1e-9)


def test_an_expert_with_more_tokens_than_a_tile_reads_its_weights_again():
    """Two tiles an expert (200 tokens in 128-wide tiles): twice the MMAs and the weights."""
    one = gemm(100.0, 2880, 2880, 2, batch=8, weight_bytes=MXFP4)
    two = gemm(200.0, 2880, 2880, 2, batch=8, weight_bytes=MXFP4)
    fixed = GPU.kernel_launch_s + float(kernel_fixed_s(GPU))
    small, large = float(mmq_ids_s(one, 512, GPU)) - fixed, float(mmq_ids_s(two, 512, GPU)) - fixed
    assert large == pytest.approx(2 * small, rel=0.01)


def test_only_a_prompts_quantised_experts_in_16_bit_change():
    g = gemm(16.0, 5760, 2880, 2, batch=128, weight_bytes=MXFP4)
    dense = gemm(16.0, 5760, 2880, 2, batch=128)
    old = GemmTimes(1.0, 2.0, 3.0)
    (up, down) = experts_times((old, old), (g, dense), np.array([1.0, 8.0, 512.0]), GPU, "bf16")
    assert up.forward_s.tolist()[:2] == [1.0, 1.0] and up.forward_s[2] == pytest.approx(mmq_ids_s(g, 512, GPU))
    assert (up.input_grad_s, up.weight_grad_s) == (2.0, 3.0)
    assert down.forward_s.tolist() == [1.0, 1.0, 1.0]  # 16-bit weights: cuBLAS / mmf, not MMQ
    (fp4, _) = experts_times((old, old), (g, g), 512.0, GPU, "fp4")  # Blackwell's native MXFP4: not here
    assert float(fp4.forward_s) == 1.0


def test_llama_cpp_sets_the_tiles_for_quantised_weights_only():
    pair = next(p for p in sp.PAIRS if p.key == "llamacpp-19378-gptoss-pp512")
    base = Scenario(sp.pair_model(pair), sp._cluster(pair), sp.llama_cpp_plan(pair, 1, 4))
    wl = sp.pair_workload(pair, 4)
    assert serving_scenario(base, wl).cluster.gpu.mmq_token_tiles
    assert not serving_scenario(base, replace(wl, weight_precision="bf16")).cluster.gpu.mmq_token_tiles
    assert not serving_scenario(base, replace(wl, engine="vllm")).cluster.gpu.mmq_token_tiles


def test_gpt_oss_prompts_priced_within_10_percent_on_both_splits():
    """PR 19378's GPT-OSS-120B on 4 RTX 4090, pp512 and pp8192: each side was 6-39% fast with the
    experts' tile at 16 tokens and their loads and MMAs overlapped; a check, nothing fitted to it."""
    for key in ("llamacpp-19378-gptoss-pp512", "llamacpp-19378-gptoss-pp8192"):
        for side in breakdown(next(p for p in sp.PAIRS if p.key == key)):
            assert abs(side.error) < 0.10, (key, side.side, side.error)


def test_serve_prices_the_experts_per_n_ubatch_micro_batch_as_the_breakdown(monkeypatch):
    """Review 52: `serve` gave MMQ a whole prompt (8192 tokens under `-sm tensor`, full tiles);
    llama.cpp runs n_ubatch (512) micro-batches, each tiling its own tokens, as the breakdown does."""
    from shardwise.engines import moe
    from shardwise.engines.serving import ServingWorkload, estimate_serving

    seen: list[tuple[float, float]] = []

    def spy(times, gemms, tokens, gpu, precision):
        out = experts_times(times, gemms, tokens, gpu, precision)
        seen.append((float(np.max(tokens)), float(np.max(out[0].forward_s + out[1].forward_s))))
        return out

    monkeypatch.setattr(moe, "experts_times", spy)
    pair = next(p for p in sp.PAIRS if p.key == "llamacpp-19378-gptoss-pp8192")
    tensor = next(side for side in breakdown(pair) if side.side == "tensor")
    assert tensor.tokens_per_micro_batch == 512
    wanted = {t: s for t, s in seen if t > 1}
    seen.clear()
    scn = Scenario(sp.pair_model(pair), sp._cluster(pair), sp.llama_cpp_plan(pair, 4, 1))
    wl = ServingWorkload(8192, 1, 1, "mxfp4", "bf16", "cpp-eager", engine="llama.cpp")
    est = estimate_serving(scn, wl)
    got = {t: s for t, s in seen if t > 1}
    assert set(wanted) == {512.0}
    assert got[512.0] == pytest.approx(wanted[512.0], rel=1e-12)
    # the prompt: 16 micro-batches of 512 tokens, as the breakdown's tensor side (8192 tokens at once, before: 0.98 s)
    assert float(est.ttft_s) == pytest.approx(pair.tokens / tensor.predicted_tokens_per_s, rel=1e-9)


def test_mmq_only_where_ggml_uses_it():
    """ggml@ba70f8ed `ggml_cuda_should_use_mmq`: Volta (no INT8 MMA) runs MMQ (dp4a) below 64 tokens
    only, cuBLAS from 64; Turing on and CDNA3 always (review 52)."""
    g = gemm(16.0, 5760, 2880, 2, batch=128, weight_bytes=STORAGE_BYTES["q4_0"])
    old = GemmTimes(1.0, 2.0, 3.0)
    tokens = np.array([32.0, 63.0, 64.0, 512.0])
    for name, mmq in (("v100-sxm2-32gb", [1, 1, 0, 0]), ("rtx-4090", [1, 1, 1, 1]), ("mi300x", [1, 1, 1, 1])):
        gpu = presets.gpu(name)
        up, _ = experts_times((old, old), (g, g), tokens, gpu, "fp16")
        assert (up.forward_s != 1.0).astype(int).tolist() == mmq, name
    v100 = presets.gpu("v100-sxm2-32gb")
    assert not v100.int8_mma and float(int8_ops_per_s(v100)) == pytest.approx(62.8e12)  # dp4a, 4x FP32


def test_mxfp4_matrix_vector_limit_is_7_tokens_on_turing_and_ampere_only():
    """mmvq.cu `get_mmvq_mmid_max_batch`: Volta and Ada on take 8 tokens; Turing to Ampere MXFP4 7."""
    assert float(mmvq_max_tokens(presets.gpu("rtx-3090"), MXFP4)) == 7
    assert float(mmvq_max_tokens(presets.gpu("a100-sxm4-80gb"), MXFP4)) == 7
    assert float(mmvq_max_tokens(presets.gpu("rtx-3090"), STORAGE_BYTES["q4_0"])) == 8
    for name in ("rtx-4090", "h100-sxm5-80gb", "rtx-5090", "v100-sxm2-32gb", "mi300x"):
        assert float(mmvq_max_tokens(presets.gpu(name), MXFP4)) == 8, name
    g = gemm(1.0, 5760, 2880, 2, batch=8, weight_bytes=MXFP4)
    old = GemmTimes(1.0, 2.0, 3.0)
    up, _ = experts_times((old, old), (g, g), np.array([7.0, 8.0]), presets.gpu("rtx-3090"), "bf16")
    assert up.forward_s[0] == 1.0 and up.forward_s[1] != 1.0


def test_stated_int8_rates_of_the_geforce_workstation_and_cdna3_presets():
    """Dense INT8 peaks (gpus.yaml): RTX 5090 838 (whitepaper, 4x its halved 16-bit 209.5), RTX PRO
    6000 1,007.6, MI300X and MI325X 2,614.9 (datasheets), an MI250X GCD 191.5 (its 16-bit rate, not twice)."""
    rates = (("rtx-5090", 838.0), ("rtx-pro-6000", 1007.6), ("mi300x", 2614.9), ("mi325x", 2614.9))
    for name, tops in (*rates, ("mi250x-gcd", 191.5), ("rtx-4090", 660.6)):
        assert float(presets.gpu(name).peak_ops_per_s_int8) == pytest.approx(tops * 1e12), name
