"""Data parallelism's collectives priced: a stage's gradient reduction (all-reduce, or
reduce-scatter under ZeRO >= 1) and ZeRO's parameter all-gathers, whole or their first or last
bucket, over the data-parallel group (hybrid sharding's shard and replica groups apart), for the
first, fullest middle and last pipeline stage. What of them stays exposed is `engines.dp_step`'s.
"""

from __future__ import annotations

from shardwise.arrays import as_array, as_bool, as_float, ifelse, maximum, minimum, one_value
from shardwise.physics import fsdp2
from shardwise.physics import memory as mem
from shardwise.physics import zero3_deepspeed as z3d
from shardwise.physics.collectives import Fabric, Group
from shardwise.physics.topology import ranks_per_node
from shardwise.specs import Scenario
from shardwise.specs._checks import Number

# Megatron-Core's data-parallel gradient buckets: max(40M, 1M x dp) parameters
# (megatron/core/distributed/distributed_data_parallel.py). The reduction of the last bucket (the
# first layers' gradients, ready only when the backward pass ends) cannot hide behind it, and
# the first bucket's parameter all-gather is needed before the first layer can run.
DP_BUCKET_PARAMS = 40e6
DP_BUCKET_PARAMS_PER_RANK = 1e6


# `Plan.spmd_grad_reduce` (XLA: MaxText, Paxml): bytes per parameter of the gradient reduction. The
# weight gradient is the output of a bf16 dot (MaxText layers/linears.py casts the fp32 kernel to
# dtype=bfloat16 before lax.dot_general, efb6d9e4; Praxis the same at fprop_dtype) and XLA's SPMD
# partitioner reduces a partitioned dot's partial sums there, before the convert to the fp32
# parameter; MaxText's own sharding guide counts the data-parallel all-reduce as 2 bytes per
# parameter (docs/guides/optimization/sharding.md, "All reduce size of params (bf16)"). Under hybrid
# sharding the replicas' all-reduce of each rank's shard stays exposed: XLA's default GPU
# latency-hiding scheduler estimates every async collective at kHighLatency = 5000 and a cuBLAS or
# cuDNN call at kMediumCost = 1000, so it overlaps a collective with about 5 GEMMs, one collective
# in flight at a time (xla/service/latency_hiding_scheduler.h ApproximateLatencyEstimator,
# gpu_latency_hiding_scheduler.cc GpuLatencyEstimator::NodeCost, SchedulerConfig overlap limits 1),
# a few ms beside a cross-node all-reduce of a combined gradient chunk (64 MiB to 1 GiB in
# MaxText's A3 scripts, 512 MiB in dgxc Paxml's) that takes tens to hundreds of ms. Once per step.
SPMD_GRAD_BYTES = 2.0

# The collectives a ZeRO stage uses (`dp_comm`), by name: see `collective_prices`. ZeRO-3's
# whole-stage gather and reduction are the scale of XLA's scanned layers' edge collectives
# (`dp_step.scan_edges_s`), its own are layer by layer.
ZERO_COLLECTIVES = (
    ("all_reduce", "bucket_all_reduce", "bucket_all_gather"),
    ("reduce_scatter", "bucket_reduce_scatter", "all_gather", "bucket_all_gather", "all_reduce"),
    ("reduce_scatter", "bucket_reduce_scatter", "all_gather", "bucket_all_gather"),
    (
        "layer_reduce_scatter",
        "unit_reduce_scatter",
        "layer_all_gather",
        "bucket_weights_all_gather",
        "reduce_scatter",
        "weights_all_gather",
    ),
)
# What the prices of those collectives read of a plan: the groups (the layout), the parameters
# each stage holds and trains (the split, the experts' layout, LoRA) and their bytes (the
# precision). Plans that differ only in other fields (the batch, recomputation, the schedule, the
# ZeRO stage, the overlaps) share them: `training.estimate_each_training_step` prices them once
# per group of such plans (`engines.distinct.evaluate_grouped`; a test compares with every plan's).
COLLECTIVE_READS = (
    frozenset(
        ("tp", "dp", "pp", "cp", "ep", "etp", "first_stage_layers", "last_stage_layers", "stage_layers", "precision")
    )
    | {"lora_rank", "lora_targets", "shard_group", "grad_reduce_bf16", "spmd_grad_reduce", "per_param_sharding"}
    | {"zero3_buckets"}
)


def zero_collectives(zero_stage: Number) -> tuple[str, ...]:
    """The names of the collectives `dp_comm` uses (`ZERO_COLLECTIVES`): one ZeRO stage's, or
    every stage's for an array of them (`dp_comm` selects among all four)."""
    z = as_array(zero_stage)
    present = [int(z)] if one_value(z) else range(4)
    return (*dict.fromkeys(name for k in present for name in ZERO_COLLECTIVES[k]), "replica_all_reduce")


def collective_prices(
    scn: Scenario,
    fabric: Fabric,
    place: dict[str, Number],
    n_params: Number,
    names: tuple[str, ...],
    experts: bool = False,
    n_weights: Number | None = None,
    units: tuple[Number, Number] | None = None,
    layers: Number | None = None,
) -> dict[str, Number]:
    """The seconds of the collectives `names` of one stage's data-parallel communication (its
    gradients' reduction, its weights' gathers, their first or last bucket), for `n_params`
    parameters per GPU (with `experts`: routed-expert ones, over the expert-data-parallel ranks)
    and `n_weights` held (default `n_params`; more than the trained ones under LoRA). `units`:
    FSDP2's exposed (gather per pass, reduce-scatter) parameters of the stage
    (`physics.fsdp2.edge_units`), the buckets where the plan shards per parameter.

    `layers`: the stage's layers (default the model's over the pipeline stages). ZeRO-3 gathers
    and reduces one layer at a time (`layer_all_gather`, `layer_reduce_scatter`: the stage's
    whole gather or reduction split into one collective per layer, each paying the collective's
    fixed time, its base latency and its ring's or tree's steps): FSDP1 wraps each transformer
    block as one flat parameter, all-gathered before the block's forward and again before its
    backward and reduce-scattered after its backward (torch.distributed.fsdp with a transformer
    auto-wrap policy; Zhao et al. 2023, "PyTorch FSDP", Sec. 3.2); FSDP2's `fully_shard` and
    Megatron-FSDP per block the same, XLA's scanned layers per layer. At 128-512 ranks a layer's
    ring moves well under 1 MB per step, so those fixed times count. The embedding and output
    layer held by the first and last stage are spread over the stage's layers' collectives.
    Reads only COLLECTIVE_READS of the plan."""
    plan = scn.plan
    hybrid = None
    if experts:
        dp = as_float(plan.expert_dp)
        group = fabric.group(dp, place["edp"], as_array(plan.ep) * as_array(plan.expert_tp))  # stride: physics.topology
    else:
        dp = as_float(plan.dp) * as_array(plan.cp)  # CP ranks hold the same weights
        hybrid = hybrid_groups(scn, fabric, dp)
        if hybrid is None:
            group = fabric.group(dp, place["dpcp"], plan.tp)
        else:
            dp, group, replica = hybrid
    spmd = as_bool(plan.spmd_grad_reduce)
    g_bytes = ifelse(spmd, SPMD_GRAD_BYTES, mem.grad_bytes_per_param(plan.precision, plan.grad_reduce_bf16))
    w_bytes = mem.weight_bytes_per_param(plan.precision)
    n_weights = n_params if n_weights is None else n_weights
    collectives = {  # name: (collective, what of the parameters it moves, bytes per parameter)
        "all_reduce": (group.all_reduce, "params", g_bytes),
        "reduce_scatter": (group.reduce_scatter, "params", g_bytes),
        "all_gather": (group.all_gather, "params", w_bytes),
        "bucket_all_reduce": (group.all_reduce, "bucket", g_bytes),
        "bucket_reduce_scatter": (group.reduce_scatter, "bucket", g_bytes),
        "bucket_all_gather": (group.all_gather, "bucket", w_bytes),
        "weights_all_gather": (group.all_gather, "weights", w_bytes),
        "bucket_weights_all_gather": (group.all_gather, "weights_bucket", w_bytes),
        "unit_reduce_scatter": (group.reduce_scatter, "unit", g_bytes),  # ZeRO-3's last reduction
        "layer_reduce_scatter": (group.reduce_scatter, "layer_params", g_bytes),  # ZeRO-3's, per layer
        "layer_all_gather": (group.all_gather, "layer_weights", w_bytes),
    }
    n_layers = maximum(as_float(scn.model.layers) / as_float(plan.pp) if layers is None else as_float(layers), 1.0)
    counts: dict[str, Number] = {
        "params": n_params,
        "weights": n_weights,
        "layer_params": n_params / n_layers,
        "layer_weights": n_weights / n_layers,
    }
    per_layer: dict[str, Number] = {}  # collectives per layer where DeepSpeed's buckets set them
    if plan.zero3_buckets is not None and not experts and z3d.applies(scn.model):
        t = z3d.traces(scn.model, plan.tp, n_layers, plan.zero3_buckets)
        per_layer = {"layer_weights": t.gathers_per_layer, "layer_params": t.reduces_per_layer}
        counts["weights_bucket"] = minimum(n_weights, t.first_gather_params)  # the pass's first gather
        counts["unit"] = minimum(n_params, t.last_reduce_params)  # the epilogue's bucket
    priced = {}
    for name in names:
        if name == "replica_all_reduce":  # XLA's, exposed (`SPMD_GRAD_BYTES`); the others' is in their reduce-scatter
            shard = 0.0 if hybrid is None else replica.all_reduce(n_params * g_bytes / dp)
            priced[name] = 0.0 if hybrid is None else ifelse(spmd, shard, 0.0)
            continue
        op, what, per_param = collectives[name]
        if what not in counts:  # a bucket: Megatron-Core's bucket of the parameters, or all of them
            n = n_weights if what == "weights_bucket" else n_params
            bucket = maximum(DP_BUCKET_PARAMS, DP_BUCKET_PARAMS_PER_RANK * dp)
            if units is not None and not experts and what != "bucket":  # ZeRO-3 under FSDP2: its units
                unit = units[0] if what == "weights_bucket" else units[1]
                bucket = ifelse(as_bool(plan.per_param_sharding), unit, bucket)
            counts[what] = minimum(n, bucket)
        k = per_layer.get(what, 1.0)
        each = ifelse(k > 0, k, 1.0)  # k == 0: every module persistent, no collective (priced 0, not 0/0)
        priced[name] = op(counts[what] * per_param / each) * k
        if hybrid is not None and name.endswith("reduce_scatter"):  # then the replicas' all-reduce of the shard
            shard = replica.all_reduce(counts[what] * per_param / dp / each) * k
            priced[name] = priced[name] + ifelse(spmd, 0.0, shard)
        if what.startswith("layer_"):  # one collective per layer of the stage
            priced[name] = n_layers * priced[name]
    return priced


def hybrid_groups(scn: Scenario, fabric: Fabric, ranks: Number) -> tuple[Number, Group, Group] | None:
    """Hybrid sharding (`Plan.shard_group`): (shard group size, its Group, the replicas' Group),
    or None where no plan has it (the ZeRO group is all `ranks` = dp x cp).

    The shard group is `shard_group` consecutive dp x cp ranks (`tp` apart in the order
    tp-cp-dp-pp: inside a node when tp x shard_group fits in it, as FSDP's HYBRID_SHARD and
    torchtitan's (dp_replicate, dp_shard) mesh put it), the replica group the dp x cp /
    shard_group ranks that hold the same shard, tp x shard_group apart. Each reduction is a
    reduce-scatter over the shard group followed by an all-reduce of the 1/shard_group of the
    gradients each rank keeps over its replica group (torch.distributed.fsdp HYBRID_SHARD's
    post-backward hook; FSDP2's HSDP the same, `_fsdp_collectives.foreach_reduce`); the
    parameter all-gathers stay inside the shard group."""
    plan = scn.plan
    group_size = as_array(plan.shard_group)
    if one_value(group_size) and float(group_size) == 0.0:
        return None
    shards = ifelse(group_size > 0, group_size, ranks)
    replicas = ranks / shards
    tp, per_node = as_array(plan.tp), scn.cluster.gpus_per_node
    shard = fabric.group(shards, ranks_per_node(shards, tp, per_node), tp)
    return shards, shard, fabric.group(replicas, ranks_per_node(replicas, tp * shards, per_node), tp * shards)


StagePrices = tuple[tuple[dict[str, Number], dict[str, Number] | None], ...]


def stage_collective_prices(
    scn: Scenario,
    fabric: Fabric,
    place: dict[str, Number],
    params: tuple[Number, Number, Number],
    expert_params: tuple[Number, Number, Number] = (0.0, 0.0, 0.0),
    weights: tuple[Number, Number, Number] | None = None,
    names: tuple[str, ...] | None = None,
) -> StagePrices:
    """`collective_prices` of the first, fullest middle and last stage (the arguments of
    `dp_step.data_parallel_exposed_s`) for the ZeRO stages present: (dense parameters', routed
    experts' or None) per stage, ZeRO-3's per layer over the stage's layers (the routed experts'
    too: their share of a layer's collective, a little high on a stage that also holds dense
    layers); `names` (default those of the plan's ZeRO stages, `zero_collectives`) which. Reads
    only COLLECTIVE_READS of the plan (and its ZeRO stages without `names`)."""
    names = zero_collectives(scn.plan.zero_stage) if names is None else names
    held = params if weights is None else weights
    split = scn.split
    out = []
    each = zip((split.first, split.middle_max, split.last), params, expert_params, held, strict=True)
    for index, (layers, n_params, n_expert, n_held) in enumerate(each):
        units = fsdp2_units(scn, first_stage=index == 0)
        dense = collective_prices(
            scn, fabric, place, n_params - n_expert, names, n_weights=n_held - n_expert, units=units, layers=layers
        )
        routed = (
            collective_prices(scn, fabric, place, n_expert, names, experts=True, layers=layers)
            if scn.model.is_moe
            else None
        )
        out.append((dense, routed))
    return tuple(out)


def fsdp2_units(scn: Scenario, first_stage: bool) -> tuple[Number, Number] | None:
    """FSDP2's exposed units of a stage (`physics.fsdp2.edge_units`), or None where no plan
    shards per parameter or the model's units hold routed experts."""
    per_param = as_bool(scn.plan.per_param_sharding)
    if not fsdp2.units_apply(scn.model) or (one_value(per_param) and not bool(per_param)):
        return None
    return fsdp2.edge_units(scn.model, scn.plan.tp, first_stage)
