"""Per micro-batch building blocks shared by the engines: what one layer, the embedding, the
output layer and a pipeline send cost on one GPU, split into compute and exposed TP
communication (forward and backward), with the TP communication hidden behind compute.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from shardwise.arrays import any_true, as_bool
from shardwise.engines.context_parallel import CpComm
from shardwise.engines.engine_kernels import fused_kernels
from shardwise.engines.recompute_costs import module_recompute_s, partitioned_checkpoint_s, selective_recompute_s
from shardwise.engines.tp_overlap import (
    UB_BULK_AG_SMS,
    UB_BULK_RS_SMS,
    UB_PIPELINED_RS_SMS,
    UB_PIPELINED_RS_SPLITS,
    UB_RING_EXCHANGE_SMS,
    TpComm,
    collective_sms,
    overlapped_exposed_s,
    own_rows_split_s,
)
from shardwise.physics.casts import gathered_shards, reduces_amax
from shardwise.physics.compute import (
    LayerTimes,
    layer_times,
    memory_s,
)
from shardwise.physics.flops import (
    LayerForward,
    input_gradient,
    layer_forward,
)
from shardwise.physics.hf_gpt2 import hf_gpt2_extra_s
from shardwise.physics.host_passes import drained_passes, forward_kernel_share
from shardwise.physics.linears import GemmTimes
from shardwise.physics.lora import lora_layer_times, lora_sp_gathers, norm_returned
from shardwise.physics.microbatch import plan_accumulate_bytes
from shardwise.physics.stack import (
    EAGER_ELEMENTWISE_KERNELS,
    graphed_layer_kernels,
    host_bound_s,
    layer_kernels,
    layout_copy_bytes,
)
from shardwise.specs import Gpu, Plan, Recompute, Scenario
from shardwise.specs._checks import Number


@dataclass(frozen=True)
class StageCost:
    """Seconds per micro-batch on one stage: compute and exposed TP communication, forward and
    backward, the TP communication hidden behind compute (reported, not added), the
    expert-parallel all-to-alls of mixture-of-experts layers, and the activation copies to and
    from host memory that compute does not hide (`physics.offload`)."""

    # every property is a function of the same element's fields (`engines.distinct._lazy`)
    ELEMENTWISE_PROPERTIES: ClassVar[bool] = True

    compute_forward_s: Number
    compute_backward_s: Number
    tp_forward_s: Number
    tp_backward_s: Number
    tp_hidden_s: Number = 0.0
    weight_grad_s: Number = 0.0  # the weight-gradient GEMMs inside compute_backward_s (what ZB-H1 defers)
    ep_forward_s: Number = 0.0  # expert-parallel all-to-alls of mixture-of-experts layers
    ep_backward_s: Number = 0.0
    offload_forward_s: Number = 0.0  # activation copies out, exposed
    offload_backward_s: Number = 0.0  # and back in
    # the host-bound wait inside compute_backward_s (`physics.stack.host_bound_s`): one number for
    # the layer's two passes, kept in the backward for the step; the GPU idles through it wherever
    # it falls, so data-parallel collectives may run through it beside either pass (`dp_step`)
    host_wait_s: Number = 0.0
    # of host_wait_s, the part inside compute_forward_s: where the GPU's queue runs dry between the
    # passes (`drained_passes`) each pass waits for its own kernels' issue
    host_wait_forward_s: Number = 0.0

    @property
    def forward_s(self) -> Number:
        return self.compute_forward_s + self.tp_forward_s + self.ep_forward_s + self.offload_forward_s

    @property
    def backward_s(self) -> Number:
        return self.compute_backward_s + self.tp_backward_s + self.ep_backward_s + self.offload_backward_s

    @property
    def total_s(self) -> Number:
        return self.forward_s + self.backward_s


FIELDS = (
    "compute_forward_s",
    "compute_backward_s",
    "tp_forward_s",
    "tp_backward_s",
    "tp_hidden_s",
    "weight_grad_s",
    "ep_forward_s",
    "ep_backward_s",
    "offload_forward_s",
    "offload_backward_s",
    "host_wait_s",
    "host_wait_forward_s",
)


def plan_layer_times(
    fwd: LayerForward, gpu: Gpu, plan: Plan, training: bool = True, moe_layer: bool = False, flash: Number = None
) -> LayerTimes:
    """One layer's kernels (`physics.compute.layer_times`) as `plan`'s stack runs them, before LoRA
    (`training` False: a serving engine's forward pass; `moe_layer`: its MLP is the shared experts,
    which the pre-MLP norm does not feed), with the norms LoRA's adapters have return 16 bits
    (`physics.lora.norm_returned`); `flash`: the fused attention's switch (default the plan's)."""
    sp = np.asarray(plan.sequence_parallel, dtype=bool)
    return layer_times(
        fwd, gpu, plan.precision, plan.flash_attention if flash is None else flash, plan.grad_accumulation_fusion,
        plan.attention_kernel, plan.eager_kernels, plan_accumulate_bytes(plan),
        plan.fp8_recipe, plan.cp_comm, gathered_shards=gathered_shards(plan.precision, plan.fp8_recipe, plan.tp, sp),
        training=training, norm_shards=np.where(sp, np.maximum(np.asarray(plan.tp, dtype=float), 1.0), 1.0),
        mlp_norm_fed=not moe_layer, norm_returned=norm_returned(fwd, plan.lora_rank, plan.lora_targets),
        cublas_before_11=plan.cublas_before_11,
    )  # fmt: skip


def _one_layer(g: GemmTimes, share: Number) -> GemmTimes:
    """A GEMM's times in one layer of its kind, from a hybrid mean layer's (weighted by `share`,
    `physics.mamba`; 0 where no layer has it)."""
    on = np.asarray(share, dtype=float) > 0
    scale = np.where(on, 1.0 / np.where(on, share, 1.0), 0.0)
    return GemmTimes(g.forward_s * scale, g.input_grad_s * scale, g.weight_grad_s * scale)


def add_costs(a: StageCost, b: StageCost) -> StageCost:
    """Two stage costs field by field (the same work, one after the other)."""
    return StageCost(*(getattr(a, f) + getattr(b, f) for f in FIELDS))


def layer_cost(
    scn: Scenario,
    comm: TpComm,
    q_len: Number | None = None,
    kv_len: Number | None = None,
    weight_bytes: Number | None = None,
    kv_bytes: Number | None = None,
    cp: Number = 1,
    cp_step: Number | CpComm = 0.0,
    ffn: Number | None = None,
    recompute: Number | None = None,
    moe_layer: bool = False,
    host_with: tuple[Number, Number] = (0.0, 0.0),
    training: bool = True,
) -> tuple[StageCost, LayerForward]:
    """One transformer layer, one micro-batch of `q_len` new tokens per sequence attending to
    `kv_len` tokens (training: both the sequence length), on one GPU.

    TP collectives per layer (Shoeybi et al. 2019 Sec. 3; with sequence parallelism Korthikanti
    et al. 2022 Sec. 4.2.2, Megatron-LM LinearWithGradAccumulationAndAsyncCommunication):

    ========================  =====================================  ==================================
    where                     without SP                             with SP
    ========================  =====================================  ==================================
    forward, QKV / MLP up     -                                      all-gather of the input
    forward, proj / MLP down  all-reduce of the output               reduce-scatter of the output
    backward, proj / down     -                                      all-gather of the output gradient
    backward, QKV / MLP up    all-reduce of dX (async: behind dW)    re-gather of X behind dX, reduce-
                                                                     scatter of dX behind dW (async)
    ========================  =====================================  ==================================

    `async_tp_grad` (Megatron's asynchronous gradient reduction) overlaps the backward
    collectives of QKV and MLP up with their own GEMMs as the table says; `tp_comm_overlap`
    (Transformer Engine userbuffers, Megatron-Core's `--tp-comm-overlap`; only with SP) also
    overlaps every forward collective with its own GEMM (all-gather with the GEMM that consumes
    it, reduce-scatter with the GEMM that produces it) and the backward all-gathers of proj and
    MLP down with their input-gradient GEMMs. Each collective hides behind its own GEMM only,
    and slows that GEMM by the SMs it occupies (`overlapped_exposed_s`).

    `tp_shard_overlap` (nanotron's asynchronous column and row linears, huggingface/nanotron
    src/nanotron/parallel/tensor_parallel/functional.py `_ColumnLinearAsyncCommunication`,
    `_RowLinearAsyncCommunication`): the forward all-gather of QKV and MLP up, and the backward
    all-gather of proj's and MLP down's output gradient, run beside the GEMM of the rank's own
    sequence shard (1/t of the rows, `torch.mm(..., out=same_device_shard)`) before the GEMMs of the
    gathered rows; the forward reduce-scatters stay exposed (`differentiable_reduce_scatter_sum`).
    Only with `async_tp_grad` (nanotron's tp_linear_async_communication, which switches both on;
    its synchronous linears gather whole before one GEMM).

    `ffn` is the width of the layer's dense MLP (default the model's; a mixture-of-experts layer
    passes its shared experts' width, 0 without them, and the MLP's collectives go with it).
    `recompute`: price the layer under this recomputation instead of the plan's. `moe_layer`: the
    layer is a mixture-of-experts one (its MLP is the shared experts; `Plan.recompute_modules`).
    `host_with`: (kernels, GPU seconds) of other work the host issues within the layer (an MoE
    layer's routed experts, `engines.moe.experts_parts`): one host-bound wait for them all.
    `training` False: a serving engine's forward pass (its own kernels, not Transformer Engine's
    training modules: no norm-written FP8, no amax all-reduce).
    """
    model, plan, gpu = scn.model, scn.plan, scn.cluster.gpu
    t, sp = plan.tp, np.asarray(plan.sequence_parallel, dtype=bool)
    ar_bytes = plan.micro_batch * (model.seq_len if q_len is None else q_len) * model.hidden * plan.bytes_per_element
    fwd = layer_forward(
        model,
        plan.micro_batch,
        t,
        sp,
        plan.bytes_per_element,
        q_len,
        kv_len,
        weight_bytes,
        kv_bytes,
        cp,
        ffn,
        eager=plan.eager_kernels,
        eager_rotary=plan.eager_rotary,
        document_len=plan.packed_document_len,
        yarn_rotary_eager=plan.yarn_rotary_eager,
        # a serving engine's count and fusions for a dense layer (`engines.engine_kernels`: its all-reduces
        # take the norms in below its message size, tokens x h x e); an MoE layer's attention half keeps
        # the shared count
        engine_kernels=0
        if moe_layer
        else fused_kernels(plan.serving_layer_kernels, plan.norm_fusion_max_bytes, t, ar_bytes),
        fused_residual_norms=0 if moe_layer else plan.fused_residual_norms,
    )
    mlp = np.asarray(fwd.has_mlp, dtype=float)  # 0: the MLP's collectives are not there either
    # a serving engine (`Plan.serving_layer_kernels` set) decodes one new token with a fused kernel even
    # where its prompts' attention is unfused (FasterTransformer's decoder masked multi-head attention,
    # `engines.engine_attention`)
    engine = bool(np.any(np.asarray(plan.serving_layer_kernels) > 0))
    decode = engine and not training and q_len is not None and bool(np.all(np.asarray(q_len) == 1))
    lt = plan_layer_times(fwd, gpu, plan, training, moe_layer, True if decode else None)
    lt = lora_layer_times(
        lt, fwd, plan.lora_rank, gpu, plan.precision, plan.grad_accumulation_fusion, plan.lora_targets, plan.fp8_recipe
    )
    # a stack's element-wise work beside its fused kernels (nanotron's eager GLU and layout copies,
    # Modalities' head-major copies, its output copy on SDPA's path)
    copies_f: Number = 0.0
    copies_b: Number = 0.0
    if any_true(as_bool(plan.eager_glu) | as_bool(plan.layout_copies) | as_bool(plan.head_copies)):
        kv = model.kv_heads * model.head_dim / t
        ffn_width = np.where(model.gated_mlp, fwd.mlp_down.k * fwd.has_mlp, 0.0)
        e = plan.bytes_per_element
        sdpa = np.char.startswith(np.asarray(plan.attention_kernel, dtype=str), "sdpa")
        (f_bytes, b_bytes), (f_kernels, b_kernels) = layout_copy_bytes(
            fwd.qkv.m, fwd.qkv.n, kv, ffn_width, e, plan.eager_glu, plan.layout_copies, plan.head_copies, sdpa
        )
        copies_f = np.where(f_bytes > 0, memory_s(f_bytes, gpu, f_kernels), 0.0)
        copies_b = np.where(b_bytes > 0, memory_s(b_bytes, gpu, b_kernels), 0.0)
    gpt2_f, gpt2_b = hf_gpt2_extra_s(fwd, gpu, plan)  # transformers v4.12's eager GPT-2 (`physics.hf_gpt2`)
    copies_f, copies_b = copies_f + gpt2_f, copies_b + gpt2_b
    scatter, reduce = comm.reduce_scatter, comm.all_reduce
    # the sequence-parallel gathers at the bytes the recipe gathers (`TpComm`, Transformer Engine's
    # quantised all-gathers): the forward's inputs, the inputs again for wgrad, the output gradients
    gather_in, gather_x, gather_dy = comm.gather_input, comm.gather_wgrad_input, comm.gather_output_grad
    sms, nccl_sms = gpu.sm_count, collective_sms(gpu)
    async_grad = np.asarray(plan.async_tp_grad, dtype=bool)
    ub = np.asarray(plan.tp_comm_overlap, dtype=bool) & sp
    # LoRA: the frozen base layers re-gather nothing for a weight gradient; the norm-fed layers an adapter
    # wraps gather their input in 16 bits (`physics.lora.lora_sp_gathers`)
    gather_q, gather_u, gather_x = lora_sp_gathers(
        fwd, plan.lora_rank, plan.lora_targets, ub, gather_in, comm.all_gather, gather_x
    )
    active = np.asarray(t) > 1
    # Transformer Engine's current scaling and NVFP4 share one scale per sequence-parallel tensor: its amax is
    # all-reduced over the TP group before the scale (`physics.casts.reduces_amax`), for the column-parallel
    # inputs (QKV or in_proj, MLP up) in the forward and the row-parallel output gradients (proj or out_proj,
    # MLP down) in the backward; the compute stream waits for it (exposed)
    amax: Number = 0.0
    if training and reduces_amax(plan.precision, plan.fp8_recipe):
        amax = np.where(sp & active, comm.amax_all_reduce, 0.0)

    def hide(comm_s: Number, gemm: Number, on: Number, comm_sms: Number, splits: Number = np.inf) -> Number:
        return overlapped_exposed_s(comm_s, np.where(on & active, gemm, 0.0), comm_sms, sms, splits)

    q, o, u, d = lt.qkv, lt.proj, lt.up, lt.down
    mix = fwd.mixer_share  # the layers with attention or a Mamba-2 mixer (1: every layer)
    if fwd.mamba is not None:  # a hybrid's mean layer: one layer of each kind's GEMMs beside its collectives
        q, o, u, d = (_one_layer(g, share) for g, share in ((q, mix), (o, mix), (u, mlp), (d, mlp)))
    ring = np.maximum(np.asarray(t, dtype=float), 1.0)  # ring exchange: one chunk per TP rank
    # nanotron's async linears (`tp_shard_overlap`): the gathered GEMMs in pieces, the own rows'
    # beside the all-gather (`tp_overlap.own_rows_split_s`); their cost beyond the whole GEMMs
    shard = as_bool(plan.tp_shard_overlap) & as_bool(plan.async_tp_grad) & sp & active & ~ub
    split_f: Number = 0.0
    split_b: Number = 0.0
    own: dict[str, Number] = {}
    if any_true(shard):
        gathered = {"q": fwd.qkv, "u": fwd.mlp_up, "o": input_gradient(fwd.attn_out), "d": input_gradient(fwd.mlp_down)}
        parts = {k: own_rows_split_s(g, t, gpu, plan.precision) for k, g in gathered.items()}
        own = {k: v[0] for k, v in parts.items()}
        split_f = np.where(shard, parts["q"][1] + mlp * parts["u"][1], 0.0)
        split_b = np.where(shard, parts["o"][1] + mlp * parts["d"][1], 0.0)

    def gather_beside(gather: Number, gemm: Number, name: str) -> Number:
        """An all-gather (`gather` seconds) of the sequence-parallel activation (or its gradient) that
        feeds `gemm`: overlapped by userbuffers' ring exchange; or (`tp_shard_overlap`) beside the
        GEMM of the rank's own rows."""
        with_ub = hide(gather, gemm, ub, UB_RING_EXCHANGE_SMS, ring)
        if name not in own:
            return with_ub
        beside = overlapped_exposed_s(gather, np.where(shard, own[name], 0.0), nccl_sms, sms)
        return np.where(ub, with_ub, beside)

    # forward
    sp_fwd_mlp = mlp * gather_beside(gather_u, u.forward_s, "u") + mlp * hide(
        scatter, d.forward_s, ub, UB_PIPELINED_RS_SMS, UB_PIPELINED_RS_SPLITS
    )
    sp_fwd = (
        mix * gather_beside(gather_q, q.forward_s, "q")
        + mix * hide(scatter, o.forward_s, ub, UB_PIPELINED_RS_SMS, UB_PIPELINED_RS_SPLITS)
        + sp_fwd_mlp
    )
    blocks = mix + mlp  # attention (or a hybrid's mixers) and (when there is one) the dense MLP
    tp_fwd = np.where(sp, sp_fwd, blocks * reduce) + blocks * amax
    tp_fwd_mlp = np.where(sp, sp_fwd_mlp, mlp * reduce) + mlp * amax  # the dense MLP's own (`Plan.recompute_modules`)
    tp_fwd_total = np.where(sp, mix * gather_q + mlp * gather_u + blocks * scatter, blocks * reduce) + blocks * amax
    # backward
    col_sms_ag = np.where(ub, UB_BULK_AG_SMS, nccl_sms)
    col_sms_rs = np.where(ub, UB_BULK_RS_SMS, nccl_sms)
    overlap_col = async_grad | ub
    sp_bwd = (
        mix * gather_beside(gather_dy, o.input_grad_s, "o")
        + mlp * gather_beside(gather_dy, d.input_grad_s, "d")
        + mix * hide(gather_x, q.input_grad_s, overlap_col, col_sms_ag)
        + mix * hide(scatter, q.weight_grad_s, overlap_col, col_sms_rs)
        + mlp * hide(gather_x, u.input_grad_s, overlap_col, col_sms_ag)
        + mlp * hide(scatter, u.weight_grad_s, overlap_col, col_sms_rs)
    )
    plain_bwd = mix * hide(reduce, q.weight_grad_s, async_grad, nccl_sms) + mlp * hide(
        reduce, u.weight_grad_s, async_grad, nccl_sms
    )
    tp_bwd = np.where(sp, sp_bwd, plain_bwd) + blocks * amax
    tp_bwd_total = np.where(sp, blocks * (gather_dy + gather_x + scatter), blocks * reduce) + blocks * amax
    # Context parallelism (ring attention, Megatron-Core / Transformer Engine "p2p"): cp - 1 steps
    # pass a KV chunk to the next rank while attention runs on the chunk in hand; a step costs
    # what its transfer exceeds one chunk's attention. Backward passes KV and dKV: twice the bytes.
    # PyTorch's ring: the KV all-gather hides behind the first step's attention, each step's dK,
    # dV behind the next step's, the last one not at all (`CpComm`).
    # The other communication types (`cp_step_s`) are collectives outside the attention: exposed.
    cp_step, extra_f, extra_b, gather, grad = cp_step if isinstance(cp_step, CpComm) else (cp_step, 0.0, 0.0, 0.0, 0.0)
    c = np.asarray(cp, dtype=float)
    steps = np.maximum(c - 1, 0.0)
    chunk_f, chunk_b = lt.attention_s / np.maximum(c, 1.0), lt.attention_bwd_s / np.maximum(c, 1.0)
    last = np.where(steps > 0, grad, 0.0)
    ring_b = np.maximum(0.0, gather - chunk_b) + steps * np.maximum(0.0, grad - chunk_b) + last
    cp_f = steps * np.maximum(0.0, cp_step - chunk_f) + np.maximum(0.0, gather - chunk_f) + extra_f
    cp_b = steps * np.maximum(0.0, 2 * cp_step - chunk_b) + ring_b + extra_b
    tp_fwd = tp_fwd + cp_f
    tp_bwd = tp_bwd + cp_b
    rc = np.asarray(plan.recompute if recompute is None else recompute)
    selective = selective_recompute_s(lt, model, plan.selective_policy)
    mlp_tp_redo = 0.0
    if plan.recompute_modules:
        selective = module_recompute_s(lt, fwd, scn, moe_layer)
        # a checkpointed MLP (or shared experts) reruns its forward TP collectives before the backward
        redone_mlp = ("shared_experts" if moe_layer else "mlp") in plan.recompute_modules
        mlp_tp_redo = np.where(rc == Recompute.SELECTIVE, tp_fwd_mlp, 0.0) if redone_mlp else 0.0
    redo = np.select(
        [rc == Recompute.FULL, rc == Recompute.SELECTIVE], [lt.forward_s + split_f + copies_f, selective], 0.0
    )
    part_f, part_b, part_gather = partitioned_checkpoint_s(scn, comm, fwd, rc)
    # the host issues every kernel; where they are shorter than that, the GPU waits for it. The
    # exposed TP and CP collectives keep the GPU busy too (NCCL kernels on its streams; the host
    # does not wait for them and goes on issuing), so the host's time is set against both.
    host: Number = 0.0
    host_forward: Number = 0.0
    if np.any(plan.host_kernel_s):
        kernels = layer_kernels(plan.eager_kernels, fwd.elementwise_kernels, rc == Recompute.FULL, plan.layer_host_ops)
        if plan.cuda_graph_scope:  # captured blocks replay from one graph launch each
            elementwise = np.where(as_bool(plan.eager_kernels), EAGER_ELEMENTWISE_KERNELS, fwd.elementwise_kernels)
            kernels = graphed_layer_kernels(kernels, elementwise, plan.cuda_graph_scope, moe_layer)
        exposed = tp_fwd + tp_bwd + np.where(rc == Recompute.FULL, tp_fwd, 0.0) + mlp_tp_redo
        busy = lt.forward_s + lt.backward_s + split_f + split_b + copies_f + copies_b + redo + exposed
        busy = busy + part_f + part_b + part_gather
        host = host_bound_s(busy + host_with[1], kernels + host_with[0], plan.host_kernel_s)
        if training and any_true(drained_passes(plan)):
            # the queue runs dry after each pass: the host issues a pass's kernels during that pass only
            share = forward_kernel_share(rc == Recompute.FULL, plan.layer_host_ops)
            busy_f = lt.forward_s + split_f + copies_f + part_f + tp_fwd + share * host_with[1]
            each = (kernels + host_with[0]) * plan.host_kernel_s
            host_f = np.maximum(0.0, share * each - busy_f)
            host_b = np.maximum(0.0, (1 - share) * each - (busy + host_with[1] - busy_f))
            drained = drained_passes(plan)
            host_forward = np.where(drained, host_f, 0.0)
            host = np.where(drained, host_f + host_b, host)
    cost = StageCost(
        compute_forward_s=lt.forward_s + split_f + copies_f + part_f + host_forward,
        compute_backward_s=lt.backward_s + split_b + copies_b + redo + host - host_forward + part_b,
        tp_forward_s=tp_fwd,
        tp_backward_s=tp_bwd + np.where(rc == Recompute.FULL, tp_fwd, 0.0) + mlp_tp_redo + part_gather,
        tp_hidden_s=np.maximum(0.0, tp_fwd_total + steps * cp_step + gather - tp_fwd)
        + np.maximum(0.0, tp_bwd_total + 2 * steps * cp_step + gather + c * grad - tp_bwd),
        weight_grad_s=lt.weight_grad_s,
        host_wait_s=host,
        host_wait_forward_s=host_forward,
    )
    return cost, fwd
