"""What a pipeline stage pays once per micro-batch beyond its layers' forward and backward
kernels, as the software stacks' code does it. These costs are why, at one global batch, many
small micro-batches are slower per token than a few large ones (besides the GEMMs' own
efficiency against their row count, `physics.gemm`), and why that gap differs between stacks.

Weight-gradient accumulation, bytes moved per weight per micro-batch after the weight-gradient
GEMM (which writes 2 bytes per weight when it does not accumulate itself):

=============================================  =====  ==========================================
stack                                          bytes  what runs
=============================================  =====  ==========================================
Megatron-Core, --gradient-accumulation-fusion  (8)    inside the GEMM's epilogue: read and write
                                                      the fp32 main_grad (`physics.linears.
                                                      FUSED_ACCUMULATE_BYTES`), no other kernel
Megatron-LM without fusion                     10     main_grad.add_(param.grad): read 2 + 4,
                                                      write 4, one kernel (megatron/core/
                                                      distributed DDP's backward hook)
DeepSpeed BF16_Optimizer (ZeRO 0/1, bf16)      18     update_hp_grads() after every micro-batch's
                                                      backward (deepspeed/runtime/pipe/engine.py
                                                      `_exec_backward_pass`; bf16_optimizer.py):
                                                      hp_grad.add_(lp.grad.to(fp32)), a cast
                                                      (read 2, write a 4-byte copy) then an add
                                                      (read 4 + 4, write 4), per parameter tensor
DeepSpeed ZeRO 0/1 in fp16                     6      autograd's AccumulateGrad adds each micro-
                                                      batch's gradient into the 16-bit param.grad
                                                      (read 2 + 2, write 2): zero/stage_1_and_2.py
                                                      hooks gradients only with partition_gradients
                                                      or overlap_comm (both off for stage 1)
PyTorch FSDP1 (FullyShardedDataParallel)       4      the parameters are views of the unit's flat
                                                      parameter (torch.split, torch/distributed/
                                                      fsdp/_flat_param.py `_get_unflat_views_
                                                      aligned`, torch 2.x), so autograd's split
                                                      backward concatenates the unit's gradients
                                                      into the flat gradient (read 2, write 2) on
                                                      the compute stream; the reduce dtype's cast
                                                      and the pre-division run on FSDP's post-
                                                      backward stream (_runtime_utils.py)
PyTorch FSDP2 (fully_shard), gradients         0      autograd's AccumulateGrad takes the GEMM's
reduced every micro-batch (torchtitan,                gradient as param.grad (nothing to add to);
torchtune, OLMo-core)                                 post_backward copies it into the reduce-
                                                      scatter input (`physics.stack.per_param_
                                                      sharding_bytes`) and drops it; the reduced
                                                      1/dp shard is added to the sharded fp32
                                                      grad on the reduce-scatter stream, beside
                                                      compute (_fsdp_collectives.py
                                                      foreach_reduce: `sharded_param.grad.
                                                      _local_tensor += new_sharded_grad`)
PyTorch FSDP2, gradient sync off until the     10     post_backward keeps the unsharded gradient:
last micro-batch (set_requires_gradient_              with reduce_dtype fp32 it casts it (`.to`,
sync(False): torch.distributed.pipelining's           read 2, write 4) once, then adds each
backward_maybe_with_nosync; NeMo AutoModel's          micro-batch's in (`unsharded_accumulated_
get_sync_ctx)                                         grad += grad`: read 4 + 2, write 4;
                                                      _fsdp_param.py to_accumulated_grad_if_
                                                      needed, accumulate_unsharded_grad_if_
                                                      needed); with reduce_dtype bf16 autograd
                                                      adds into param.grad (read 2 + 2, write 2)
=============================================  =====  ==========================================

FSDP2's rows as read in pytorch/pytorch torch/distributed/fsdp/_fully_shard/ (_fsdp_param_group.py
`post_backward`, _fsdp_param.py, _fsdp_collectives.py `foreach_reduce`; torch/distributed/
_composable/fsdp/ in torch 2.4-2.5, the same code) from torch 2.4 to 2.13. Which row a stack takes
is its training loop's: torchtitan (trainer.py's accumulation loop), torchtune's distributed recipes
and OLMo-core (`_train_microbatch_context`: set_is_last_backward only) leave gradient sync on, so the
fsdp2, torchtitan and torchtitan-compile presets state `fsdp2_grad_sync: every-micro-batch` and 0
bytes; under pipeline parallelism (pp > 1) torch.distributed.pipelining's `backward_maybe_with_nosync`
turns it off for every backward but the last one whatever the stack's loop does
(`FSDP2_DEFERRED_ADD_BYTES`, `accumulate_bytes`). NeMo AutoModel turns it off on every micro-batch
but the last (`get_sync_ctx`, `defer_fsdp_grad_sync` true by default): its preset states
`fsdp2_grad_sync: last-micro-batch` (`Plan.fsdp2_grad_sync`, stated, not inferred from the bytes)
and 0 bytes of its own, so the deferred add is FSDP2's 10. With sync off, the reduce-scatter's
copy-in runs once a step, not once a micro-batch (`fsdp2_deferred_sync`): the last micro-batch's
post_backward hands `foreach_reduce` the gradient accumulated in the reduce dtype (read and write 4
bytes a weight in fp32, 2 in bf16), where a micro-batch that reduces copies its 16-bit gradient in
(read 2, write the reduce dtype's).

A 16-bit gradient buffer (`Plan.grad_reduce_bf16`) turns an fp32 main-grad add into a 16-bit one,
6 bytes (`BF16_MAIN_GRAD_ADD_BYTES`); a stack whose own path moves fewer (FSDP1's 4) keeps its own.

Pipeline transfers per micro-batch and model chunk under a blocking schedule:
- Megatron-LM (megatron/core/pipeline_parallel/p2p_communication.py): the steady state's
  send_forward_recv_backward and send_backward_recv_forward each pair a send to one neighbour
  with a receive from the other in one batch_isend_irecv, so the two run at once: two transfer
  times per micro-batch.
- DeepSpeed's PipelineEngine (deepspeed/runtime/pipe/schedule.py TrainSchedule:
  RecvActivation, SendActivation, RecvGrad, SendGrad; each a blocking p2p.send or p2p.recv on
  the stage's stream): four transfer times per micro-batch.

nanotron's pipeline handshakes (huggingface/nanotron src/nanotron/parallel/pipeline_parallel/
p2p.py, main of February 2025): before each tensor, `_send_meta` sends two metadata tensors, each
copied to the GPU from pageable host memory (`copy_` of a CPU tensor: the host waits for the
stream), and reads two of them back in asserts; `_recv_meta` receives them and reads them into
Python (`bool`, `__index__`, the dtype lookup, the storage size, `as_strided`'s shape, stride and
offset): each read a device-to-host sync on an empty queue. The GPU idles through all of it. A
layer boundary sends `hidden_states` and `sequence_mask` forward and one gradient back. In host
units (`physics.stack`: an ATen op 1, a light op 0.3, a collective call 2, a wait 1, a host sync 1):

=====================  ===============================================================  =====
per tensor             what runs                                                          units
=====================  ===============================================================  =====
sent                   torch.tensor 0.3, copy_ (sync) 1, send 2, two asserts (syncs) 2,   11.6
                       torch.tensor 0.3, copy_ (sync) 1, send 2, isend 2, wait 1
received               recv 2, unbind into 7 scalars 3.1, add 1, compare and bool 2,      29.4
                       slice 1, recv 2, shape and stride slices 3, dtype, requires_grad
                       and contiguity lookups 3, empty of the storage size 2,
                       as_strided (7 reads) 7.3, irecv 2, wait 1
=====================  ===============================================================  =====

A middle stage sends and receives 3 tensors a micro-batch: 123 units (1.2 ms at 10 us); the first
and last stages half of it (`Plan.p2p_host_ops` is the middle stage's; the engines charge the
end stages half).

Size, worked from the physics alone (no run fitted): a 176B model (hidden 14336, 70 layers) at
tp 4, pp 12 on A100 80GB keeps 3.67e9 weights per GPU; DeepSpeed's bf16 accumulation moves 20
bytes per weight per micro-batch against the fused path's 8, 44 GB, about 24 ms at 1.8 TB/s; its
two extra activation transfers (2048 tokens x 14336 x 2 bytes, 58.7 MB, sent as 1/tp by each TP
rank and re-gathered, engine.py `is_pipe_partitioned`) add a few ms over the network. Per layer
(6 per stage) that is 4-5 ms per micro-batch; the two steps issue 33 quotes for such a stack
(143.3 s at micro-batch 1, 123.7 s at 4), solved for a part per sequence and a part per
micro-batch, need about 165 ms a micro-batch on a stage against the 42-50 ms priced, while the part
per sequence agrees within 3%. What else DeepSpeed's engine does per micro-batch (seven host
syncs on a middle stage: ThroughputTimer.start twice, the pipe engine's and DeepSpeedEngine.forward's,
PartitionedTensor.from_meta's tolist() three times and to_meta's blocking upload twice; three TP
re-gathers of 58.7 MB, each with 5.5 times its bytes of copies, 0.34 ms more than the four
all-gathers priced; the activation checkpoint's RNG bookkeeping, host only) adds under a
millisecond to what is priced (docs/model.md, "Fourth pass"). GLM-130B's two speed tests on the same
engine at micro-batch 1 (PUB-1107, PUB-1108) cost 425 ms per added micro-batch against the
model's 460 ms, which leaves no room for a cost of that size in the engine's per-micro-batch path.
The first stage
also pays the embedding's dense gradient (a zeroed 16-bit vocab/tp x h table, then the same
18-byte add: 0.9e9 weights at vocabulary 250,880, about 8 ms, `engines.stage_ends`) and the last
the fp32 loss (52 bytes a logit, `physics.stack`). docs/model.md ("What the DeepSpeed pipeline
engine does per micro-batch", its "Re-read for issue #33" and "Third pass") lists what was
checked, file by file, with the versions read; its "How large the micro-batch effect is"
splits a stage's time per sequence into these parts (`examples/microbatch_trend.py --costs`) and
sizes the rest (host syncs, waves, host-bound kernels).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from shardwise.physics.compute import UNFUSED_ACCUMULATE_BYTES
from shardwise.specs._checks import Number
from shardwise.specs.plan_choices import LAST_MICRO_BATCH

if TYPE_CHECKING:
    from shardwise.specs import Plan

# bytes per weight per micro-batch, after a weight-gradient GEMM that wrote 2 (table above)
MAIN_GRAD_ADD_BYTES = UNFUSED_ACCUMULATE_BYTES  # 10: Megatron-LM's main_grad.add_
CAST_THEN_ADD_BYTES = 18.0  # DeepSpeed BF16_Optimizer.update_hp_grads
AUTOGRAD_FP16_ADD_BYTES = 6.0  # DeepSpeed ZeRO 0/1 in fp16: param.grad += grad, 16 bits
FSDP1_FLAT_GRAD_CAT_BYTES = 4.0  # PyTorch FSDP1: split's backward cat into the flat gradient
# PyTorch FSDP2 with gradient sync off (reduce_dtype fp32): unsharded_accumulated_grad += grad, read
# 4 + 2, write 4 (the first micro-batch's cast, read 2 and write 4, less); bf16: autograd's 6
FSDP2_DEFERRED_ADD_BYTES = 10.0
# PyTorch FSDP2 reducing every micro-batch: nothing added on the compute stream (table above)
FSDP2_REDUCED_ADD_BYTES = 0.0
# into a 16-bit gradient buffer (`Plan.grad_reduce_bf16`, Megatron-Core's grad_reduce_in_fp32=False,
# whose main_grad takes the parameter's dtype): main_grad.add_ reads 2 + 2 and writes 2
BF16_MAIN_GRAD_ADD_BYTES = 6.0
# transfer times per micro-batch and model chunk of a blocking pipeline schedule
PAIRED_TRANSFERS = 2  # Megatron: send and receive batched together, two directions at once
SERIAL_TRANSFERS = 4  # DeepSpeed PipelineEngine: each send and receive on its own

# nanotron's handshake per tensor sent and received (table above) and a middle stage's count
NANOTRON_SEND_HOST_OPS = 0.3 + 1 + 2 + 2 + 0.3 + 1 + 2 + 2 + 1
NANOTRON_RECV_HOST_OPS = 2 + 3.1 + 1 + 2 + 1 + 2 + 3 + 3 + 2 + 7.3 + 2 + 1
NANOTRON_TENSORS_PER_BOUNDARY = 3  # hidden_states and sequence_mask forward, one gradient back
NANOTRON_P2P_HOST_OPS = round(NANOTRON_TENSORS_PER_BOUNDARY * (NANOTRON_SEND_HOST_OPS + NANOTRON_RECV_HOST_OPS), 1)


def handshake_shares(p: Number) -> tuple[Number, Number]:
    """(end stage, middle stage) shares of `Plan.p2p_host_ops`: a middle stage has two neighbours,
    the first and last one (0 without pipelining)."""
    on = np.asarray(p) > 1
    return np.where(on, 0.5, 0.0), np.where(on, 1.0, 0.0)


def pipeline_transfers(serial: Number, blocking: Number) -> Number:
    """Transfer times a stage spends per micro-batch and model chunk: four where blocking sends
    and receives run one after another, two where they are paired (or run beside compute)."""
    serial = np.asarray(serial, dtype=bool) & np.asarray(blocking, dtype=bool)
    return np.where(serial, SERIAL_TRANSFERS, PAIRED_TRANSFERS)


def fsdp2_deferred_sync(per_param_sharding: Number, pp: Number, grad_sync: str | Number) -> Number:
    """FSDP2 with its gradient sync off until the last micro-batch (table above): under pipeline
    parallelism (torch.distributed.pipelining's backward_maybe_with_nosync) or where the stack's loop
    turns it off (`grad_sync`, `Plan.fsdp2_grad_sync` "last-micro-batch": NeMo AutoModel's
    get_sync_ctx). Then the reduce-scatter's copy-in (`physics.stack.per_param_sharding_bytes`)
    runs once a step, on the last micro-batch: `foreach_reduce` copies the gradient accumulated in
    the reduce dtype (`unsharded_accumulated_grad_data`; read and write the reduce dtype's bytes)
    into its input (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py post_backward: `if not
    self.reduce_grads: ... to_accumulated_grad_if_needed(); return`). Not modelled: a step of one
    micro-batch under NeMo AutoModel syncs it (its copy-in reads the 16-bit gradient, 2 bytes a weight
    less at fp32)."""
    deferred = (np.asarray(pp) > 1) | (np.asarray(grad_sync) == LAST_MICRO_BATCH)
    return np.asarray(per_param_sharding, dtype=bool) & deferred


def plan_deferred_sync(plan: Plan) -> Number:
    """`fsdp2_deferred_sync` of a plan's fields."""
    return fsdp2_deferred_sync(plan.per_param_sharding, plan.pp, plan.fsdp2_grad_sync)


def fsdp2_kept_gathered(per_param_sharding: Number, pp: Number) -> Number:
    """FSDP2 under pipeline parallelism: the stage keeps its weights gathered and its gradients
    unreduced until the last backward (`physics.memory_stacks.PP_FSDP_SOURCE`), so its copies and
    collectives run once a step (`engines.fsdp2_copies`, `engines.dp_step.comm_micro_batches`)."""
    return np.asarray(per_param_sharding, dtype=bool) & (np.asarray(pp) > 1)


def accumulate_bytes(unfused_accumulate_bytes: Number, grad_reduce_bf16: Number, deferred: Number = False) -> Number:
    """Bytes per weight per micro-batch that a stack's unfused add of a 16-bit weight gradient
    into its accumulator moves: the stack's own (`Plan.unfused_accumulate_bytes`), or, into a
    bf16 gradient buffer (`Plan.grad_reduce_bf16`), BF16_MAIN_GRAD_ADD_BYTES where the stack's
    own moves more (FSDP1's concatenation, 4, moves the same at either reduce dtype). Where FSDP2
    keeps gradient sync off until the last micro-batch (`deferred`, `fsdp2_deferred_sync`: under
    pipeline parallelism or the stack's own loop) it adds the unsharded gradients: at least
    FSDP2_DEFERRED_ADD_BYTES (table above)."""
    deferred = np.asarray(deferred, dtype=bool)
    own = np.where(deferred, np.maximum(unfused_accumulate_bytes, FSDP2_DEFERRED_ADD_BYTES), unfused_accumulate_bytes)
    bf16_add = np.minimum(BF16_MAIN_GRAD_ADD_BYTES, own)
    return np.where(np.asarray(grad_reduce_bf16, dtype=bool), bf16_add, own)


def plan_accumulate_bytes(plan: Plan) -> Number:
    """`accumulate_bytes` of a plan's fields, FSDP2's deferred sync (`plan_deferred_sync`) included."""
    return accumulate_bytes(plan.unfused_accumulate_bytes, plan.grad_reduce_bf16, plan_deferred_sync(plan))
