"""FSDP2's deferred gradient sync as a stated Plan field (`Plan.fsdp2_grad_sync`), not inferred
from the stack's accumulation bytes: a hand-built plan with per-parameter sharding and the default
`unfused_accumulate_bytes` (10) reduce-scatters every micro-batch, as FSDP2 does by default; the
field is checked (one line), read from the framework preset, refused on stacks without FSDP2, and
settable from the command line (`physics.microbatch.fsdp2_deferred_sync`)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from shardwise import presets
from shardwise.engines.fsdp2_copies import sharding_copies, step_copies_s
from shardwise.errors import SpecError
from shardwise.physics.compute import memory_s
from shardwise.physics.microbatch import FSDP2_DEFERRED_ADD_BYTES, plan_accumulate_bytes, plan_deferred_sync
from shardwise.physics.params import layer_params_split
from shardwise.presets.framework_fields import _framework_from_dict, with_like
from shardwise.specs import Plan, Scenario

LLAMA = "llama3-8b"


def _hand_built(**over: object) -> Scenario:
    """Llama 3 8B on 16 H100s, ZeRO-3 under FSDP2 over dp 16 at pp 1, two micro-batches, every other
    field the Plan's default (unfused_accumulate_bytes 10 among them)."""
    plan = Plan(dp=16, global_batch=32, zero_stage=3, per_param_sharding=True, **over)  # type: ignore[arg-type]
    return Scenario(presets.model(LLAMA, seq_len=8192), presets.system("dgx-h100", nodes=2), plan)


def test_a_hand_built_fsdp2_plan_reduces_every_micro_batch_unless_it_says_otherwise():
    """Before: unfused_accumulate_bytes 10 (the Plan's default) made it take NeMo AutoModel's deferred
    path silently (copy-in once a step, 10 bytes added per micro-batch at any grad_accumulation_fusion)."""
    plain = _hand_built()
    assert plain.plan.unfused_accumulate_bytes == 10.0 and plain.plan.fsdp2_grad_sync == "every-micro-batch"
    assert not plan_deferred_sync(plain.plan)
    assert step_copies_s(plain, 1e9, 3e9) == 0.0  # nothing once a step: the copy-in runs every micro-batch
    deferred = _hand_built(fsdp2_grad_sync="last-micro-batch")
    assert plan_deferred_sync(deferred.plan)
    g = 4.0  # the fp32 reduce dtype's gradient bytes
    assert step_copies_s(deferred, 1e9, 3e9) == pytest.approx(memory_s(2 * g * 1e9, deferred.cluster.gpu))
    # the per-micro-batch copy-in ((2 + g) bytes a weight of the layer) goes where the once-a-step one comes
    each, once = sharding_copies(plain), sharding_copies(deferred)
    assert each is not None and once is not None
    m = plain.model
    weights = layer_params_split(m)[0] + layer_params_split(m)[1]
    copy_out = 2.0 * 2.0 * weights
    gpu = plain.cluster.gpu
    assert float(each[0].compute_backward_s) == pytest.approx(memory_s(copy_out + (2 + g) * weights, gpu, kernels=2))
    assert float(once[0].compute_backward_s) == pytest.approx(memory_s(copy_out, gpu, kernels=2))


def test_the_deferred_add_follows_the_field_not_the_bytes():
    """A stack's own add (10 here) is kept either way; 0 of its own gets FSDP2's 10 only when deferred."""
    assert plan_accumulate_bytes(_hand_built(unfused_accumulate_bytes=0.0).plan) == 0.0
    deferred = _hand_built(unfused_accumulate_bytes=0.0, fsdp2_grad_sync="last-micro-batch")
    assert plan_accumulate_bytes(deferred.plan) == FSDP2_DEFERRED_ADD_BYTES
    piped = Plan(dp=8, pp=2, global_batch=16, zero_stage=3, per_param_sharding=True, unfused_accumulate_bytes=0.0)
    assert plan_deferred_sync(piped) and plan_accumulate_bytes(piped) == FSDP2_DEFERRED_ADD_BYTES  # pipelining's
    assert not plan_deferred_sync(replace(piped, per_param_sharding=False, fsdp2_grad_sync="last-micro-batch"))


def test_a_bad_value_is_one_line_naming_the_field():
    with pytest.raises(SpecError, match=r"plan: fsdp2_grad_sync 'sometimes' is not allowed; choose every-micro-batch"):
        Plan(fsdp2_grad_sync="sometimes")


def test_framework_files_state_it_only_for_fsdp2():
    table = presets.raw("frameworks")
    inherited = _framework_from_dict("mine", with_like("mine", {"like": "nemo-automodel"}, table))
    assert inherited["fsdp2_grad_sync"] == "last-micro-batch"
    with pytest.raises(SpecError, match="framework 'mine': fsdp2_grad_sync: 'sometimes' is not allowed"):
        _framework_from_dict("mine", with_like("mine", {"like": "torchtitan", "fsdp2_grad_sync": "sometimes"}, table))
    with pytest.raises(SpecError, match="framework 'mine': fsdp2_grad_sync: 'last-micro-batch' applies to FSDP2"):
        _framework_from_dict("mine", with_like("mine", {"like": "fsdp", "fsdp2_grad_sync": "last-micro-batch"}, table))


def test_the_flag_sets_it_and_is_refused_without_fsdp2(cli):
    args = ["predict", "--model", LLAMA, "--system", "dgx-h100", "--nodes", "2", "--global-batch", "64", "--json"]
    code, _, err = cli([*args, "--framework", "megatron-core", "--fsdp2-grad-sync", "last-micro-batch"])
    assert code == 2 and "--fsdp2-grad-sync" in err and "nemo-automodel" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    code, _, err = cli([*args, "--framework", "nemo-automodel", "--fsdp2-grad-sync", "sometimes"])
    assert code == 2 and "sometimes" in err
    from shardwise.requests import TrainingRequest

    common = {"model": LLAMA, "system": "dgx-h100", "nodes": 2, "global_batch": 64, "framework": "nemo-automodel"}
    own = TrainingRequest(**common).scenario().plan  # type: ignore[arg-type]
    synced = TrainingRequest(**common, fsdp2_grad_sync="every-micro-batch").scenario().plan  # type: ignore[arg-type]
    assert own.fsdp2_grad_sync == "last-micro-batch" and synced.fsdp2_grad_sync == "every-micro-batch"
    code, _, err = cli([*args, "--framework", "nemo-automodel", "--fsdp2-grad-sync", "every-micro-batch"])
    assert code == 0, err


def test_automodels_moe_benchmarks_before_the_outer_wrap_reduce_every_micro_batch():
    """NeMo AutoModel's MoE benchmark rows first published before 8134b0c03 (the outer ForCausalLM not an
    FSDPModule, so `get_sync_ctx` turned nothing off) are priced every-micro-batch at pp 1; the
    Nemotron 3 Nano row (bb0c0bfb08, `defer_fsdp_grad_sync` left at its default True) and the pipelined
    ones keep the preset's last-micro-batch."""
    from shardwise.analyses import public_moe, public_runs

    rows = {r["id"]: public_moe.resolved(r) for r in public_runs.raw_rows()}
    sync = {i: public_runs.request_for(rows[i]).scenario().plan.fsdp2_grad_sync for i in rows if i in _AUTOMODEL_MOE}
    every, last = "every-micro-batch", "last-micro-batch"
    assert sync == {"PUB-0851": every, "PUB-0852": every, "PUB-0853": every, "PUB-0854": every, "PUB-0863": last}
    assert all(public_runs.request_for(rows[i]).scenario().plan.pp > 1 for i in ("PUB-0848", "PUB-0850"))


_AUTOMODEL_MOE = ("PUB-0851", "PUB-0852", "PUB-0853", "PUB-0854", "PUB-0863")
