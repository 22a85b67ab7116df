"""FLOP counts against Narayanan et al. 2021 Eq. 3 and Korthikanti et al. 2022 App. A."""

import numpy as np
import pytest

from shardwise import presets
from shardwise.engines.training import estimate_training_step
from shardwise.physics.flops import gemm, layer_forward, logits_forward
from shardwise.specs import Plan, Scenario


def test_gemm_counts_two_flops_per_multiply_add_and_each_operand_once():
    g = gemm(4, 3, 2, e=2)
    assert g.flops == 2 * 4 * 3 * 2
    assert g.bytes == 2 * (4 * 2 + 2 * 3 + 4 * 3)


def test_gpt_layer_is_24bsh2_plus_4bs2h(gpt3):
    b, s, h = 2, gpt3.seq_len, gpt3.hidden
    fwd = layer_forward(gpt3, b, 1, False, 2.0)
    assert fwd.model_flops == pytest.approx(24 * b * s * h**2 + 4 * b * s**2 * h)


def test_tensor_parallelism_divides_layer_flops(gpt3):
    one = layer_forward(gpt3, 1, 1, False, 2.0).model_flops
    eight = layer_forward(gpt3, 1, 8, False, 2.0).model_flops
    assert eight == pytest.approx(one / 8)


def test_gqa_shrinks_only_the_key_value_projections():
    m = presets.model("llama3-70b")  # 64 query heads, 8 KV heads, head dim 128
    fwd = layer_forward(m, 1, 1, False, 2.0)
    T, h, d = m.seq_len, m.hidden, m.head_dim
    assert fwd.qkv.flops == pytest.approx(2 * T * h * (h + 2 * 8 * d))
    assert fwd.mlp_up.flops == pytest.approx(2 * T * h * 2 * m.ffn_hidden)  # SwiGLU: gate and up


def test_hardware_flops_with_full_recompute_match_narayanan_eq3(gpt3, dgx_a100_8):
    plan = Plan(tp=8, pp=8, dp=1, global_batch=64, recompute="full")
    est = estimate_training_step(Scenario(gpt3, dgx_a100_8, plan))
    B, s, l, h, V = 64, gpt3.seq_len, gpt3.layers, gpt3.hidden, gpt3.vocab
    eq3 = 96 * B * s * l * h**2 * (1 + s / (6 * h) + V / (16 * l * h))
    assert est.hardware_flops_per_step == pytest.approx(eq3)


def test_model_flops_match_korthikanti_appendix_a(gpt3, dgx_a100_8):
    plan = Plan(tp=8, pp=8, dp=1, global_batch=64, recompute="selective", sequence_parallel=True, flash_attention=False)
    est = estimate_training_step(Scenario(gpt3, dgx_a100_8, plan))
    B, s, l, h, V = 64, gpt3.seq_len, gpt3.layers, gpt3.hidden, gpt3.vocab
    model = 72 * B * l * s * h**2 * (1 + s / (6 * h) + V / (12 * h * l))
    assert est.model_flops_per_step == pytest.approx(model)
    # Selective recomputation redoes the attention core: hardware / model = 1 + s / (6h) ... of the layers
    extra = est.hardware_flops_per_step - est.model_flops_per_step
    assert extra == pytest.approx(B * l * 4 * s**2 * h)


def test_logits_are_2bshv(gpt3):
    assert logits_forward(gpt3, 3, 1, 2.0).flops == pytest.approx(2 * 3 * gpt3.seq_len * gpt3.hidden * gpt3.vocab)


def test_flops_broadcast_over_arrays(gpt3):
    b = np.array([1, 2, 4])
    fwd = layer_forward(gpt3, b, 8, False, 2.0)
    one = layer_forward(gpt3, 1, 8, False, 2.0)
    np.testing.assert_allclose(fwd.model_flops, one.model_flops * b)


def test_mfu_never_exceeds_what_the_gemms_reach_even_at_long_sequences():
    """Megatron's count includes the whole attention square; a causal fused kernel computes half
    of it, so at 1M tokens the convention's MFU exceeded the A100's GEMM efficiency (0.94 > 0.85).
    MFU counts the useful work; the convention's count stays for converting published TFLOP/s."""
    from shardwise.engines.training import estimate_training_step
    from shardwise.specs import Plan, Scenario

    model = presets.model("gpt3-175b").with_(seq_len=1_000_000)
    est = estimate_training_step(Scenario(model, presets.system("dgx-a100"), Plan(tp=8, global_batch=8)))
    eta = presets.gpu("a100-sxm4-80gb").matmul_efficiency
    assert 0 < float(est.mfu) <= eta and 0 < float(est.hfu) <= eta
    convention = float(est.model_flops_per_step) / (float(est.step_time_s) * 8 * 312e12)
    assert convention > eta  # what the convention alone would say
    masked = float(est.masked_attention_flops_per_step)
    assert masked == pytest.approx(float(est.model_flops_per_step - est.useful_flops_per_step))
    assert 0.3 < masked / float(est.model_flops_per_step) < 0.5  # attention dominates, half of it masked


def test_hfu_counts_the_attention_forward_selective_recomputation_reruns_under_a_fused_kernel():
    """Megatron-Core checkpoints the core attention whatever its kernel, and the step time pays for
    it (walkthrough: Llama 3 70B with --recompute selective printed HFU = MFU, 46.6%, "recomputation
    counted"): HFU counts the causal part of the attention core's forward once more, and the
    hardware FLOPs the flat baseline prices stay as they were."""
    model, cluster = presets.model("llama3-70b"), presets.system("dgx-h100", nodes=4)
    base = Plan(tp=8, pp=4, global_batch=64, sequence_parallel=True)
    none = estimate_training_step(Scenario(model, cluster, base))
    sel = estimate_training_step(Scenario(model, cluster, base.with_(recompute="selective")))
    assert float(sel.step_time_s) > float(none.step_time_s)  # the rerun is priced
    one = layer_forward(model, 1, 1, False, 2.0)
    core = one.scores.flops + one.context.flops
    redo = 64 * model.layers * one.mean_causal_fraction * core
    assert float(sel.executed_flops_per_step - sel.useful_flops_per_step) == pytest.approx(redo, rel=1e-9)
    assert float(sel.attention_recompute_flops_per_step) == pytest.approx(redo, rel=1e-9)  # computed once, a field
    from shardwise.engines.simulated import simulate_training_step

    simulated = simulate_training_step(sel.scenario, records=False).estimate
    assert float(simulated.executed_flops_per_step) == float(sel.executed_flops_per_step)  # the closed form's
    assert float(sel.hfu) > float(sel.mfu)
    assert float(sel.hardware_flops_per_step) == pytest.approx(float(none.hardware_flops_per_step), rel=1e-12)
    mlp_only = estimate_training_step(
        Scenario(model, cluster, base.with_(recompute="selective", recompute_modules=("mlp",)))
    )
    assert float(mlp_only.executed_flops_per_step) == pytest.approx(float(mlp_only.useful_flops_per_step), rel=1e-12)


def test_maxtext_flops_count_is_maxtexts_2024_formula():
    """MaxText's TFLOP/s (A3 README, efb6d9e4) count 6 N per token with the embeddings and the
    causal half of the attention square: Llama-2-7B at s = 4096 by hand, and 5.3% below Megatron's
    count (ours), which leaves the input embedding out and counts the whole square."""
    from shardwise.analyses import public_runs as pr
    from shardwise.engines.training_flops import flops_per_step, maxtext_flops_per_step

    model = presets.model("llama2-7b")
    s, h, layers, ffn, vocab = 4096, 4096, 32, 11008, 32000
    n = layers * (4 * h * h + 3 * h * ffn + 2 * h) + 2 * vocab * h + h  # weights, norms, both tables
    by_hand = 6 * n * s + 12 * 32 * layers * 128 * s * s / 2
    assert float(maxtext_flops_per_step(model, 1)) == pytest.approx(by_hand, rel=1e-9)
    rows = {r["id"]: r for r in pr.raw_rows()}
    row = rows["PUB-1051"]  # 1 x A3, 492 TFLOP/s per GPU by MaxText's count
    scn = pr.scenario_for(row)
    megatron = float(flops_per_step(scn)[0])
    maxtext = pr.source_flops_per_step(row, scn, megatron)
    assert maxtext / megatron == pytest.approx(0.947, abs=0.002)
    assert pr.measured_step_s(row, maxtext) == pytest.approx(maxtext / (492e12 * 8))
    other = rows["PUB-0411"]  # a step time: the count is not read, Megatron's stands
    assert pr.source_flops_per_step(other, scn, megatron) == megatron


def test_megatron_deepspeed_rows_convert_with_its_calculators_eq3():
    """Megatron-DeepSpeed's throughput_calculator (megatron/utils.py@cc3a94c6) counts
    24 f B s l h^2 (1 + s/6h + V/16lh): its logit term is 4.5 B s h V on 3 passes where ours is 6.
    The GPT-1.3B rebase row (PUB-1001, s 2048, h 2048, 24 layers, V 50304) by hand: our count is
    1.7% above the source's, and the derived step uses the source's."""
    from shardwise.analyses import public_runs as pr
    from shardwise.engines.training_flops import flops_per_step

    rows = {r["id"]: r for r in pr.raw_rows()}
    row = rows["PUB-1001"]
    scn = pr.scenario_for(row)
    b, s, h, layers, vocab = int(row["gbs"]), 2048, 2048, 24, 50304
    by_hand = 72 * b * s * layers * h * h * (1 + s / (6 * h) + vocab / (16 * layers * h))
    ours = float(flops_per_step(scn)[0])
    source = pr.source_flops_per_step(row, scn, ours)
    assert source == pytest.approx(by_hand, rel=1e-12)
    assert ours / source == pytest.approx(1 + (vocab / (12 * layers * h) - vocab / (16 * layers * h)) / (
        1 + s / (6 * h) + vocab / (16 * layers * h)), rel=1e-3)  # fmt: skip
    assert pr.measured_step_s(row, source) == pytest.approx(by_hand / (float(row["measured"]) * 1e12 * 16))
