"""LoRA fine-tuning (physics.lora, Plan.lora_rank): frozen base weights, trainable adapters."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from shardwise import presets
from shardwise.engines.simulated import simulate_training_step
from shardwise.engines.tp_overlap import TpComm
from shardwise.engines.training import estimate_training_step
from shardwise.engines.training_flops import flops_per_step
from shardwise.errors import SpecError
from shardwise.physics.compute import layer_times, memory_s
from shardwise.physics.flops import layer_forward
from shardwise.physics.lora import adapter_params, lora_layer_times, norm_returned
from shardwise.specs import Plan, Scenario


def _scenario(rank: int = 32, **plan: object) -> Scenario:
    model = presets.model("llama3-8b", seq_len=4096)
    fields = {"tp": 2, "pp": 2, "dp": 2, "global_batch": 32, "sequence_parallel": True, **plan}
    return Scenario(model, presets.system("dgx-h100"), Plan(lora_rank=rank, **fields))  # type: ignore[arg-type]


def test_adapter_parameters_are_the_rank_times_each_targets_in_and_out():
    """Llama 2 7B, tp=1: r (k + n) for QKV (4096 -> 12288), proj (4096 -> 4096), the gated MLP
    up (4096 -> 2 x 11008) and down (11008 -> 4096)."""
    fwd = layer_forward(presets.model("llama2-7b"), 1, 1, False, 2.0)
    expected = 32 * ((4096 + 12288) + (4096 + 4096) + (4096 + 22016) + (11008 + 4096))
    assert adapter_params(fwd, 32) == expected
    # under TP each GPU keeps the split side of each adapter
    assert adapter_params(layer_forward(presets.model("llama2-7b"), 1, 2, False, 2.0), 32) < expected


def test_the_base_layers_compute_no_weight_gradient_and_the_adapters_add_little():
    gpu = presets.gpu("h100-sxm5-80gb")
    fwd = layer_forward(presets.model("llama3-70b", seq_len=4096), 1, 2, True, 2.0)
    full = layer_times(fwd, gpu, "bf16", True)
    lora = lora_layer_times(full, fwd, 16, gpu, "bf16")
    for name in ("qkv", "proj", "up", "down"):
        assert getattr(lora, name).weight_grad_s == 0.0
        assert getattr(lora, name).input_grad_s == getattr(full, name).input_grad_s  # dX still flows
    assert 0 < lora.weight_grad_s < 0.05 * full.weight_grad_s  # the adapters' own, skinny
    assert full.forward_s < lora.forward_s < 1.3 * full.forward_s
    assert lora.backward_s < full.backward_s
    assert lora_layer_times(full, fwd, 0, gpu, "bf16") is full


def test_a_lora_step_is_faster_and_keeps_gradients_and_optimizer_state_only_for_the_adapters():
    full, lora = (estimate_training_step(_scenario(r)) for r in (0, 32))
    assert float(lora.step_time_s) < float(full.step_time_s)
    assert float(lora.memory.weights_bytes) == pytest.approx(float(full.memory.weights_bytes))
    assert float(lora.memory.gradients_bytes) < 0.02 * float(full.memory.gradients_bytes)
    assert float(lora.memory.optimizer_bytes) < 0.02 * float(full.memory.optimizer_bytes)
    assert float(lora.breakdown.optimizer_s) < 0.05 * float(full.breakdown.optimizer_s)
    assert float(lora.breakdown.dp_comm_s) <= float(full.breakdown.dp_comm_s)
    # model FLOPs: one pass of the linear layers' FLOPs less (no weight gradients)
    model_full, _ = flops_per_step(_scenario(0))
    model_lora, _ = flops_per_step(_scenario(32))
    assert 0.6 < float(model_lora) / float(model_full) < 0.75


def test_a_higher_rank_never_makes_the_step_faster():
    times = [float(estimate_training_step(_scenario(r)).step_time_s) for r in (8, 16, 32, 64, 256)]
    assert times == sorted(times)


def test_zero3_gathers_the_frozen_weights_too():
    """ZeRO-3 gathers every weight before use, trained or not; ZeRO-1 gathers only the updated
    adapters after the optimizer."""
    z3 = estimate_training_step(_scenario(32, tp=1, pp=1, dp=8, zero_stage=3, sequence_parallel=False))
    z1 = estimate_training_step(_scenario(32, tp=1, pp=1, dp=8, zero_stage=1, sequence_parallel=False))
    dp3 = float(z3.breakdown.dp_comm_s) + float(z3.hidden_comm_s["dp_comm"])
    dp1 = float(z1.breakdown.dp_comm_s) + float(z1.hidden_comm_s["dp_comm"])
    assert dp3 > 100 * dp1


def test_ranks_priced_together_cost_what_each_costs_alone():
    ranks = np.array([0, 8, 32, 0])
    together = estimate_training_step(_scenario(ranks))  # type: ignore[arg-type]
    alone = [float(estimate_training_step(_scenario(int(r))).step_time_s) for r in ranks]
    assert np.asarray(together.step_time_s) == pytest.approx(alone, rel=1e-12)


def test_the_simulator_agrees_with_the_closed_form():
    scn = _scenario(32, schedule="1f1b")
    simulated = float(simulate_training_step(scn).estimate.step_time_s)
    assert simulated == pytest.approx(float(estimate_training_step(scn).step_time_s), rel=0.02)


def test_lora_is_not_modelled_for_a_mixture_of_experts():
    scn = Scenario(
        presets.model("mixtral-8x7b"),
        presets.system("dgx-h100"),
        Plan(tp=1, ep=8, dp=8, global_batch=64, lora_rank=16),
    )
    with pytest.raises(SpecError, match="--lora-rank with a mixture of experts"):
        estimate_training_step(scn)
    with pytest.raises(SpecError, match="lora_rank"):
        replace(scn.plan, lora_rank=-1).__post_init__()


def test_predict_and_plan_take_a_rank(cli):
    args = ["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--tp", "2", "--global-batch", "32"]
    code, out, _ = cli([*args, "--lora-rank", "16"])
    assert code == 0 and "LoRA rank 16 (base weights frozen)" in " ".join(out.split())
    lora, full = (json.loads(cli([*args, *extra, "--json"])[1]) for extra in (["--lora-rank", "16"], []))
    assert lora["step_time_s"] < full["step_time_s"]
    code, _, err = cli([*args, "--lora-rank", "-1"])
    assert code == 2 and "--lora-rank" in err and "Traceback" not in err
    code, out, _ = cli(
        ["plan", "--model", "llama3-8b", "--system", "dgx-h100", "--global-batch", "32", "--lora-rank", "8"]
    )
    assert code == 0 and "LoRA rank 8, base weights frozen" in " ".join(out.split())


def test_public_lora_runs_are_priced_and_reported_apart():
    from shardwise.analyses import public_validation as pv

    rows = [r for r in pv.validate_public() if r.lora and not r.skip]
    assert len(rows) >= 19 and {r.source for r in rows} >= {"NVIDIA-NeMo Megatron-Bridge", "NVIDIA-NeMo Automodel"}
    by_id = {r.run_id: r for r in rows}
    # each row priced with its recipe's rank, targets and data (analyses.public_lora)
    assert by_id["PUB-0069"].label.endswith("LoRA r16 qkv")  # Megatron-Bridge 26.06: dim 16, linear_qkv
    assert by_id["PUB-0678"].label.endswith("LoRA r8 qkv packed 226")  # NeMo 2 llama3_8b, packed SQuAD
    assert by_id["PUB-0855"].label.endswith("LoRA r16")  # Automodel: match_all_linear, dim 16
    names = [s.name for s in pv.summaries("holdout")]
    assert pv.LORA_TABLE in names
    dense = next(s for s in pv.summaries("holdout") if s.name == "all public sources")
    assert dense.rows == len(
        [r for r in pv.validate_public() if r.split == "holdout" and not (r.skip or r.moe or r.lora)]
    )


def test_fp8_frozen_layers_quantise_row_wise_only():
    """Transformer Engine makes the column-wise FP8 copies (input, output gradient) only for a
    weight gradient: a LoRA layer's output-gradient casts move 3 bytes per element instead of 4
    (less the same kernel launches). In the forward pass every input is cast row-wise, 3 bytes an
    element, one kernel each: with adapters on QKV and MLP up, PEFT has their LayerNormLinear return
    the norm output (`return_layernorm_output`, Megatron-Bridge peft/utils.py), so the norm writes 16
    bits and TE casts it like any input (TE 2.x `with_quantized_norm = fp8 and not
    return_layernorm_output`); with adapters on proj and MLP down alone, the norms still write the
    FP8 inputs of QKV and MLP up (delayed scaling: no cast, no transpose without a weight gradient)
    and only proj's and MLP down's inputs are cast, in 2 kernels."""
    gpu = presets.gpu("h100-sxm5-80gb")
    fwd = layer_forward(presets.model("llama3-8b", seq_len=4096), 1, 1, False, 2.0)
    full = layer_times(fwd, gpu, "fp8", True)
    returned = norm_returned(fwd, 16)  # the default targets: all four
    assert returned == (1.0, 1.0)
    lora = lora_layer_times(layer_times(fwd, gpu, "fp8", True, norm_returned=returned), fwd, 16, gpu, "fp8")
    launch = 4 * gpu.kernel_launch_s
    assert lora.cast_b_s - launch == pytest.approx(0.75 * (full.cast_b_s - launch), rel=1e-9)
    cast_in = sum(g.m * g.k * g.batch for g in fwd.gemms)
    assert lora.cast_f_s == pytest.approx(memory_s(3.0 * cast_in, gpu, kernels=4), rel=1e-9)
    rows = "proj,fc2"
    assert norm_returned(fwd, 16, rows) == (0.0, 0.0)
    lora_rows = lora_layer_times(full, fwd, 16, gpu, "fp8", targets=rows)
    rows_in = sum(g.m * g.k * g.batch for g in (fwd.attn_out, fwd.mlp_down))
    assert lora_rows.cast_f_s == pytest.approx(memory_s(3.0 * rows_in, gpu, kernels=2), rel=1e-9)
    bf16 = layer_times(fwd, gpu, "bf16", True)
    assert lora_layer_times(bf16, fwd, 16, gpu, "bf16").cast_f_s == 0.0


def test_lora_on_norm_fed_layers_keeps_the_16_bit_norm_write():
    """Under FP8 delayed scaling TE's norm writes 1 byte an element of the QKV and MLP-up inputs
    (`physics.casts.norm_fp8_saved_bytes`), but not where LoRA wraps the layer (its norm output is
    returned in 16 bits): the forward element-wise work keeps 2 bytes there, per wrapped layer; in 16
    bits nothing changes. The plan's LoRA targets decide which (`engines.costs.plan_layer_times`)."""
    from shardwise.engines.costs import plan_layer_times
    from shardwise.physics.casts import NORM_FP8_WRITE_SAVED_BYTES_PER_ELEMENT

    gpu = presets.gpu("h100-sxm5-80gb")
    fwd = layer_forward(presets.model("llama3-8b", seq_len=4096), 1, 1, False, 2.0)
    stream = gpu.memory_bandwidth_bytes_per_s * gpu.memory_efficiency
    plain = layer_times(fwd, gpu, "fp8", True)
    for returned, layers in (
        ((1.0, 0.0), (fwd.qkv,)),
        ((0.0, 1.0), (fwd.mlp_up,)),
        ((1.0, 1.0), (fwd.qkv, fwd.mlp_up)),
    ):
        lt = layer_times(fwd, gpu, "fp8", True, norm_returned=returned)
        kept = NORM_FP8_WRITE_SAVED_BYTES_PER_ELEMENT * sum(g.m * g.k * g.batch for g in layers)
        assert lt.elementwise_s - plain.elementwise_s == pytest.approx(kept / stream, rel=1e-9)
        assert lt.elementwise_bwd_s == plain.elementwise_bwd_s
    bf16 = layer_times(fwd, gpu, "bf16", True)
    assert layer_times(fwd, gpu, "bf16", True, norm_returned=(1.0, 1.0)) == bf16
    plan = Plan(micro_batch=1, precision="fp8", fp8_recipe="te", lora_rank=16, lora_targets="qkv")
    assert plan_layer_times(fwd, gpu, plan) == layer_times(fwd, gpu, "fp8", True, norm_returned=(1.0, 0.0))


def test_skinny_adapter_gemms_stream_their_wide_operand_at_memory_speed():
    """Rank 32 leaves each adapter GEMM memory-bound (about 32 FLOP per byte against the H100's
    ridge of ~295): A = X (m x k) @ (k x r) costs what reading X costs, not 128-wide output tiles."""
    from shardwise.physics.compute import linears_times
    from shardwise.physics.flops import gemm
    from shardwise.physics.lora import adapter_gemms, adapter_times

    gpu = presets.gpu("h100-sxm5-80gb")
    base = gemm(4096, 28672, 4096, 2.0)  # Llama 3 8B's MLP up, one 4096-token micro-batch
    a, b = adapter_gemms(base, 32, 2.0)
    times = adapter_times([a, b], gpu, "bf16")
    stream = gpu.memory_bandwidth_bytes_per_s * gpu.memory_efficiency
    for g, t in zip((a, b), times, strict=True):
        assert t.forward_s == pytest.approx(g.bytes / stream + gpu.kernel_launch_s)
    tiled = linears_times([a, b], gpu, "bf16")
    assert all(t.forward_s <= u.forward_s for t, u in zip(times, tiled, strict=True))
    # (X A) B: 4096 x 28672 outputs with K = 32, where the tile model pays a fill per wave
    assert times[1].forward_s < 0.9 * tiled[1].forward_s


def test_targets_narrow_the_adapters_and_their_work():
    """`Plan.lora_targets`: qkv alone keeps that adapter's parameters only and drops the other
    three adapters' GEMMs and adds; the frozen layers compute no weight gradient either way."""
    gpu = presets.gpu("h100-sxm5-80gb")
    fwd = layer_forward(presets.model("llama2-7b"), 1, 1, False, 2.0)
    assert adapter_params(fwd, 32, "qkv") == 32 * (4096 + 12288)
    assert adapter_params(fwd, 32, "proj,fc2") == 32 * ((4096 + 4096) + (11008 + 4096))
    full = layer_times(fwd, gpu, "bf16", True)
    four, qkv = (lora_layer_times(full, fwd, 32, gpu, "bf16", True, t) for t in ("qkv,proj,fc1,fc2", "qkv"))
    assert qkv.forward_s < four.forward_s and qkv.weight_grad_s < four.weight_grad_s
    assert qkv.up.weight_grad_s == 0.0 and qkv.down.weight_grad_s == 0.0  # frozen without an adapter
    one, all_ = (estimate_training_step(_scenario(32, lora_targets=t)) for t in ("qkv", "fc1,qkv,proj,fc2"))
    assert float(one.step_time_s) < float(all_.step_time_s)
    assert float(one.memory.optimizer_bytes) < 0.5 * float(all_.memory.optimizer_bytes)


@pytest.mark.parametrize("bad", ["", "qkv,qkv", "qkv,mlp", "QKV", 3])
def test_bad_targets_are_one_line_errors(bad):
    with pytest.raises(SpecError, match=r"lora_targets .* is not allowed; give a comma-separated subset"):
        Plan(lora_rank=8, lora_targets=bad)  # type: ignore[arg-type]


def test_targets_are_kept_in_canonical_order():
    assert Plan(lora_targets="fc2, qkv").lora_targets == "qkv,fc2"


def test_packed_documents_shrink_the_attention_to_their_triangles():
    """s / L causal L x L triangles: the fused kernel's work is (L / s) of the unpacked share at
    L x L's causal share, and it runs at the efficiency of L-token calls (slower per FLOP), so its
    time falls by less than its work; the linear layers are unchanged."""
    gpu = presets.gpu("h100-sxm5-80gb")
    model = presets.model("llama3-8b", seq_len=4096)
    whole = layer_forward(model, 1, 1, False, 2.0)
    packed = layer_forward(model, 1, 1, False, 2.0, document_len=256)
    assert packed.causal_fraction == pytest.approx(256 / 4096 * (1 - 255 / 512))
    assert whole.document_len is None and packed.document_len == 256
    assert packed.qkv == whole.qkv and packed.mlp_up == whole.mlp_up
    a, b = (layer_times(f, gpu, "bf16", True) for f in (whole, packed))
    work = packed.causal_fraction / whole.causal_fraction
    assert work * a.attention_s < b.attention_s < 0.3 * a.attention_s
    assert work * a.attention_bwd_s < b.attention_bwd_s < 0.3 * a.attention_bwd_s
    assert b.qkv == a.qkv
    # the document as long as the sequence: the unpacked attention
    same = layer_forward(model, 1, 1, False, 2.0, document_len=4096)
    assert layer_times(same, gpu, "bf16", True).attention_s == pytest.approx(a.attention_s)


def test_a_packed_step_is_faster_and_checked():
    base = {"rank": 16, "tp": 1, "pp": 1, "dp": 8, "global_batch": 32, "sequence_parallel": False}
    whole, packed = (estimate_training_step(_scenario(**{**base, "packed_document_len": n})) for n in (0, 226))
    assert float(packed.step_time_s) < float(whole.step_time_s)
    assert float(packed.masked_attention_flops_per_step) > float(whole.masked_attention_flops_per_step)
    with pytest.raises(SpecError, match="packed_document_len 5000 is not allowed; at most the sequence length 4096"):
        estimate_training_step(_scenario(**{**base, "packed_document_len": 5000}))
    with pytest.raises(SpecError, match="packed_document_len with context parallelism is not modelled"):
        estimate_training_step(_scenario(**{**base, "dp": 4, "cp": 2, "packed_document_len": 226}))


def test_cli_takes_targets_and_packed_documents(cli):
    argv = ["predict", "--model", "llama3-8b", "--seq-len", "4096", "--system", "dgx-h100", "--tp", "1", "--pp", "1"]
    argv += ["--global-batch", "32", "--lora-rank", "8", "--lora-targets", "qkv"]
    code, out, _ = cli([*argv, "--packed-document-len", "226", "--json"])
    plan = json.loads(out)["scenario"]["plan"]
    assert code == 0 and plan["lora_targets"] == "qkv" and plan["packed_document_len"] == 226
    code, out, _ = cli([*argv, "--packed-document-len", "226"])
    assert "on qkv, packed documents of 226 tokens" in " ".join(out.split())
    code, _, err = cli([*argv, "--packed-document-len", "8192"])
    assert code == 2 and "packed_document_len 8192 is not allowed" in err and "Traceback" not in err
    code, _, err = cli([*argv[:-1], "qkv,gate"])
    assert code == 2 and "lora_targets 'qkv,gate' is not allowed" in err and len(err.strip().splitlines()) == 1


def test_pipeline_flushes_pay_one_fill_and_drain_each():
    """NeMo AutoModel runs one pipeline schedule per local batch: F flushes of m / F micro-batches
    cost F bubbles, the busy time unchanged (`engines.pipeline.pipeline_makespan_s`)."""
    from shardwise.engines.pipeline import pipeline_makespan_s

    one = pipeline_makespan_s(1.0, 1.0, 1.0, 4, 32, 2)
    eight = pipeline_makespan_s(1.0, 1.0, 1.0, 4, 32, 2, flushes=8)
    assert one == pytest.approx(32 + 3 / 2) and eight == pytest.approx(32 + 8 * 3 / 2)
    plan = {"tp": 1, "pp": 4, "dp": 2, "global_batch": 64, "sequence_parallel": False}
    whole, flushed = (estimate_training_step(_scenario(16, **plan, pipeline_flushes=f)) for f in (1, 4))
    bubble = float(flushed.breakdown.pp_bubble_s)
    assert bubble == pytest.approx(4 * float(whole.breakdown.pp_bubble_s), rel=0.01)
    assert float(flushed.step_time_s) - float(whole.step_time_s) == pytest.approx(
        bubble - float(whole.breakdown.pp_bubble_s), rel=0.05
    )
    with pytest.raises(SpecError, match="pipeline_flushes 3 is not allowed with 32 micro-batches and pp=4"):
        estimate_training_step(_scenario(16, **plan, pipeline_flushes=3))
    with pytest.raises(SpecError, match="pipeline_flushes 16 is not allowed"):  # 2 micro-batches < pp
        estimate_training_step(_scenario(16, **plan, pipeline_flushes=16))
    with pytest.raises(SpecError, match="closed form only"):
        simulate_training_step(_scenario(16, **plan, pipeline_flushes=4))
    # the rule reads the micro-batches: a layout checked at one global batch is checked again at
    # another (4 flushes of 32 micro-batches hold; of 12, three each, fewer than pp, do not)
    with pytest.raises(SpecError, match="pipeline_flushes 4 is not allowed with 12 micro-batches"):
        estimate_training_step(_scenario(16, **{**plan, "global_batch": 24}, pipeline_flushes=4))


def test_plan_searches_packed_runs_without_context_parallelism(cli):
    """Llama 3's 8192 tokens would search cp > 1, which packed documents are not priced with."""
    args = ["plan", "--model", "llama3-8b", "--system", "dgx-h100", "--global-batch", "32", "--lora-rank", "8"]
    code, out, err = cli([*args, "--lora-targets", "qkv", "--packed-document-len", "226"])
    text = " ".join(out.split())
    assert code == 0, err
    assert "(adapters on qkv); packed documents of 226 tokens" in text and " cp=2" not in text


def test_every_priced_public_lora_run_has_its_recipe():
    """No public LoRA row falls back to Megatron-Bridge's defaults silently: each priced one's
    source is in `analyses.public_lora` (rank, targets, packing, recomputation, flushes)."""
    from shardwise.analyses import public_lora
    from shardwise.analyses import public_validation as pv

    priced = {r.run_id for r in pv.validate_public() if r.lora and not r.skip}
    rows = {r["id"]: r for r in pv.raw_rows()}
    recipes = {i: public_lora.recipe(rows[i]) for i in priced}
    assert priced and all(recipes.values()), [i for i, r in recipes.items() if r is None]
    automodel_pp = [r for i, r in recipes.items() if "Automodel" in rows[i]["source"] and int(rows[i]["pp"]) > 1]
    assert automodel_pp and all(r.recompute == "full" and r.flushes >= 1 for r in automodel_pp)
    assert {r.flushes for r in automodel_pp} == {8, 2, 1}  # 70B one server 32/(4x1), two 32/(8x2); 32B 2, 1


def test_automodels_lora_rows_run_the_kernels_their_code_ran():
    """Each NeMo AutoModel row is priced with what its config ran at the commit it was first published
    at (`analyses.public_lora.AUTOMODEL_CONFIGS`): NeMoAutoModelForCausalLM before 272c9d74b gave Hugging
    Face's classes with Liger and flash-attn, the custom Llama 3.3 70B configs built the model with
    build_llama_model (eager) until 8473ee64c0 switched them to from_pretrained (AutoModel's own Llama,
    flash_attention_2), and 2013a4dd6e's configs compile each layer (LoRA and the Llama 3.1 70B
    pretraining one), the Llama LoRA ones with async TP, the Qwen2.5-32B ones without sequence
    parallelism. The expected rows are pinned."""
    from shardwise.analyses import public_lora, public_runs
    from shardwise.analyses import public_validation as pv

    rows = [r for r in pv.raw_rows() if "Automodel docs/performance-summary" in r["source"]]
    reqs = {r["id"]: public_runs.request_for(r) for r in rows if r["model"] and not public_runs.skip_reason(r)}
    pub = {f"PUB-{i:04d}" for i in range(855, 870)}
    fused = {i for i, q in reqs.items() if i in pub and q.attention_kernel == "flash2" and q.eager_kernels is False}
    assert fused == {"PUB-0856", "PUB-0857", "PUB-0858", "PUB-0860"}  # HF classes, Liger, flash-attn
    compiled = {r["id"] for r in rows if r["commit_or_version"].startswith("first 2013a4dd6e")}
    assert compiled == {"PUB-0865", "PUB-0866", "PUB-0867", "PUB-0868", "PUB-0869"}
    assert all(reqs[i].eager_kernels is False for i in compiled)
    assert {i for i in pub & set(reqs) if reqs[i].sequence_parallel is False} == {"PUB-0867", "PUB-0869"}
    assert {i for i in pub & set(reqs) if reqs[i].tp_comm_overlap} == {"PUB-0866", "PUB-0868"}  # async TP
    # AutoModel's own Llama (8473ee64c0): flash_attention_2, eager SwiGLU and rotary; build_llama_model eager
    assert all(
        reqs[i].attention_kernel == "flash2" and reqs[i].eager_kernels is not False for i in ("PUB-0861", "PUB-0862")
    )
    assert all(reqs[i].eager_kernels is not False for i in ("PUB-0855", "PUB-0859"))
    # a row without a first-seen commit is unknown: the preset's kernels, not the earliest config's
    undated = {**rows[0], "commit_or_version": "", "model": "qwen2.5-7b", "workload": "lora"}
    assert public_lora.automodel_settings(undated) == {}


def test_dgxc_lora_recipes_block_on_their_pipeline_sends():
    """NeMo 2.1's Llama 3 fine-tuning recipes add MegatronCommOverlapCallback for full fine-tuning
    only: dgxc's LoRA rows run Megatron-Core's defaults (no TP overlap, blocking batched p2p), its SFT
    rows the callback's overlaps (`analyses.public_overlap_recipes`). With blocking sends a pipeline
    whose stages sit on separate servers (dp > 1) pays the network on every send: the step grows with
    dp at a constant per-replica batch, as the published LoRA 70B rows do."""
    from shardwise.analyses import public_runs
    from shardwise.analyses import public_validation as pv

    rows = [r for r in pv.raw_rows() if "dgxc-benchmarking ft_llama3/" in r["source"]]
    for r in rows:
        req = public_runs.request_for(r)
        lora = r["workload"] == "lora"
        assert (req.overlap_p2p is False) == lora and (req.tp_comm_overlap is False) == lora, r["id"]
    priced = {x.run_id: x for x in pv.validate_public() if not x.skip}
    bf16 = [
        priced[r["id"]]
        for r in rows
        if r["workload"] == "lora" and r["model"] == "llama3-70b" and r["precision"] == "bf16"
    ]
    one, two = sorted(bf16, key=lambda x: x.num_gpus)[:2]
    assert two.predicted_step_s > one.predicted_step_s  # the sends cross servers from 16 GPUs on (published: x1.031)


def _tp_costs(scn: Scenario) -> tuple[float, float, TpComm]:
    from shardwise.engines.costs import layer_cost
    from shardwise.engines.tp_overlap import tp_comm
    from shardwise.physics.collectives import Fabric

    comm = tp_comm(scn, Fabric.of(scn.cluster), 2)
    cost, _ = layer_cost(scn, comm)
    return float(cost.tp_forward_s), float(cost.tp_backward_s), comm


def test_frozen_layers_under_sequence_parallelism_re_gather_nothing_for_a_weight_gradient():
    """Backward under SP, collectives exposed (no async TP gradient): full training pays per block
    the output-gradient gather, the input re-gather for dW and the dX reduce-scatter; LoRA (the
    base weights frozen: TE gathers only `if weight.requires_grad`) the first and last only."""
    plain = {"async_tp_grad": False, "tp_comm_overlap": False}
    _, full_b, comm = _tp_costs(_scenario(0, **plain))
    _, lora_b, _ = _tp_costs(_scenario(32, **plain))
    blocks = 2  # attention and the MLP
    assert full_b == pytest.approx(blocks * (2 * comm.all_gather + comm.reduce_scatter), rel=1e-9)
    assert lora_b == pytest.approx(blocks * (comm.all_gather + comm.reduce_scatter), rel=1e-9)


def test_fp8_lora_without_userbuffers_gathers_the_returned_norm_output_in_16_bits():
    """PEFT returns the gathered norm output of the layers it wraps (`return_layernorm_output_gathered`,
    without userbuffers): TE gathers it in 16 bits where full FP8 training gathers FP8."""
    plain = {"async_tp_grad": False, "tp_comm_overlap": False, "precision": "fp8"}
    full_f, _, comm = _tp_costs(_scenario(0, **plain))
    qkv_f, _, _ = _tp_costs(_scenario(32, lora_targets="qkv", **plain))
    both_f, _, _ = _tp_costs(_scenario(32, lora_targets="qkv,fc1", **plain))
    assert comm.gather_input < comm.all_gather  # the FP8 gather moves fewer bytes
    step = comm.all_gather - comm.gather_input
    assert qkv_f == pytest.approx(full_f + step, rel=1e-9)
    assert both_f == pytest.approx(full_f + 2 * step, rel=1e-9)
    # proj and fc2 adapters leave the norms alone
    assert _tp_costs(_scenario(32, lora_targets="proj,fc2", **plain))[0] == pytest.approx(full_f, rel=1e-12)
