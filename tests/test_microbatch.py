"""What a stage pays per micro-batch by software stack (physics.microbatch): DeepSpeed's bf16
gradient accumulation (a cast then an add, 18 bytes per weight) and its pipeline engine's
sends and receives one after another (4 transfers per micro-batch against Megatron's 2)."""

from __future__ import annotations

import pytest

from script_module import load_script
from shardwise import presets
from shardwise.engines.simulated import simulate_training_step
from shardwise.engines.stage_ends import EMBEDDING_KERNELS, embedding_cost, head_cost
from shardwise.engines.tp_overlap import tp_comm
from shardwise.engines.training import estimate_training_step
from shardwise.engines.training_stages import PIPELINE_SYNC_S, micro_batch_stages, stage_sends_per_micro_batch_s
from shardwise.errors import SpecError
from shardwise.physics.collectives import Fabric
from shardwise.physics.compute import linear_times, memory_s
from shardwise.physics.flops import CROSS_ENTROPY_FP32_BYTES_PER_LOGIT, gemm
from shardwise.physics.microbatch import CAST_THEN_ADD_BYTES, MAIN_GRAD_ADD_BYTES, pipeline_transfers
from shardwise.physics.stack import MEGATRON_DEEPSPEED_LOSS_BYTES_PER_LOGIT
from shardwise.physics.topology import placement
from shardwise.presets import _framework_from_dict
from shardwise.specs import Plan, Scenario

A100 = presets.gpu("a100-sxm4-80gb")


def _scenario(framework: str, micro_batch: int = 1, **over: object) -> Scenario:
    """A 176B model (hidden 14336, 70 layers) at tp 4, pp 12, dp 8 on 48 DGX A100, batch 2048."""
    model = presets.model("gpt3-175b", layers=70, hidden=14336, heads=112, seq_len=2048)
    fw = presets.framework(framework)
    fw.pop("zero_stage")
    fw.update(over)
    plan = Plan(tp=4, pp=12, dp=8, global_batch=2048, micro_batch=micro_batch, recompute="full", **fw)
    return Scenario(model, presets.system("dgx-a100", nodes=48), plan)


def test_deepspeed_bf16_accumulation_moves_eight_bytes_per_weight_more_than_megatrons_add():
    """hp_grad.add_(lp.grad.to(fp32)): read 2, write 4, then read 4 + 4, write 4 = 18 bytes;
    Megatron's main_grad.add_(grad) reads 2 + 4 and writes 4 = 10."""
    assert CAST_THEN_ADD_BYTES == 2 + 4 + 4 + 4 + 4 and MAIN_GRAD_ADD_BYTES == 2 + 4 + 4
    g = gemm(2048, 10752, 14336 // 4, 2.0)
    megatron = linear_times(g, A100, "bf16", False, MAIN_GRAD_ADD_BYTES).weight_grad_s
    deepspeed = linear_times(g, A100, "bf16", False, CAST_THEN_ADD_BYTES).weight_grad_s
    extra = memory_s(8.0 * g.k * g.n, A100) - A100.kernel_launch_s
    assert deepspeed - megatron == pytest.approx(extra)
    # fused accumulation (in the GEMM's epilogue) ignores the unfused path's bytes
    assert linear_times(g, A100, "bf16", True, CAST_THEN_ADD_BYTES) == linear_times(g, A100, "bf16", True)


def test_serial_sends_and_receives_cost_four_transfers_a_micro_batch():
    assert pipeline_transfers(True, True) == 4 and pipeline_transfers(False, True) == 2
    assert pipeline_transfers(True, False) == 2  # sends beside compute are not on the stage's time
    scn = _scenario("megatron-deepspeed")
    serial = stage_sends_per_micro_batch_s(scn, 1e-3)
    paired = stage_sends_per_micro_batch_s(_scenario("megatron-deepspeed", p2p_serial=False), 1e-3)
    sync = 2 * PIPELINE_SYNC_S  # the preset's device syncs (ThroughputTimer.start per forward pass)
    assert serial == pytest.approx(4e-3 + sync) and paired == pytest.approx(2e-3 + sync)


def test_the_deepspeed_preset_states_its_per_micro_batch_costs():
    fw = presets.framework("megatron-deepspeed")
    assert fw["unfused_accumulate_bytes"] == CAST_THEN_ADD_BYTES and fw["p2p_serial"] is True
    assert "p2p_serial" not in presets.framework("megatron-core")  # Megatron's: paired, fused
    base = {k: v for k, v in presets.raw("frameworks")["megatron-deepspeed"].items() if k != "unfused_accumulate_bytes"}
    with pytest.raises(SpecError, match="unfused_accumulate_bytes"):
        _framework_from_dict("mine", {**base, "unfused_accumulate_bytes": "lots"})
    with pytest.raises(SpecError, match="unfused_accumulate_bytes"):
        Plan(unfused_accumulate_bytes=-1.0)


def test_deepspeeds_per_micro_batch_costs_fall_hardest_on_micro_batch_1():
    """At one global batch the costs paid per micro-batch shrink as the micro-batch grows: they
    widen the gap between micro-batch 1 and 2 (Narayanan et al. 2021 Fig. 16's direction)."""

    def step(mb: int, **over: object) -> float:
        return float(estimate_training_step(_scenario("megatron-deepspeed", mb, **over)).step_time_s)

    megatron_like = {"unfused_accumulate_bytes": MAIN_GRAD_ADD_BYTES, "p2p_serial": False}
    gap = step(1) - step(2)
    assert gap > step(1, **megatron_like) - step(2, **megatron_like) > -1.0
    assert step(1) > step(1, **megatron_like)


@pytest.mark.parametrize("micro_batch", [1, 4])
def test_the_simulator_and_the_closed_form_agree_on_deepspeeds_pipeline(micro_batch):
    scn = _scenario("megatron-deepspeed", micro_batch)
    closed = float(estimate_training_step(scn).step_time_s)
    simulated = float(simulate_training_step(scn).estimate.step_time_s)
    assert simulated == pytest.approx(closed, rel=0.01)


def test_the_megatron_deepspeed_preset_reads_deepspeeds_pipeline_engine():
    """What Megatron-DeepSpeed's and DeepSpeed's (v0.6-v0.9.5) code does: Megatron's async TP
    gradient all-reduce off under DeepSpeed (megatron/arguments.py), activations and gradients
    sent partitioned over the TP ranks (engine.py is_pipe_partitioned), a device sync per forward
    pass (ThroughputTimer.start), the gradient all-reduce after the flush (TrainSchedule), and the
    materialised attention core unless --use-flash-attn* is given."""
    fw = presets.framework("megatron-deepspeed")
    assert fw["async_tp_grad"] is False and fw["overlap_grad_reduce"] is False
    assert fw["scatter_gather"] is True and fw["pipeline_sync"] is True
    assert fw["flash_attention"] is False
    assert "unfused_accumulate_bytes_fp16" not in fw  # not a Plan field


def test_flash_attention_follows_the_framework_unless_given():
    from shardwise.requests.training import TrainingRequest

    def flash(**over: object) -> bool:
        base = {"model": "gpt-13b", "system": "dgx-a100", "num_gpus": 64, "tp": 4, "pp": 8, "global_batch": 64}
        return bool(TrainingRequest(**{**base, **over}).scenario().plan.flash_attention)

    assert flash() is True  # megatron-core
    assert flash(framework="megatron-deepspeed") is False
    assert flash(framework="megatron-deepspeed", flash_attention=True) is True
    assert flash(framework="megatron-core", flash_attention=False) is False


def test_deepspeed_fp16_accumulates_in_sixteen_bits():
    """ZeRO 0/1 in fp16 leaves the accumulation to autograd: param.grad += grad, read 2 + 2 and
    write 2 bytes per weight, against the bf16 optimizer's cast-then-add 18."""
    from shardwise.physics.microbatch import AUTOGRAD_FP16_ADD_BYTES
    from shardwise.requests.training import TrainingRequest

    assert AUTOGRAD_FP16_ADD_BYTES == 2 + 2 + 2
    assert presets.framework_accumulate_bytes("megatron-deepspeed", "fp16") == AUTOGRAD_FP16_ADD_BYTES
    assert presets.framework_accumulate_bytes("megatron-deepspeed", "bf16") == CAST_THEN_ADD_BYTES
    assert presets.framework_accumulate_bytes("megatron-core", "fp16") is None
    base = {"model": "gpt-13b", "num_gpus": 128, "tp": 4, "pp": 8, "global_batch": 1024}
    # V100 (dgx-2) has no BF16 (`Gpu.bf16`): the bf16 run on A100s
    for system, precision, expected in (
        ("dgx-2", "fp16", AUTOGRAD_FP16_ADD_BYTES),
        ("dgx-a100", "bf16", CAST_THEN_ADD_BYTES),
    ):
        req = TrainingRequest(**base, system=system, framework="megatron-deepspeed", precision=precision)
        assert float(req.scenario().plan.unfused_accumulate_bytes) == expected
    raw = presets.raw("frameworks")["megatron-deepspeed"]
    with pytest.raises(SpecError, match="unfused_accumulate_bytes_fp16"):
        _framework_from_dict("mine", {**raw, "unfused_accumulate_bytes_fp16": 100})


def test_megatron_deepspeed_public_rows_run_as_their_code_does():
    """The GPT-3 13B rows (V100, Megatron-DeepSpeed examples_deepspeed/rebase) materialise the
    attention scores (FlashAttention needs sm80+) and pay more for it; a row that states
    FlashAttention gets it; a ZeRO-3 row (DeepSpeed's own engine) reduces during the backward."""
    from shardwise.analyses import public_stacks
    from shardwise.analyses.public_validation import raw_rows, request_for

    rows = {r["id"]: r for r in raw_rows()}
    thirteen = request_for(rows["PUB-0999"]).scenario()
    assert not bool(thirteen.plan.flash_attention)
    materialised = float(estimate_training_step(thirteen).step_time_s)
    flash = float(
        estimate_training_step(
            Scenario(thirteen.model, thirteen.cluster, thirteen.plan.with_(flash_attention=True))
        ).step_time_s
    )
    assert materialised > 1.05 * flash
    _, stated = public_stacks.execution(rows["PUB-1003"])  # attention=flash-attn-1
    assert stated["flash_attention"] is True
    _, zero3 = public_stacks.execution(rows["PUB-0995"])
    assert zero3["overlap_grad_reduce"] is True


def test_megatron_deepspeeds_loss_moves_fifty_two_bytes_a_logit():
    """GPTModelPipe's float16_to_fp32 (2 + 4), then Megatron's unfused vocab-parallel loss: max 4,
    sub_ 8, exp 8, sum 4, div_ 8; backward mul_ 8 and the cast back (4 + 2)."""
    assert MEGATRON_DEEPSPEED_LOSS_BYTES_PER_LOGIT == 52.0
    assert presets.framework("megatron-deepspeed")["loss_bytes_per_logit"] == MEGATRON_DEEPSPEED_LOSS_BYTES_PER_LOGIT
    scn = _scenario("megatron-deepspeed")
    fused = _scenario("megatron-deepspeed", loss_bytes_per_logit=0.0)
    comm = tp_comm(scn, Fabric.of(scn.cluster), placement(scn.plan, scn.cluster.gpus_per_node)["tp"])
    own, base = head_cost(scn, comm), head_cost(fused, comm)
    logits = scn.model.seq_len * scn.model.vocab / scn.plan.tp  # micro-batch 1
    extra = memory_s((52.0 - (2.0 + CROSS_ENTROPY_FP32_BYTES_PER_LOGIT)) * logits, A100) - A100.kernel_launch_s
    assert own.compute_forward_s - base.compute_forward_s == pytest.approx(extra)


def test_the_embeddings_dense_gradient_is_zero_filled_then_accumulated_by_the_stack():
    """embedding_dense_backward writes a zeroed vocab/t x h table in 16 bits (2 bytes a weight),
    which the stack then adds to its accumulator: DeepSpeed bf16 18 bytes, Megatron's add 10."""
    scn = _scenario("megatron-deepspeed")
    megatron_add = _scenario("megatron-deepspeed", unfused_accumulate_bytes=MAIN_GRAD_ADD_BYTES)
    comm = tp_comm(scn, Fabric.of(scn.cluster), placement(scn.plan, scn.cluster.gpus_per_node)["tp"])
    table = scn.model.vocab * scn.model.hidden / scn.plan.tp
    act = 2.0 * scn.model.seq_len * scn.model.hidden  # micro-batch 1, 16 bits
    own = embedding_cost(scn, comm).compute_backward_s
    assert own == pytest.approx(
        memory_s(2 * act + (2.0 + CAST_THEN_ADD_BYTES) * table, A100, kernels=EMBEDDING_KERNELS)
    )
    added = embedding_cost(megatron_add, comm).compute_backward_s
    assert own - added == pytest.approx(memory_s(8.0 * table, A100) - A100.kernel_launch_s)


def test_a_bf16_gradient_buffer_takes_the_unfused_add_of_six_bytes_in_every_linear():
    """Into a bf16 main_grad (`Plan.grad_reduce_bf16`) the unfused add reads 2 + 2 and writes 2:
    the layers' weight gradients move 4 bytes a weight less than Megatron's fp32 add (10), as the
    embedding's table does; with fused accumulation the layers do not read the unfused bytes."""
    from shardwise.engines.costs import layer_cost
    from shardwise.physics.microbatch import BF16_MAIN_GRAD_ADD_BYTES

    assert BF16_MAIN_GRAD_ADD_BYTES == 2 + 2 + 2
    fp32 = _scenario("megatron-core", grad_accumulation_fusion=False, unfused_accumulate_bytes=MAIN_GRAD_ADD_BYTES)
    bf16 = Scenario(fp32.model, fp32.cluster, fp32.plan.with_(grad_reduce_bf16=True))
    comm = tp_comm(fp32, Fabric.of(fp32.cluster), placement(fp32.plan, fp32.cluster.gpus_per_node)["tp"])
    (a, _), (b, _) = layer_cost(fp32, comm), layer_cost(bf16, comm)
    h, f, t = fp32.model.hidden, fp32.model.ffn_hidden, fp32.plan.tp
    weights = (3 * h * h / t, h * h / t, h * f / t, f * h / t)  # QKV, attention output, MLP up, down
    saved = sum(memory_s(10.0 * w, A100) - memory_s(6.0 * w, A100) for w in weights)
    assert a.compute_backward_s - b.compute_backward_s == pytest.approx(saved)
    fused = fp32.plan.with_(grad_accumulation_fusion=True)
    (c, _), (d, _) = (
        layer_cost(Scenario(fp32.model, fp32.cluster, p), comm) for p in (fused, fused.with_(grad_reduce_bf16=True))
    )
    assert c.compute_backward_s == d.compute_backward_s


def _trend_example():
    """examples/microbatch_trend.py as a module (its per-micro-batch split of a stage's time)."""
    return load_script("examples/microbatch_trend.py", "microbatch_trend")


def test_wave_quantisation_is_priced_per_micro_batch():
    """Narayanan et al. 2021 Table 1's 76B (hidden 10240) at tp 8: the QKV GEMM (N = 3 x 10240 / 8
    = 3840) of one 2048-token micro-batch makes 240 tiles of 256 x 128 on 108 SMs (2.2 waves), four micro-batches
    at once 960 (8.9); the MLP's first GEMM (N = 5120) makes 320 (2.96 waves) and fills its last
    one. The GEMMs are priced at M = b s rows, so micro-batch 1 pays for its idle last wave."""
    per_sequence = {}
    for mb in (1, 4):
        q = linear_times(gemm(2048 * mb, 3840, 10240, 2.0), A100, "fp16")
        u = linear_times(gemm(2048 * mb, 5120, 10240, 2.0), A100, "fp16")
        per_sequence[mb] = (q.forward_s / mb, u.forward_s / mb)
    assert per_sequence[1][0] > 1.05 * per_sequence[4][0]
    assert per_sequence[1][1] == pytest.approx(per_sequence[4][1], rel=0.02)


@pytest.mark.parametrize("layout", ["fig16", "deepspeed_176b"])
def test_the_per_micro_batch_parts_of_a_stage_add_up_and_shrink_per_sequence(layout):
    """examples/microbatch_trend.py --costs: the fullest middle stage's time per micro-batch is
    its GEMMs, other kernels, TP collectives, weight-gradient accumulation and sends; the
    accumulation is paid once per micro-batch (a quarter per sequence at micro-batch 4), the
    GEMMs per sequence fall only by their waves (a few per cent)."""
    trend = _trend_example()
    model, cluster, plan = getattr(trend, layout)()
    batch = 512 if layout == "fig16" else 2048
    parts = {mb: trend.stage_parts_s(Scenario(model, cluster, plan(batch, mb))) for mb in (1, 4)}
    one = Scenario(model, cluster, plan(batch, 1))
    stages, _ = micro_batch_stages(one)
    own = {k: v for k, v in parts[1].items() if k != "sends, syncs"}
    assert sum(own.values()) == pytest.approx(float(stages.middle.total_s))
    assert parts[4]["accumulation"] == pytest.approx(parts[1]["accumulation"], rel=1e-3)
    assert parts[1]["accumulation"] > 0 and parts[1]["sends, syncs"] > 0
    gemms_1, gemms_4 = parts[1]["GEMMs"], parts[4]["GEMMs"] / 4
    assert gemms_4 < gemms_1 < 1.10 * gemms_4


def test_the_figure_16_gemms_by_shape():
    """examples/microbatch_trend.py --gemms: the 91B layer's four linear GEMMs at tp 8 (the sc21
    script's hidden 15360: N x K of QKV 5760 x 15360) at M = 2048 b, under the A100's 312 TFLOP/s;
    the weight gradients, whose K is the micro-batch's tokens, gain the most from a larger one."""
    rates = _trend_example().gemm_rates()
    assert rates[1][0][1] == "2048 x 5760 x 15360" and rates[8][0][1] == "16384 x 5760 x 15360"
    for mb, rows in rates.items():
        assert len(rows) == 4 and all(0.0 < r <= 312.0 for row in rows for r in row[2:]), mb
    for one, eight in zip(rates[1], rates[8], strict=True):
        assert eight[4] > one[4]  # weight gradient: K = b s
    gain = [eight[4] / one[4] - 1.0 for one, eight in zip(rates[1], rates[8], strict=True)]
    assert max(gain) < 0.10  # a few per cent


def test_the_trend_example_refuses_an_unknown_flag(monkeypatch, capsys):
    trend = _trend_example()
    monkeypatch.setattr("sys.argv", ["microbatch_trend.py", "--cost"])
    with pytest.raises(SystemExit) as stop:
        trend.main()
    assert stop.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1
