"""DeepSpeed ZeRO-3 as its engine gathers and reduces (`Plan.zero3_buckets`, `physics.zero3_deepspeed`):
module by module, prefetching up to its bucket while fewer than max-live parameters are gathered,
the gradients reduce-scattered in reduce-bucket flushes; what that holds in memory, the collectives
a layer takes, and what `--emit deepspeed` writes."""

from __future__ import annotations

import json

import pytest

from shardwise import presets
from shardwise.engines.data_parallel import collective_prices
from shardwise.engines.training_buffers import deepspeed_zero3_buffers, zero3_buffers
from shardwise.errors import SpecError
from shardwise.physics import memory as mem
from shardwise.physics import zero3_deepspeed as z3d
from shardwise.physics.collectives import Fabric
from shardwise.physics.topology import placement
from shardwise.specs import Plan, Scenario
from shardwise.specs.zero3 import Zero3Buckets, zero3_buckets_of

LLAMA = "llama2-7b"


def _trace(**buckets: object) -> z3d.Zero3Trace:
    model = presets.model(LLAMA)
    return z3d.trace(model, 1, model.layers, Zero3Buckets(**buckets))  # type: ignore[arg-type]


def test_the_presets_carry_deepspeeds_defaults_and_megatron_deepspeed_its_fused_linears():
    for name, fused in (("deepspeed", False), ("megatron-deepspeed", True)):
        b = presets.framework(name)["zero3_buckets"]
        assert b == Zero3Buckets(fused_linears=fused)
        assert (b.prefetch_bucket_params, b.max_live_params, b.persistence_threshold_params) == (5e7, 1e9, 1e5)
        assert (b.reduce_bucket_params, b.max_reuse_distance_params) == (5e8, 1e9)
    assert presets.framework("fsdp").get("zero3_buckets") is None  # PyTorch FSDP: a layer at a time


def test_without_prefetch_each_module_is_its_own_gather():
    """Hugging Face's Llama layer: q, k, v, o, gate, up, down gathered (the norms persist below
    1e5 elements), plus the word embedding and the output layer over the stage's 32 layers."""
    t = _trace(prefetch_bucket_params=0.0)
    assert t.gathers_per_layer == pytest.approx((7 * 32 + 2) / 32, rel=1e-12)
    assert t.persistent_params == 2 * 4096 * 32 + 4096  # two RMSNorm gains a layer and the final one
    fused = _trace(prefetch_bucket_params=0.0, fused_linears=True)  # Megatron: QKV, dense, h-to-4h, 4h-to-h
    assert fused.gathers_per_layer == pytest.approx((4 * 32 + 2) / 32, rel=1e-12)


def test_the_prefetcher_stops_at_max_live_parameters():
    """A prefetch bucket above the mean module runs ahead until max-live are gathered, and no
    further than one pop past it (the bound is checked before each pop)."""
    largest = 4096 * 32000  # the embedding, the largest module
    for live in (2e8, 5e8, 1e9):
        t = _trace(max_live_params=live, max_reuse_distance_params=0.0)
        assert live <= t.peak_gathered_params <= live + largest
    small = _trace(prefetch_bucket_params=1e7, max_reuse_distance_params=0.0)
    assert small.peak_gathered_params < _trace(max_reuse_distance_params=0.0).peak_gathered_params


def test_reuse_distance_keeps_the_last_layers_across_the_turn():
    none = _trace(prefetch_bucket_params=0.0, max_reuse_distance_params=0.0)
    kept = _trace(prefetch_bucket_params=0.0)
    assert none.peak_gathered_params == 4096 * 32000  # one module at a time: the largest
    assert kept.peak_gathered_params > 2 * none.peak_gathered_params


def test_reduce_buckets_flush_as_deepspeed_flushes_them():
    """A bucket below every parameter: each gradient its own reduce-scatter (9 tensors a layer:
    two norms and seven projections, then the final norm and both embeddings); a bucket above the
    model: one flush, the epilogue's."""
    each = _trace(reduce_bucket_params=1.0)
    assert each.reduces_per_layer == pytest.approx((9 * 32 + 3) / 32, rel=1e-12)
    whole = _trace(reduce_bucket_params=1e12)
    assert whole.reduces_per_layer == pytest.approx(1 / 32, rel=1e-12)
    assert whole.last_reduce_params == whole.largest_flush_params > 6.7e9
    default = _trace()
    assert 1 < default.reduces_per_layer * 32 < 6.7e9 / 5e8 + 2
    assert default.largest_flush_params <= 5e8


def _scenario(**plan: object) -> Scenario:
    fields = {"dp": 8, "global_batch": 8, "zero_stage": 3, "framework": "deepspeed", "grad_reduce_bf16": True}
    fields |= {"zero3_buckets": Zero3Buckets()} | plan
    return Scenario(presets.model(LLAMA), presets.system("dgx-a100"), Plan(**fields))


def test_memory_holds_what_is_gathered_and_the_bucket_at_the_communication_dtype():
    scn = _scenario()
    plan, model = scn.plan, scn.model
    t = z3d.trace(model, 1, model.layers, plan.zero3_buckets)
    gathered, reducing = deepspeed_zero3_buffers(model, plan)
    assert gathered == pytest.approx(2.0 * (t.peak_gathered_params + t.persistent_params), rel=1e-12)
    fp32 = deepspeed_zero3_buffers(model, plan.with_(grad_reduce_bf16=False))[1]
    assert fp32 - reducing == pytest.approx(2.0 * (5e8 + t.largest_flush_params), rel=1e-12)
    assert zero3_buffers(model, plan, mem.stack_memory("deepspeed"), False) == (gathered, reducing)
    assert deepspeed_zero3_buffers(model, plan.with_(zero_stage=2)) == (0.0, 0.0)
    smaller = deepspeed_zero3_buffers(model, plan.with_(zero3_buckets=Zero3Buckets(reduce_bucket_params=1e7)))[1]
    assert smaller < reducing


def test_each_layer_pays_its_gathers_and_reductions_fixed_times():
    """The stage's bytes split over the layers' collectives as the buckets cut them: smaller
    buckets, more latency-bound collectives, more seconds for the same bytes."""
    names = ("layer_all_gather", "layer_reduce_scatter")
    scn = Scenario(
        presets.model(LLAMA),
        presets.system("dgx-a100", nodes=8),
        Plan(dp=64, global_batch=64, zero_stage=3, framework="deepspeed", zero3_buckets=Zero3Buckets()),
    )
    fabric, place = Fabric.of(scn.cluster), placement(scn.plan, scn.cluster.gpus_per_node)
    n, layers = 6.7e9, 32
    t = z3d.trace(scn.model, 1, layers, scn.plan.zero3_buckets)
    prices = collective_prices(scn, fabric, place, n, names, layers=layers)
    group = fabric.group(64, 8)
    k = t.reduces_per_layer
    g = mem.grad_bytes_per_param("bf16")  # fp32: the plan does not reduce in bf16
    expected = layers * k * group.reduce_scatter(g * n / layers / k)
    assert prices["layer_reduce_scatter"] == pytest.approx(expected, rel=1e-12)
    tiny = scn.plan.with_(zero3_buckets=Zero3Buckets(prefetch_bucket_params=0.0, reduce_bucket_params=1.0))
    slow = collective_prices(Scenario(scn.model, scn.cluster, tiny), fabric, place, n, names, layers=layers)
    assert slow["layer_reduce_scatter"] > prices["layer_reduce_scatter"]
    assert slow["layer_all_gather"] > prices["layer_all_gather"]
    fsdp = collective_prices(
        Scenario(scn.model, scn.cluster, scn.plan.with_(zero3_buckets=None)), fabric, place, n, names, layers=layers
    )
    assert fsdp["layer_all_gather"] == pytest.approx(layers * group.all_gather(2.0 * n / layers), rel=1e-12)


def test_everything_persistent_takes_no_layer_collective():
    """A threshold above every module: all persist (DeepSpeed's `ds_numel <= param_threshold`),
    no layer all-gather (priced 0 seconds, not 0/0); a module of exactly the threshold persists."""
    import math

    scn = Scenario(
        presets.model(LLAMA),
        presets.system("dgx-a100", nodes=8),
        Plan(dp=64, global_batch=64, zero_stage=3, framework="deepspeed",
             zero3_buckets=Zero3Buckets(persistence_threshold_params=1e12)),
    )  # fmt: skip
    fabric, place = Fabric.of(scn.cluster), placement(scn.plan, scn.cluster.gpus_per_node)
    prices = collective_prices(scn, fabric, place, 6.7e9, ("layer_all_gather", "layer_reduce_scatter"), layers=32)
    assert prices["layer_all_gather"] == 0.0
    assert math.isfinite(prices["layer_reduce_scatter"]) and prices["layer_reduce_scatter"] > 0
    assert _trace(persistence_threshold_params=4096.0).persistent_params == 2 * 4096 * 32 + 4096


def test_everything_persistent_predicts_a_finite_step(cli):
    args = ["predict", "--model", LLAMA, "--system", "dgx-a100", "--global-batch", "64", "--framework", "deepspeed"]
    code, out, err = cli([*args, "--zero", "3", "--zero3-buckets", "persist=1e12", "--json"])
    assert code == 0, err
    assert "nan" not in out.lower()


def test_a_mixture_of_experts_keeps_fsdps_units_and_the_stacks_bucket(cli):
    """Mixtral is not traced (`z3d.applies`): its ZeRO-3 buffers are FSDP's units and the stack's
    reduction bucket, with DeepSpeed's buckets given or not (its bucket was dropped: 8.71 vs 10.71 GB)."""
    args = ["predict", "--model", "mixtral-8x7b", "--system", "dgx-h100", "--nodes", "2", "--global-batch", "64",
            "--framework", "deepspeed", "--zero", "3", "--json"]  # fmt: skip
    code, out, err = cli(args)
    assert code == 0, err
    code, base, err = cli([*args, "--zero3-buckets", "none"])
    assert code == 0, err
    traced, untraced = json.loads(out), json.loads(base)
    assert traced.pop("command") != untraced.pop("command")
    assert traced == untraced


def test_bad_buckets_are_one_line_errors(cli):
    for bad in ("foo=1", "reduce=-5", "reduce", "live=inf", "prefetch=0.5", "prefetch=5e7,prefetch=1e7",
                "prefetch=5e7,stage3_prefetch_bucket_size=1e7"):  # fmt: skip
        code, out, err = cli(["predict", "--model", LLAMA, "--system", "dgx-a100", "--global-batch", "8",
                              "--framework", "deepspeed", "--zero3-buckets", bad])  # fmt: skip
        assert code == 2, (bad, out, err)
        assert "--zero3-buckets" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    with pytest.raises(SpecError, match="framework 'mine': zero3_buckets"):
        zero3_buckets_of({"reduce_bucket_size": True}, "framework 'mine': zero3_buckets")
    with pytest.raises(SpecError, match="whole elements"):  # DeepSpeed's fields are ints
        zero3_buckets_of({"reduce_bucket_size": 1e7 + 0.5}, "framework 'mine': zero3_buckets")
    with pytest.raises(SpecError, match="whole elements"):
        Zero3Buckets(prefetch_bucket_params=0.25)
    assert zero3_buckets_of("prefetch=1e7").prefetch_bucket_params == 1e7  # type: ignore[union-attr]


def test_the_flag_is_refused_on_a_stack_that_does_not_run_deepspeed(cli):
    """torchtitan, FSDP, Megatron-Core gather by FSDP-style units: DeepSpeed's buckets would price a
    stack they do not run (one line, exit 2); none there is what they run already."""
    args = ["predict", "--model", LLAMA, "--system", "dgx-a100", "--global-batch", "8", "--zero", "3"]
    for stack in ("torchtitan", "fsdp", "megatron-core"):
        code, out, err = cli([*args, "--framework", stack, "--zero3-buckets", "prefetch=1e7"])
        assert code == 2, (stack, out, err)
        assert "deepspeed" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
        code, out, err = cli([*args, "--framework", stack, "--zero3-buckets", "none"])
        assert code == 0, err


def test_the_flag_overrides_the_frameworks_buckets_key_by_key(cli):
    args = ["predict", "--model", LLAMA, "--system", "dgx-a100", "--global-batch", "8", "--zero", "3", "--json"]
    code, out, err = cli([*args, "--framework", "megatron-deepspeed", "--zero3-buckets", "prefetch=1e7,reduce=2e7"])
    assert code == 0, err
    code, base, err = cli([*args, "--framework", "megatron-deepspeed"])
    assert code == 0, err
    assert json.loads(out) != json.loads(base)  # the buckets change the prediction


def test_emit_deepspeed_writes_the_buckets_the_plan_was_priced_with(cli):
    args = ["predict", "--model", LLAMA, "--system", "dgx-a100", "--global-batch", "64", "--zero", "3"]
    code, out, err = cli([*args, "--framework", "megatron-deepspeed", "--zero3-buckets", "prefetch=1e7,live=3e8",
                          "--emit", "deepspeed"])  # fmt: skip
    assert code == 0, err
    config = json.loads(out.split("cat > ds_config.json <<'SHARDWISE_EOF'\n")[1].split("SHARDWISE_EOF")[0])
    zero = config["zero_optimization"]
    assert zero["stage3_prefetch_bucket_size"] == 10_000_000 and zero["stage3_max_live_parameters"] == 300_000_000
    assert zero["reduce_bucket_size"] == 500_000_000 and zero["stage3_param_persistence_threshold"] == 100_000
    assert config["communication_data_type"] == "fp32"  # the plan reduces bf16 training's gradients in fp32
    # a plan priced with FSDP's units (--framework fsdp, named: priced under it, not Megatron-DeepSpeed)
    # runs DeepSpeed's stage 3 at its defaults, re-priced so
    code, out, err = cli([*args, "--framework", "fsdp", "--emit", "deepspeed"])
    assert code == 0, err
    assert "DeepSpeed's stage 3 module by module, at its default buckets" in out
    assert "the times are --framework fsdp's, not those of megatron-deepspeed" in err
    assert '"stage3_prefetch_bucket_size": 50000000' in out


def test_emit_deepspeed_writes_the_reduction_dtypes_at_every_stage(cli):
    """communication_data_type at ZeRO-1 as at 3 (the gradients' reduction the plan was priced with), and
    with Ulysses the all-to-alls' dtype (DeepSpeed's default fp32; the plan prices 16-bit activations)."""

    def emitted(*extra: str) -> dict:
        code, out, err = cli(["predict", "--model", LLAMA, "--system", "dgx-a100", "--global-batch", "64",
                              "--framework", "megatron-deepspeed", "--emit", "deepspeed", *extra])  # fmt: skip
        assert code == 0, err
        return json.loads(out.split("cat > ds_config.json <<'SHARDWISE_EOF'\n")[1].split("SHARDWISE_EOF")[0])

    zero1 = emitted("--zero", "1", "--recompute", "full")
    assert zero1["communication_data_type"] == "fp32" and "seq_parallel_communication_data_type" not in zero1
    assert emitted("--zero", "1", "--recompute", "full", "--grad-reduce-bf16")["communication_data_type"] == "bf16"
    ulysses = emitted("--zero", "1", "--recompute", "full", "--cp", "2", "--flash-attention")
    assert ulysses["seq_parallel_communication_data_type"] == "bf16"


def test_flagperfs_deepspeed_rows_run_their_configs_buckets():
    """FlagPerf's llama2_7b-deepspeed ds_config.json (@1b5a0303): prefetch and reduce buckets of 1e7."""
    from shardwise.analyses import public_runs

    rows = [r for r in public_runs.raw_rows() if "FlagPerf training/nvidia/llama2_7b-deepspeed/" in r["source"]]
    assert rows
    for row in rows:
        argv = public_runs.request_for(row).to_argv()
        assert argv[argv.index("--zero3-buckets") + 1] == "prefetch=1e7,reduce=1e7,live=1e9,reuse=1e9"


def test_a_calibrations_stacked_runs_are_traced_one_by_one():
    """`calibration.cases` stacks runs' model numbers into arrays: each distinct model and layout
    traced on its own, as it would be alone."""
    from dataclasses import replace

    import numpy as np

    model = presets.model(LLAMA)
    stacked = replace(model, hidden=np.array([[4096, 5120]]), layers=np.array([[32, 40]]))
    t = z3d.traces(stacked, np.array([[1]]), np.array([[32, 40]]), Zero3Buckets())
    for i, (hidden, layers) in enumerate(((4096, 32), (5120, 40))):
        alone = z3d.trace(replace(model, hidden=hidden, layers=layers), 1, layers, Zero3Buckets())
        assert t.gathers_per_layer[0, i] == alone.gathers_per_layer
        assert t.peak_gathered_params[0, i] == alone.peak_gathered_params
