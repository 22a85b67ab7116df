"""nanotron's time physics as its code runs (physics.stack): host operations per layer and
micro-batch counted from its Python linears, Triton norms and fp32 gradient accumulation; its
loss's fp32 passes; its pipeline's blocking sends and receives, each after a host sync."""

from __future__ import annotations

import dataclasses

import pytest

from shardwise import presets
from shardwise.engines.context_parallel import micro_batch_view
from shardwise.engines.costs import layer_cost
from shardwise.engines.stage_ends import head_cost
from shardwise.engines.tp_overlap import tp_comm
from shardwise.engines.training import estimate_training_step
from shardwise.errors import SpecError
from shardwise.physics.collectives import Fabric
from shardwise.physics.compute import memory_s
from shardwise.physics.flops import CROSS_ENTROPY_FP32_BYTES_PER_LOGIT, cross_entropy_bytes
from shardwise.physics.stack import (
    NANOTRON_ALL_REDUCE_LAYER_HOST_OPS,
    NANOTRON_LAYER_HOST_OPS,
    NANOTRON_LOSS_BYTES_PER_LOGIT,
    host_units,
    layer_kernels,
)
from shardwise.physics.topology import placement
from shardwise.presets import _framework_from_dict
from shardwise.presets.stack_defaults import framework_async_sp_host_ops
from shardwise.specs import Plan, Scenario


def _scenario(model: str = "llama3.2-1b", tp: int = 8, micro_batch: int = 1, **over: object) -> Scenario:
    """One DGX H100, 4096 tokens, nanotron's preset (ZeRO as given), dp filling the node, its
    linears in the example configs' mode (REDUCE_SCATTER with tp_linear_async_communication:
    sequence parallelism, async_tp_grad and that mode's 206 host units)."""
    fw = presets.framework("nanotron")
    fw.pop("zero_stage")
    fw.update(async_tp_grad=True, layer_host_ops=NANOTRON_LAYER_HOST_OPS)
    fw.update(over)
    pp = int(fw.pop("pp", 1))
    dp = 8 // (tp * pp)
    plan = Plan(tp=tp, pp=pp, dp=dp, global_batch=64 * dp, micro_batch=micro_batch, sequence_parallel=tp > 1, **fw)
    return Scenario(presets.model(model, seq_len=4096), presets.system("dgx-h100", nodes=1), plan)


def _layer(scn: Scenario):
    fabric = Fabric.of(scn.cluster)
    local = micro_batch_view(scn)
    comm = tp_comm(local, fabric, placement(scn.plan, 8)["tp"])
    return layer_cost(local, comm, kv_len=scn.model.seq_len)[0], comm


def test_the_preset_states_the_counts_of_physics_stack():
    fw = presets.framework("nanotron")
    # the default synchronous ALL_REDUCE linears: 160; sequence parallelism with async linears: 206
    assert fw["layer_host_ops"] == NANOTRON_ALL_REDUCE_LAYER_HOST_OPS == 160
    assert framework_async_sp_host_ops("nanotron") == NANOTRON_LAYER_HOST_OPS == 206
    assert framework_async_sp_host_ops("megatron-core") is None
    assert fw["loss_bytes_per_logit"] == NANOTRON_LOSS_BYTES_PER_LOGIT == 52.0
    # send_tensors / recv_tensors one at a time, each after metadata whose copies sync the host
    assert fw["p2p_serial"] is True and fw["pipeline_sync"] is True
    assert "layer_host_ops" not in presets.framework("megatron-core")


def test_host_units_weigh_each_kind_of_operation():
    # an ATen op 1, a light op 0.3, a collective call 2, a wait 1, a Triton launch 4, a Function 1
    assert host_units((1, 0, 0, 0, 0, 0)) == 1.0
    assert host_units((0, 10, 1, 1, 1, 1)) == pytest.approx(3 + 2 + 1 + 4 + 1)


def test_a_stacks_own_count_replaces_the_kernel_count_and_recompute_adds_its_forward_share():
    assert layer_kernels(False, 6) == 3 * (6 + 8)  # the fused count: 42
    assert layer_kernels(False, 6, False, 206.0) == 206.0
    # full recomputation reruns nanotron's forward, 91.3 of its 206 units (forward 91, backward 101,
    # accumulation 13): not the fused count's third (206 / 3 = 68.7)
    assert layer_kernels(False, 6, True, 206.0) == pytest.approx(206.0 + 91.3)
    assert layer_kernels(False, 6, True) == 4 * (6 + 8)  # the fused count still adds its third
    mixed = layer_kernels(False, 6, False, [0.0, 206.0])
    assert list(mixed) == [42.0, 206.0]


def test_host_bound_cells_wait_for_the_host_and_compute_bound_ones_do_not():
    """Llama 3.2 1B at tp 8, micro-batch 1: a layer's GPU work (about 0.7 ms of compute and 0.6 ms
    of exposed TP collectives) is shorter than nanotron's 206 host operations at 10 us; 8B at
    tp 2, micro-batch 4 is not."""
    small = _scenario("llama3.2-1b", tp=8)
    own, _ = _layer(small)
    gpu, _ = _layer(dataclasses.replace(small, plan=dataclasses.replace(small.plan, host_kernel_s=0.0)))
    host = NANOTRON_LAYER_HOST_OPS * small.plan.host_kernel_s
    busy = gpu.total_s  # its kernels and the exposed TP collectives, which the host does not wait for
    assert busy < host
    # the GPU waits for the host: the layer takes its host time, no less
    assert own.total_s == pytest.approx(host)
    big = _scenario("llama3-8b", tp=2, micro_batch=4)
    big_counted = dataclasses.replace(big, plan=dataclasses.replace(big.plan, layer_host_ops=0.0))
    assert _layer(big)[0] == _layer(big_counted)[0]


def test_the_loss_moves_fifty_two_bytes_a_logit():
    scn = _scenario("llama3.2-1b", tp=8)
    fused = dataclasses.replace(scn, plan=dataclasses.replace(scn.plan, loss_bytes_per_logit=0.0))
    _, comm = _layer(scn)
    own, base = head_cost(micro_batch_view(scn), comm), head_cost(micro_batch_view(fused), comm)
    e, plan = scn.plan.bytes_per_element, scn.plan
    logits = cross_entropy_bytes(scn.model, plan.micro_batch, plan.tp, e) / (e + CROSS_ENTROPY_FP32_BYTES_PER_LOGIT)
    gpu = scn.cluster.gpu
    extra = memory_s((52.0 - (e + CROSS_ENTROPY_FP32_BYTES_PER_LOGIT)) * logits, gpu) - gpu.kernel_launch_s
    assert own.compute_forward_s - base.compute_forward_s == pytest.approx(extra)


def test_nanotrons_step_is_slower_where_the_host_binds():
    """The step of a host-bound cell grows by what its layers wait for the host; a large
    micro-batch of an 8B model barely moves (its loss only)."""
    small = _scenario("llama3.2-1b", tp=8)
    before = dataclasses.replace(small.plan, layer_host_ops=0.0, loss_bytes_per_logit=0.0)
    ratio = float(estimate_training_step(small).step_time_s) / float(
        estimate_training_step(dataclasses.replace(small, plan=before)).step_time_s
    )
    assert ratio > 1.3
    big = _scenario("llama3-8b", tp=2, micro_batch=4)
    plain = dataclasses.replace(big.plan, layer_host_ops=0.0, loss_bytes_per_logit=0.0)
    ratio = float(estimate_training_step(big).step_time_s) / float(
        estimate_training_step(dataclasses.replace(big, plan=plain)).step_time_s
    )
    assert 1.0 < ratio < 1.02


@pytest.mark.parametrize(
    ("field", "value"), [("layer_host_ops", -1), ("layer_host_ops", 1e9), ("loss_bytes_per_logit", 300)]
)
def test_bad_counts_are_one_clear_error(field, value):
    with pytest.raises(SpecError, match=f"plan: {field}"):
        Plan(**{field: value})
    data = {**presets.framework("nanotron"), field: value}
    data.pop("framework")
    data.pop("host_kernel_s")
    with pytest.raises(SpecError, match=f"framework 'x': {field}"):
        _framework_from_dict("x", data)


def test_a_pipeline_handshake_costs_what_its_code_does():
    """p2p.py: per tensor sent 11.6 host units (two metadata sends, each after a copy_ that syncs,
    two asserts reading CUDA scalars), per tensor received 29.4 (about 16 reads of CUDA scalars
    into Python); 3 tensors each way across a layer boundary: 123 units on a middle stage."""
    from shardwise.physics.microbatch import (
        NANOTRON_P2P_HOST_OPS,
        NANOTRON_RECV_HOST_OPS,
        NANOTRON_SEND_HOST_OPS,
        handshake_shares,
    )

    assert (round(NANOTRON_SEND_HOST_OPS, 6), round(NANOTRON_RECV_HOST_OPS, 6)) == (11.6, 29.4)
    assert NANOTRON_P2P_HOST_OPS == presets.framework("nanotron")["p2p_host_ops"] == 123.0
    assert [float(x) for x in handshake_shares(1)] == [0.0, 0.0]
    assert [float(x) for x in handshake_shares(4)] == [0.5, 1.0]


@pytest.mark.parametrize("pp", [2, 4])
def test_handshakes_cost_every_micro_batch_of_the_slowest_stage(pp):
    scn = _scenario("llama3.2-1b", tp=1, pp=pp, micro_batch=2)
    none = dataclasses.replace(scn, plan=dataclasses.replace(scn.plan, p2p_host_ops=0.0))
    with_h, without = estimate_training_step(scn), estimate_training_step(none)
    m = scn.plan.num_micro_batches
    middle = 123.0 * scn.plan.host_kernel_s  # an end stage (the slowest here: the loss) pays half
    grew = float(with_h.step_time_s - without.step_time_s)
    # m micro-batches on the slowest stage, and the fill and drain through the others
    assert m * middle / 2 <= grew <= (m + pp - 1) * middle
    # reported with the pipeline's sends, on the slowest stage
    reported = float(with_h.breakdown.pp_p2p_s - without.breakdown.pp_p2p_s)
    assert m * middle / 2 - 1e-9 <= reported <= m * middle + 1e-9


@pytest.mark.parametrize("pp", [2, 4])
def test_the_simulator_and_the_closed_form_agree_on_nanotrons_pipeline(pp):
    from shardwise.engines.simulated import simulate_training_step

    scn = _scenario("llama3.2-1b", tp=2, pp=pp, micro_batch=2)
    closed = float(estimate_training_step(scn).step_time_s)
    simulated = float(simulate_training_step(scn).estimate.step_time_s)
    assert simulated == pytest.approx(closed, rel=0.01)


def test_the_async_linears_hide_their_gathers_beside_the_rows_a_rank_holds():
    """_ColumnLinearAsyncCommunication: the all-gather runs while the rank's own 1/t of the rows
    multiplies, then the rows before and after; _RowLinearAsyncCommunication's backward the same for
    the output gradient. What hides is at most the own rows' GEMMs; the pieces cost their slowest
    rank's time beyond the whole GEMMs."""
    from shardwise.engines.tp_overlap import own_rows_split_s
    from shardwise.physics.flops import input_gradient, layer_forward

    scn = _scenario("llama3-8b", tp=8)
    plain = dataclasses.replace(scn, plan=dataclasses.replace(scn.plan, tp_shard_overlap=False))
    (own, _), (base, _) = _layer(scn), _layer(plain)
    p, gpu = scn.plan, scn.cluster.gpu
    fwd = layer_forward(scn.model, p.micro_batch, p.tp, True, p.bytes_per_element)
    q, u = (own_rows_split_s(g, 8, gpu, "bf16") for g in (fwd.qkv, fwd.mlp_up))
    o, d = (own_rows_split_s(input_gradient(g), 8, gpu, "bf16") for g in (fwd.attn_out, fwd.mlp_down))
    saved_f, saved_b = base.tp_forward_s - own.tp_forward_s, base.tp_backward_s - own.tp_backward_s
    assert 0 < saved_f <= q[0] + u[0] + 1e-12
    assert 0 < saved_b <= o[0] + d[0] + 1e-12  # here all of them: the gathers are longer
    assert own.compute_forward_s - base.compute_forward_s == pytest.approx(q[1] + u[1])
    assert q[1] > 0 and u[1] > 0  # at tp 8 a 512-row piece fills a wave of 132 SMs less
    # what it hides is reported hidden
    assert own.tp_hidden_s - base.tp_hidden_s == pytest.approx(saved_f + saved_b)
    # userbuffers' ring exchange, where on, is what overlaps; without TP nothing changes
    ub = dataclasses.replace(scn.plan, tp_comm_overlap=True)
    ub_plain = dataclasses.replace(ub, tp_shard_overlap=False)
    assert _layer(dataclasses.replace(scn, plan=ub))[0] == _layer(dataclasses.replace(scn, plan=ub_plain))[0]
    one = _scenario("llama3-8b", tp=1)
    one_plain = dataclasses.replace(one, plan=dataclasses.replace(one.plan, tp_shard_overlap=False))
    assert _layer(one)[0] == _layer(one_plain)[0]


def test_the_pieces_of_a_gathered_gemm_cost_nothing_where_they_fill_whole_waves():
    from shardwise.engines.tp_overlap import own_rows_split_s
    from shardwise.physics.compute import gemm_s
    from shardwise.physics.flops import gemm

    gpu = presets.gpu("h100-sxm5-80gb")
    g = gemm(4096, 3584, 4096, 2.0)
    own, extra = own_rows_split_s(g, 8, gpu, "bf16")
    assert own == pytest.approx(gemm_s(gemm(512, 3584, 4096, 2.0), gpu, "bf16"))
    assert extra > 0
    big = gemm(65536, 14336, 4096, 2.0)  # tp 2: two halves of many waves each
    assert own_rows_split_s(big, 2, gpu, "bf16")[1] < 0.02 * gemm_s(big, gpu, "bf16")
    assert own_rows_split_s(g, 1, gpu, "bf16")[1] == pytest.approx(0.0, abs=1e-12)


def test_the_eager_glu_and_layout_copies_move_what_llama_py_copies():
    """Per token on one rank, beyond the fused path: the SiLU and multiply apart 2 f e forward,
    7 f e backward (two products, SiLU's, SplitBackward's cat); q, k, v made contiguous 2 (q + 2 kv)
    e each way; k and v concatenated then permuted 8 kv e forward (Llama 3 8B at tp 2: f = 7168,
    q + 2 kv = 3072, kv = 512)."""
    from shardwise.physics.stack import layout_copy_bytes

    (f_bytes, b_bytes), kernels = layout_copy_bytes(4096, 3072, 512, 7168, 2.0, True, True)
    assert f_bytes == 4096 * 2.0 * (2 * 7168 + 2 * 3072 + 8 * 512)
    assert b_bytes == 4096 * 2.0 * (7 * 7168 + 2 * 3072)
    assert kernels == (6, 3)
    assert layout_copy_bytes(4096, 3072, 512, 0.0, 2.0, True, False) == ((0.0, 0.0), (0, 0))  # no gated MLP
    scn = _scenario("llama3-8b", tp=2)
    plain = dataclasses.replace(scn.plan, eager_glu=False, layout_copies=False)
    own, base = _layer(scn)[0], _layer(dataclasses.replace(scn, plan=plain))[0]
    gpu = scn.cluster.gpu
    assert own.compute_forward_s - base.compute_forward_s == pytest.approx(memory_s(f_bytes, gpu, 6))
    assert own.compute_backward_s - base.compute_backward_s == pytest.approx(memory_s(b_bytes, gpu, 3))
