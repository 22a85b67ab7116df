"""nanotron's two layout modes: its example configs' (the `nanotron` preset: 1F1B, REDUCE_SCATTER,
async linears) and its ParallelismArgs defaults (`nanotron-defaults`, config/parallelism_config.py:
AllForwardAllBackward engine, tp_mode ALL_REDUCE, synchronous linears), what GPipe's order holds on
the last stage, and the flags that price one mode on the other preset."""

from __future__ import annotations

import dataclasses

import pytest

from shardwise import presets
from shardwise.engines.training import estimate_training_step
from shardwise.errors import SpecError
from shardwise.physics.memory_stacks import held_outputs_bytes, stack_memory
from shardwise.presets import _framework_from_dict
from shardwise.requests.training import TrainingRequest
from shardwise.specs import Schedule

COMMON = {"model": "llama3-8b", "system": "dgx-h100", "nodes": 1, "seq_len": 4096}


def _plan(**over: object):
    return TrainingRequest(**{**COMMON, **over}).build().scenario.plan


def test_the_presets_run_the_example_configs_and_the_dataclass_defaults():
    examples = _plan(framework="nanotron", tp=2, global_batch=64)
    assert examples.schedule == Schedule.ONE_F_ONE_B and bool(examples.sequence_parallel)
    assert bool(examples.async_tp_grad) and examples.layer_host_ops == 206
    plan = _plan(framework="nanotron-defaults", tp=2, global_batch=64)
    assert plan.schedule == Schedule.GPIPE  # AllForwardAllBackwardPipelineEngine, at pp 1 too
    assert not bool(plan.sequence_parallel)  # ALL_REDUCE
    assert not bool(plan.async_tp_grad) and plan.layer_host_ops == 160  # tp_linear_async_communication False
    mega = _plan(framework="megatron-core", tp=2, global_batch=64)
    assert mega.schedule == Schedule.ONE_F_ONE_B and bool(mega.sequence_parallel)


def test_flags_given_win_and_the_async_sp_mode_takes_its_own_count():
    examples = _plan(
        framework="nanotron-defaults",
        tp=2,
        global_batch=64,
        schedule="1f1b",
        sequence_parallel=True,
        async_tp_grad=True,
    )
    assert examples.schedule == Schedule.ONE_F_ONE_B and bool(examples.sequence_parallel)
    assert examples.layer_host_ops == 206
    # synchronous REDUCE_SCATTER: the all-reduce mode's count, and no gather beside the own rows
    sync_sp = _plan(framework="nanotron", tp=2, global_batch=64, sequence_parallel=True, async_tp_grad=False)
    assert sync_sp.layer_host_ops == 160
    assert _plan(framework="nanotron", tp=2, pp=2, vpp=2, global_batch=64).schedule == Schedule.INTERLEAVED


def test_the_shard_overlap_needs_the_async_linears():
    from shardwise.engines.context_parallel import micro_batch_view
    from shardwise.engines.costs import layer_cost
    from shardwise.engines.tp_overlap import tp_comm
    from shardwise.physics.collectives import Fabric
    from shardwise.physics.topology import placement

    def layer(plan):
        scn = TrainingRequest(**COMMON, framework="nanotron", tp=8, global_batch=64).build().scenario
        scn = dataclasses.replace(scn, plan=plan)
        comm = tp_comm(micro_batch_view(scn), Fabric.of(scn.cluster), placement(plan, 8)["tp"])
        return layer_cost(micro_batch_view(scn), comm, kv_len=4096)[0]

    base = _plan(framework="nanotron", tp=8, global_batch=64, sequence_parallel=True, async_tp_grad=False)
    assert bool(base.tp_shard_overlap)
    off = dataclasses.replace(base, tp_shard_overlap=False)
    assert layer(base) == layer(off)  # synchronous: the flag does nothing
    on = dataclasses.replace(base, async_tp_grad=True)
    assert layer(on).tp_hidden_s > layer(dataclasses.replace(on, tp_shard_overlap=False)).tp_hidden_s


def test_a_planned_row_names_what_differs_from_the_frameworks_defaults():
    from shardwise.requests.plan_build import default_schedule, default_sequence_parallel

    nano = {"framework": "nanotron-defaults", "tp": 2, "vpp": 1}
    assert default_schedule(nano) == "gpipe" and default_sequence_parallel(nano) is False
    assert default_sequence_parallel({**nano, "tp": 1}) is False
    mega = {"framework": "megatron-core", "tp": 2, "vpp": 1}
    assert default_schedule(mega) == "1f1b" and default_sequence_parallel(mega) is True
    assert default_schedule({**nano, "vpp": 2}) == "interleaved"


def test_gpipe_holds_every_micro_batchs_loss_on_the_last_stage():
    """nanotron's _ShardedCrossEntropy saves its fp32 softmax (4 bytes a logit) and the output
    layer its inputs, for every micro-batch whose backward has not begun: all m under GPipe's
    order, 1 under 1F1B (nothing beyond the one the loss's peak counts)."""
    m = presets.model("llama3-8b", seq_len=4096)
    nano = stack_memory("nanotron")
    head = 2 * 2.0 * 4096 * 2 * m.hidden  # final-norm and output-projection inputs, b = 2, no SP
    one = held_outputs_bytes(m, 2, 2, head, nano, 1)
    assert one == 0.0
    eight = held_outputs_bytes(m, 2, 2, head, nano, 8)
    assert eight == pytest.approx(7 * (4.0 * 4096 * 2 * m.vocab / 2 + head))


def test_all_forward_all_backward_at_pp_1_holds_every_micro_batch():
    """At pp 1 each micro-batch more adds, under AllForwardAllBackward, its layers' saved
    activations, its loss's fp32 softmax and the output layer's inputs; under 1F1B the peak does not
    move with the batch."""
    from shardwise.physics.memory import layer_activation_bytes
    from shardwise.specs import Recompute

    def acts(schedule: str, batch: int) -> float:
        scn = TrainingRequest(**COMMON, framework="nanotron-defaults", tp=8, global_batch=batch, schedule=schedule)
        scn = scn.build()
        return float(estimate_training_step(scn.scenario).memory.activations_bytes)

    assert acts("1f1b", 4) == pytest.approx(acts("1f1b", 2))
    m, nano = presets.model("llama3-8b", seq_len=4096), stack_memory("nanotron")
    s, h, t = 4096, m.hidden, 8
    layer = layer_activation_bytes(
        m, 1, t, False, Recompute.NONE, True, 2.0, None, "attention", nano.extra_saved_elements(m)
    )
    per_micro_batch = m.layers * layer + 4.0 * s * m.vocab / t + 2 * 2.0 * s * h
    assert acts("gpipe", 3) - acts("gpipe", 2) == pytest.approx(per_micro_batch)
    assert acts("gpipe", 4) - acts("gpipe", 3) == pytest.approx(per_micro_batch)


@pytest.mark.parametrize(
    ("field", "value", "allowed"),
    [("schedule", "interleaved", "choose gpipe, 1f1b, zb-h1"), ("sequence_parallel", "yes", "give true or false")],
)
def test_a_bad_default_is_one_clear_error(field, value, allowed):
    data = dict(presets.raw("frameworks")["nanotron"])
    data[field] = value
    with pytest.raises(SpecError, match=f"framework 'x': {field}: .* is not allowed; {allowed}"):
        _framework_from_dict("x", data)


def test_the_planner_searches_what_nanotron_implements_and_its_rows_price_as_predict(cli):
    """ZeroDistributedOptimizer is ZeRO-1 (any zero_stage > 0); the engines are AllForwardAllBackward
    and OneForwardOneBackward. A row's command names what differs from the preset's defaults (the
    planner's pp-1 rows run 1F1B; SP off is the default) and `predict` prices it to the last bit."""
    import json
    import shlex

    args = ["plan", "--model", "llama3-8b", "--system", "dgx-h100", "--nodes", "2", "--global-batch", "64"]
    code, out, err = cli([*args, "--framework", "nanotron", "--top", "60", "--json"])
    assert code == 0, err
    plans = json.loads(out)["plans"]
    assert {p["zero_stage"] for p in plans} <= {0, 1}
    assert {p["schedule"] for p in plans} <= {"gpipe", "1f1b"}
    assert any(p["pp"] > 1 for p in plans) and any(not p["sequence_parallel"] and p["tp"] > 1 for p in plans)
    for p in plans[:3] + [q for q in plans if not q["sequence_parallel"] and q["tp"] > 1][:1]:
        code, out, err = cli([*shlex.split(p["command"])[1:], "--json"])
        assert code == 0, err
        assert json.loads(out)["step_time_s"] == p["step_time_s"]
    code, out, err = cli([*args, "--framework", "megatron-core", "--top", "200", "--json"])
    assert {p["zero_stage"] for p in json.loads(out)["plans"]} > {0, 1}  # searched as before elsewhere


def test_a_note_says_what_the_stacks_defaults_chose(cli):
    args = ["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--nodes", "1", "--tp", "2"]
    code, _, err = cli([*args, "--global-batch", "64", "--micro-batch", "2", "--framework", "nanotron-defaults"])
    assert code == 0
    assert "runs all 8 forwards, then all backwards" in err and "--schedule 1f1b holds at most 1" in err
    assert "without sequence parallelism" in err
    code, _, err = cli(
        [
            *args,
            "--global-batch",
            "64",
            "--framework",
            "nanotron-defaults",
            "--schedule",
            "gpipe",
            "--no-sequence-parallel",
        ]
    )
    assert code == 0 and "note: nanotron-defaults" not in err  # what is given is not a default
    code, _, err = cli([*args, "--global-batch", "4", "--framework", "nanotron-defaults", "--sequence-parallel"])
    assert "note: nanotron-defaults" not in err  # one micro-batch per replica: nothing more is held


def test_the_example_configs_mode_needs_no_note(cli):
    args = ["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--nodes", "1", "--tp", "2"]
    code, _, err = cli([*args, "--global-batch", "64", "--micro-batch", "2", "--framework", "nanotron"])
    assert code == 0 and "note: nanotron" not in err
