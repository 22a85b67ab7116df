"""A mixture-of-experts layer on one GPU, per micro-batch: the attention and the shared experts
as a dense layer prices them (TP-split, with their TP collectives), plus the routed experts
(`physics.moe`) and their token dispatch.

Per MoE layer and micro-batch the routed part adds, on the rank that waits longest (the
busiest EP rank, `Plan.expert_imbalance` x the mean):

- forward: router, permutation, all-to-all dispatch over the EP group, (etp > 1: all-gather over
  the ETP group), the grouped expert GEMMs and their activation, (reduce-scatter), all-to-all
  combine, un-permutation;
- backward: the same collectives in reverse (the gradients travel the same way) and the input-
  and weight-gradient GEMMs of the router and the experts;
- full recomputation repeats the forward, collectives included; torchtitan's per-op selective
  checkpointing the forward's compute, its all-to-alls only in eager PyTorch (`engines.moe_op_sac`);
- in training, the host issues the grouped GEMMs one local expert at a time (Transformer Engine's
  GroupedLinear), and splits, allocates and quantizes per expert around them
  (`physics.moe_grouped.grouped_linear_host_ops`; none under a full-iteration CUDA graph): with many experts
  per GPU and few tokens each, the GPU waits for it -- the forward's experts on their own, since the
  host's read of the split sizes just before them empties the GPU's queue (`physics.moe_grouped.post_sync_kernels`);
- in FP8 / MXFP8 / NVFP4 under the all-to-all and all-gather dispatchers, Transformer Engine's padding
  copies of the experts' inputs and outputs (`physics.moe_grouped.QUANTIZATION_PAD_*`).

The dispatch sends a copy per chosen expert (`Plan.moe_dispatcher` "alltoall", the NeMo
recipes'), one per node and per rank ("flex": DeepEP / HybridEP, `physics.moe_dispatch.dispatch_bytes`), or
all-gathers the ep x etp group's tokens once and reduce-scatters the outputs ("allgather",
Megatron-Core's default, `physics.moe_dispatch.allgather_dispatch_bytes`).
The all-to-alls are exposed: Megatron-Core runs them on the compute stream between the
permutation and the expert GEMMs that need their result, unless `Plan.moe_overlap` pairs the
forward of one micro-batch with the backward of another (`combined_1f1b`). Expert weights, gradients and
optimizer state are held by expert_dp = tp cp dp / (ep etp) replicas and reduced over them
(`engines.training`).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from shardwise.engines.costs import FIELDS, StageCost, layer_cost
from shardwise.engines.dp_dense import dp_gather_s, gathered_router_s, splits_over_group
from shardwise.engines.moe_op_sac import op_sac_expert_masks
from shardwise.engines.tp_overlap import TpComm, collective_sms, overlapped_exposed_s
from shardwise.physics import fp8_recipes
from shardwise.physics.collectives import Fabric
from shardwise.physics.compute import (
    BACKWARD_MEMORY_RATIO,
    attention_precision,
    cast_bytes_per_element,
    cast_kernels_per_tensor,
    linear_times,
    linears_times,
    memory_s,
)
from shardwise.physics.microbatch import plan_accumulate_bytes
from shardwise.physics.mmq_ids import experts_times
from shardwise.physics.moe import (
    CLAMP_FORWARD_KERNELS,
    capacity_load,
    dropping_factor,
    experts_forward,
    graphed_training_kernels,
    routed_tokens,
    routes_own_tokens,
)
from shardwise.physics.moe_dispatch import (
    SYNC_HOST_OPS,
    allgather_dispatch_bytes,
    dispatch_bytes,
    dispatch_metadata_bytes,
)
from shardwise.physics.moe_grouped import (
    MOE_POST_SYNC_KERNELS,
    QUANTIZATION_PAD_DISPATCHERS,
    QUANTIZATION_PAD_KERNELS,
    capacity_aligned,
    grouped_linear_host_ops,
    post_sync_kernels,
    quantization_padding_bytes,
)
from shardwise.physics.params import (
    dense_layer_params_per_gpu,
    moe_layer_params_per_gpu,
    stage_expert_params_per_gpu,
    stage_params_per_gpu,
)
from shardwise.physics.stack import BACKWARD_KERNEL_RATIO, host_bound_s
from shardwise.specs import Model, Recompute, Scenario
from shardwise.specs._checks import Number
from shardwise.specs.hardware import is_narrow
from shardwise.specs.stages import StageSplit, moe_split


def model_moe_split(model: Model, split: StageSplit) -> StageSplit:
    """How many layers of each stage are mixture-of-experts. A hybrid's stage of n mean layers
    holds n times the pattern's share of E layers (`physics.mamba`: a stage is priced as its count
    of mean layers, not its own slice of the pattern)."""
    if model.is_hybrid:
        q = model.moe_layers / len(model.hybrid_pattern)
        return StageSplit(split.pp, *(q * np.asarray(getattr(split, f), dtype=float) for f in STAGE_COUNTS))
    return moe_split(split, model.layers, model.dense_layers, model.moe_every)


STAGE_COUNTS = ("first", "last", "middle_total", "middle_max", "middle_min")


def experts_cost(
    scn: Scenario,
    fabric: Fabric,
    place: dict[str, Number],
    q_len: Number | None = None,
    weight_bytes: Number | None = None,
    training: bool = False,
    extend: Number | None = None,
) -> StageCost:
    """`experts_parts` with the experts' own host-bound wait (`physics.stack.host_bound_s`) in
    their backward (and `host_wait_s`): the routed experts priced alone."""
    cost, kernels, busy = experts_parts(scn, fabric, place, q_len, weight_bytes, training, extend)
    if not training or not np.any(scn.plan.host_kernel_s):
        return cost
    host = host_bound_s(busy, kernels, scn.plan.host_kernel_s)
    return replace(cost, compute_backward_s=cost.compute_backward_s + host, host_wait_s=cost.host_wait_s + host)


def experts_parts(
    scn: Scenario,
    fabric: Fabric,
    place: dict[str, Number],
    q_len: Number | None = None,
    weight_bytes: Number | None = None,
    training: bool = False,
    extend: Number | None = None,
) -> tuple[StageCost, Number, Number]:
    """The routed experts of one MoE layer (module docstring) for `q_len` new tokens per sequence
    (default the sequence); `scn` as one CP rank sees it. Without sequence parallelism (serving)
    every TP rank holds all the tokens: no dispatch, each rank runs its experts (ep x etp = tp) on
    the copies routed to them and the outputs are all-reduced over the TP group. `training`: the
    host issues the grouped GEMMs one expert at a time (`physics.moe.training_kernels`), and the GPU
    waits where they are shorter than `Plan.host_kernel_s` each (`physics.stack.host_bound_s`, as a
    dense layer's kernels). Returns the cost without that wait, the kernels the host issues and
    the GPU's time on them (0 and 0 outside training), for one wait over the whole layer.
    `extend`: where the pass holds prompt tokens (default: more than one new token a sequence),
    read by SGLang's gather alone (`physics.moe_dispatch.DP_GATHER_BYTES_PER_ELEMENT`)."""
    model, plan, gpu = scn.model, scn.plan, scn.cluster.gpu
    e = plan.bytes_per_element
    s_q = model.seq_len if q_len is None else q_len
    sp = np.asarray(plan.sequence_parallel, dtype=bool)
    tokens = routed_tokens(model, plan.micro_batch, s_q, plan.tp, sp)
    # each rank routes tokens of its own (training: sequence parallelism splits the TP group's) unless
    # TP without sequence parallelism replicates them over the TP GPUs (serving)
    sharded = routes_own_tokens(sp, plan.tp)
    etp = plan.expert_tp
    # token dropping (`physics.moe.dropping_factor`); padded to capacity, the all-to-all dispatcher's
    # splits are static: no count gather, no host read of them (`physics.moe.capacity_copies`)
    factor = dropping_factor(plan.moe_capacity_factor, sp, plan.tp, training)
    padded = (np.asarray(factor) > 0) & np.asarray(plan.moe_pad_to_capacity, dtype=bool)
    ef = experts_forward(model, tokens, plan.ep, etp, e, plan.expert_imbalance, weight_bytes, sharded, factor, padded)
    fused = plan.grad_accumulation_fusion
    add = plan_accumulate_bytes(plan)
    up, down = linears_times(ef.gemms, gpu, plan.precision, fused, add)
    if gpu.mmq_token_tiles and not training:  # llama.cpp's MMQ on a prompt's experts (`physics.mmq_ids`)
        up, down = experts_times((up, down), ef.gemms, tokens, gpu, plan.precision)
    router = linear_times(ef.router, gpu, attention_precision(plan.precision), fused, add)  # a 16-bit GEMM
    if np.any(over := splits_over_group(model, plan)):  # SGLang's gate on the G T gathered tokens (`engines.dp_dense`)
        router = replace(router, forward_s=np.where(over, gathered_router_s(scn, tokens), router.forward_s))
    elementwise = memory_s(ef.elementwise_bytes, gpu, ef.elementwise_kernels)
    # a variant's eager kernels in Megatron-Core's training layer (GPT-OSS's clamp and output bias,
    # `physics.moe`), each pass its own bytes; serving engines fuse both into their MoE kernels
    eager_f = memory_s(ef.eager_bytes, gpu, ef.eager_kernels) if training else 0.0
    eager_b = memory_s(ef.eager_backward_bytes, gpu, ef.eager_backward_kernels) if training else 0.0
    cast_f = cast_b = 0.0
    # Transformer Engine's padding of the experts' counts for narrow GEMMs (`physics.moe_grouped.QUANTIZATION_PAD_*`)
    pads = training and is_narrow(plan.precision) and not fp8_recipes.is_torchao(plan.fp8_recipe)
    if pads and plan.moe_dispatcher in QUANTIZATION_PAD_DISPATCHERS:
        pad = np.where(padded & capacity_aligned(ef, plan.precision), 0.0, quantization_padding_bytes(ef, model, e))
        cast_f = cast_b = memory_s(pad, gpu, kernels=QUANTIZATION_PAD_KERNELS * (np.asarray(pad) > 0))
    if is_narrow(plan.precision):  # Transformer Engine's grouped linear layers cast like the others
        per_element = cast_bytes_per_element(plan.precision, plan.fp8_recipe, gpu.fp8_any_layout)
        kernels = 2 * cast_kernels_per_tensor(plan.precision, plan.fp8_recipe)  # fc1's input, fc2's input
        cast_f = cast_f + memory_s(per_element * sum(g.m * g.k * g.batch for g in ef.gemms), gpu, kernels=kernels)
        cast_b = cast_b + memory_s(per_element * sum(g.m * g.n * g.batch for g in ef.gemms), gpu, kernels=kernels)
    flex = plan.moe_dispatcher == "flex"
    load = capacity_load(plan.expert_imbalance, factor, padded)  # padded copies travel too
    intra, inter = dispatch_bytes(model, tokens, plan.ep, place["ep"], e, load, dedup=flex)
    a2a = np.where(sharded, fabric.group(plan.ep, place["ep"], etp).exchange(intra, inter), 0.0)  # replicated: none
    etp_group = fabric.group(etp, place["etp"])
    split = np.asarray(etp) > 1
    gather = 2 * np.where(split, etp_group.all_gather(ef.etp_gather_bytes), 0.0)  # and the reduce-scatter
    # unsharded (serving, ep x etp = tp): one all-reduce of the outputs over the TP group, fused with
    # the shared experts' when there are some (their dense MLP already pays it in `layer_cost`)
    reduce = fabric.group(plan.tp, place["tp"]).all_reduce(ef.etp_reduce_bytes) if not model.shared_experts else 0.0
    gather = np.where(sharded, gather, reduce)
    dispatch_f = dispatch_b = 2 * a2a  # dispatch and combine (their gradients travel the same way)
    if plan.moe_dispatcher in ("allgather", "dp-gather"):  # one gather over the ep x etp group replaces both
        size = np.asarray(plan.ep) * np.asarray(etp)
        group = fabric.group(size, np.minimum(np.asarray(place["ep"]) * np.asarray(place["etp"]), size))
        # serving: vLLM's allgather_reducescatter, SGLang's dp_gather (`EnginePreset.moe_dispatcher`)
        hidden, routing = allgather_dispatch_bytes(model, tokens, size, e, top_k_only=not training)
        scatter = group.reduce_scatter(hidden)  # the combine; the backward of the gather
        moved = group.all_gather(hidden + routing) + scatter
        if plan.moe_dispatcher == "dp-gather":
            prompts = np.asarray(s_q) > 1 if extend is None else np.asarray(extend, dtype=bool)
            moved = dp_gather_s(model, fabric, place, plan, tokens, prompts)
        dispatch_f = np.where(sharded, moved, 0.0)
        dispatch_b = np.where(sharded, 2 * scatter, 0.0)
        gather = np.where(sharded, 0.0, gather)  # the ETP ranks are in the gather's group
    dispatched = sharded & (np.asarray(plan.ep) * np.asarray(etp) > 1)
    if plan.moe_dispatcher == "alltoall" and training:  # Megatron-Core's metadata: counts' gather, probs' all-to-all
        counts, probs_in, probs_out = dispatch_metadata_bytes(model, tokens, plan.ep, place["ep"])
        size = np.asarray(plan.ep) * np.asarray(etp)
        group = fabric.group(size, np.minimum(np.asarray(place["ep"]) * np.asarray(place["etp"]), size))
        probs = np.where(sharded, fabric.group(plan.ep, place["ep"], etp).exchange(probs_in, probs_out), 0.0)
        dispatch_f = dispatch_f + np.where(dispatched & ~padded, group.all_gather(counts), 0.0) + probs
        dispatch_b = dispatch_b + probs  # the probabilities' gradient
    # the host reads the split sizes before the tokens move (`physics.moe_dispatch.SYNC_HOST_OPS`): the GPU waits
    # for it once per MoE layer and forward pass, eager training only
    graphed = "full_iteration" in tuple(plan.cuda_graph_scope or ())
    host_s = SYNC_HOST_OPS * np.asarray(plan.host_kernel_s, dtype=float)
    sync = np.where(dispatched & ~padded, host_s, 0.0) if training and not graphed else 0.0
    forward = router.forward_s + up.forward_s + down.forward_s + elementwise + eager_f + cast_f + sync
    grads = sum(g.input_grad_s + g.weight_grad_s for g in (router, up, down))
    backward = grads + BACKWARD_MEMORY_RATIO * elementwise + eager_b + cast_b
    full = np.asarray(plan.recompute) == Recompute.FULL
    redo = np.where(full, forward, 0.0)
    # Megatron-Core's selective modules (`Plan.recompute_modules`): moe_act reruns the experts'
    # activation (output-discarding checkpoint, experts.py `activation_recompute`); moe the whole
    # routed layer, dispatch and combine included (transformer_layer.py, MoETransformerLayer
    # `moe_layer_recompute`: tensor_parallel.checkpoint of the MoE layer)
    modules = plan.recompute_modules
    selective = np.asarray(plan.recompute) == Recompute.SELECTIVE
    whole_moe = selective & ("moe" in modules)
    if "moe_act" in modules and "moe" not in modules:
        # the activation reruns, and with it GPT-OSS's clamp (`physics.moe.CLAMP_FORWARD_PASSES`)
        clamp = memory_s(ef.clamp_bytes, gpu, CLAMP_FORWARD_KERNELS * (np.asarray(ef.clamp_bytes) > 0)) * training
        redo = redo + np.where(selective, memory_s(ef.activation_bytes, gpu, kernels=1) + clamp, 0.0)
    # torchtitan's per-op SAC: the router, permutations and grouped GEMMs again, not the host sync
    # (its D2H copy is saved); eager, the all-to-alls too (`engines.moe_op_sac`)
    op_redo, op_comm, w2_kept = op_sac_expert_masks(plan)
    redo = np.where(whole_moe, forward, np.where(op_redo, forward - sync - w2_kept * down.forward_s, redo))
    rerun = full | whole_moe  # the forward again from its host sync on
    again = rerun | op_comm  # the forward's collectives again
    kernels = busy = 0.0
    if training and np.any(plan.host_kernel_s):
        kernels = graphed_training_kernels(ef, BACKWARD_KERNEL_RATIO, rerun | op_redo, plan.cuda_graph_scope)
        passes = 1.0 + np.asarray(rerun | op_redo, dtype=float)
        # padded to capacity, nothing reads the split sizes: the host runs ahead through the whole layer
        # and its exposed expert collectives keep the GPU busy too, as a dense layer's TP collectives do
        # (`engines.costs`; not under combined 1F1B, whose all-to-alls run beside the other micro-batch's
        # compute). A dropless layer's read empties the queue: its dispatch leads the experts' section
        comm_f = dispatch_f + gather
        comm = comm_f + dispatch_b + gather + np.where(again, comm_f, 0.0)
        busy = forward + backward + redo + np.where(padded & ~np.asarray(plan.moe_overlap, dtype=bool), comm, 0.0)
        if not graphed:  # GroupedLinear's own host work per local expert (`physics.moe_grouped.GROUPED_*`)
            own_f, own_b = grouped_linear_host_ops(model.experts / np.asarray(plan.ep), plan.precision, plan.fp8_recipe)
            kernels = kernels + own_f * passes + own_b
            # after the host's read of the split sizes the GPU's queue is empty: that part of the forward
            # waits for its own host work (`physics.moe_grouped.post_sync_kernels`), less what the GPU spends on
            # the dispatch meanwhile (the first of the forward's two all-to-alls, or gathers, and the ETP
            # all-gather: the combine comes after the experts, too late to hide their host work); taken
            # out of the layer's one wait. Not beside combined 1F1B (`Plan.moe_overlap`), whose other
            # micro-batch's backward is queued with it
            section_k = post_sync_kernels(ef, own_f)
            post = memory_s(ef.post_sync_bytes, gpu, MOE_POST_SYNC_KERNELS)
            section_s = up.forward_s + down.forward_s + post + eager_f + cast_f
            alone = dispatched & ~np.asarray(plan.moe_overlap, dtype=bool) & ~padded  # padded: no read
            lead_s = comm_f / 2
            wait = np.where(alone, host_bound_s(section_s + lead_s, section_k, plan.host_kernel_s), 0.0)
            synced = 1.0 + np.asarray(rerun, dtype=float)  # a per-op recompute's section follows no sync
            kernels = kernels - np.where(alone, synced * section_k, 0.0)
            busy = busy - np.where(alone, synced * section_s, 0.0)
            forward = forward + wait
            redo = redo + np.where(rerun, wait, 0.0)
    cost = StageCost(
        compute_forward_s=forward,
        compute_backward_s=backward + redo,
        tp_forward_s=gather,
        tp_backward_s=gather + np.where(again, gather, 0.0),
        weight_grad_s=router.weight_grad_s + up.weight_grad_s + down.weight_grad_s,
        ep_forward_s=dispatch_f,  # dispatch and combine
        ep_backward_s=dispatch_b + np.where(again, dispatch_f, 0.0),  # their gradients (and the forward redone)
    )
    return cost, kernels, busy


def moe_layer_cost(
    scn: Scenario,
    comm: TpComm,
    fabric: Fabric,
    place: dict[str, Number],
    kv_len: Number,
    cp: Number = 1,
    cp_step: Number = 0.0,
    q_len: Number | None = None,
    weight_bytes: Number | None = None,
    kv_bytes: Number | None = None,
    training: bool = False,
) -> StageCost:
    """One MoE layer: attention and shared experts (a dense layer whose MLP is the shared
    experts, none without them) plus the routed experts, for `q_len` new tokens per sequence
    attending to `kv_len` (serving may store weights and KV cache narrower); `training`: a
    training step's layer, whose all-to-alls `Plan.moe_overlap` may hide (`combined_1f1b`). The
    host issues the whole layer's kernels, so the GPU waits for it once: max(0, all its kernels x
    `Plan.host_kernel_s` - the layer's GPU time), not a wait for each part."""
    model = scn.model
    shared = model.shared_experts * model.expert_ffn_hidden
    routed, kernels, busy = experts_parts(scn, fabric, place, q_len, weight_bytes, training)
    dense, _ = layer_cost(
        scn,
        comm,
        q_len,
        kv_len,
        weight_bytes,
        kv_bytes,
        cp,
        cp_step,
        ffn=shared,
        moe_layer=True,
        host_with=(kernels, busy),
        training=training,
    )
    cost = StageCost(*(getattr(dense, f) + getattr(routed, f) for f in FIELDS))
    return combined_1f1b(cost, scn) if training else cost


def combined_1f1b(cost: StageCost, scn: Scenario) -> StageCost:
    """A training layer's all-to-alls under `Plan.moe_overlap` (Megatron-Core's combined 1F1B,
    megatron/core/pipeline_parallel/combined_1f1b.py): the forward of micro-batch i + 1 and the
    backward of micro-batch i run together layer by layer, the one's dispatch and combine on a
    second stream beside the other's attention and expert GEMMs. A pair's all-to-alls then cost
    what `engines.tp_overlap.overlapped_exposed_s` says for a window of the layer's forward and
    backward compute, the communication kernels taking NCCL's (or DeepEP's, set alike in the
    recipes) 16 SMs from the GEMMs. Of m micro-batches, m - 1 forward/backward pairs form: the
    first forward and the last backward run alone, fully exposed."""
    plan = scn.plan
    on = np.asarray(plan.moe_overlap, dtype=bool)
    if not np.any(on):
        return cost
    comm = cost.ep_forward_s + cost.ep_backward_s
    window = cost.compute_forward_s + cost.compute_backward_s
    paired = overlapped_exposed_s(comm, window, collective_sms(scn.cluster.gpu), scn.cluster.gpu.sm_count)
    m = np.maximum(np.asarray(plan.num_micro_batches, dtype=float), 1.0)
    exposed = ((m - 1) * paired + comm) / m
    scale = np.where(on & (np.asarray(comm) > 0), exposed / np.maximum(comm, 1e-30), 1.0)
    return replace(cost, ep_forward_s=cost.ep_forward_s * scale, ep_backward_s=cost.ep_backward_s * scale)


def moe_layers(
    scn: Scenario,
    comm: TpComm,
    fabric: Fabric,
    place: dict[str, Number],
    split: StageSplit,
    kv_len: Number,
    cp: Number = 1,
    cp_step: Number = 0.0,
    q_len: Number | None = None,
    weight_bytes: Number | None = None,
    kv_bytes: Number | None = None,
    training: bool = False,
) -> tuple[StageCost, StageSplit] | None:
    """What `engines.stage_assembly.stages` needs for a mixture of experts (an MoE layer's cost and each
    stage's MoE layers); None for a dense model."""
    if not scn.model.is_moe:
        return None
    cost = moe_layer_cost(scn, comm, fabric, place, kv_len, cp, cp_step, q_len, weight_bytes, kv_bytes, training)
    return cost, model_moe_split(scn.model, split)


def stage_layer_params(model: Model, plan: object, split: StageSplit) -> tuple[Number, Number, Number]:
    """Parameters of the transformer layers alone on one GPU of the first, fullest middle and last
    stage (dense layers split by tp; MoE layers with their experts / ep, 1 / etp of each)."""
    per_layer = dense_layer_params_per_gpu(model, plan.tp)  # type: ignore[attr-defined]
    counts = (split.first, split.middle_max, split.last)
    if not model.is_moe:
        return tuple(n * per_layer for n in counts)  # type: ignore[return-value]
    n_moe = model_moe_split(model, split)
    other, experts = moe_layer_params_per_gpu(model, plan.tp, plan.ep, plan.expert_tp)  # type: ignore[attr-defined]
    moe = (n_moe.first, n_moe.middle_max, n_moe.last)
    return tuple((n - k) * per_layer + k * (other + experts) for n, k in zip(counts, moe, strict=True))  # type: ignore[return-value]


def _experts(model: Model, plan: object, split: StageSplit) -> tuple[StageSplit, Number, Number] | None:
    return (model_moe_split(model, split), plan.ep, plan.expert_tp) if model.is_moe else None  # type: ignore[attr-defined]


def stage_params(model: Model, plan: object, split: StageSplit) -> tuple[Number, Number, Number]:
    """`physics.params.stage_params_per_gpu` with the experts' layout of `plan` (any model)."""
    return stage_params_per_gpu(model, plan.tp, plan.pp, split, _experts(model, plan, split))  # type: ignore[attr-defined]


def stage_expert_params(model: Model, plan: object, split: StageSplit) -> tuple[Number, Number, Number]:
    """The routed-expert parameters among `stage_params` (0 for a dense model)."""
    experts = _experts(model, plan, split)
    if experts is None:
        return 0.0, 0.0, 0.0
    return stage_expert_params_per_gpu(model, plan.tp, plan.pp, experts)  # type: ignore[attr-defined]
