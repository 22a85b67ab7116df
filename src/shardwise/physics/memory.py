"""Memory per GPU: weights, gradients, optimizer state, activations. The activations live in
`physics.memory_activations`, the stacks' extra terms in `physics.memory_stacks`; both re-exported here.

Model state (Rajbhandari et al. 2020, ZeRO, Sec. 3.1; mixed-precision Adam): 16-bit weights,
gradients in the reduction dtype (Megatron-LM accumulates and reduces BF16 gradients in fp32,
FP16 ones in fp16), and 12 bytes of fp32 master weight, momentum and variance per parameter.
ZeRO stage 1 partitions the optimizer state over data-parallel ranks, stage 2 also the
gradients, stage 3 also the weights.

Activations: Korthikanti et al. 2022's per-layer table and the micro-batches each pipeline stage
holds, in `physics.memory_activations`.

Beyond the model state and those activations a training process holds (each term below with its
source; `STACKS` says where software stacks differ, keyed by `Plan.framework`):
- the loss's logits at their peak (`logits_bytes`: bytes per logit element per stack),
- one layer's gradients during its backward pass (`backward_transient_bytes`),
- communication buffers: NCCL's per communicator (`physics.memory_runtime`), torch DDP's bucket copies,
  DeepSpeed's reduction buckets, ZeRO-3's gathered units and reduce-scatter inputs,
- the CUDA context and library workspaces (`physics.memory_runtime`),
- what PyTorch's caching allocator reserves but cannot hand out (`StackMemory.fragmentation`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from shardwise.arrays import as_array, as_bool, ifelse
from shardwise.physics.flops import DROPOUT_MASK_BYTES
from shardwise.physics.memory_activations import (
    FLASH_STATS_BYTES,
    TE_FP8_INPUT_BYTES,
    TE_NVFP4_INPUT_BYTES,
    layer_activation_bytes,
    layers_in_flight,
    mlp_checkpointed_bytes,
    moe_checkpointed_shared_bytes,
    moe_score_copy_bytes,
    op_sac_layer_bytes,
    op_sac_routed_bytes,
    routed_expert_activation_bytes,
)
from shardwise.physics.memory_cached import step_cached_bytes
from shardwise.physics.memory_stacks import (
    ALLOCATOR_FRAGMENTATION,
    DEEPSPEED_REDUCE_BUCKET_BYTES,
    EXPANDABLE_SEGMENTS_FRAGMENTATION,
    STACKS,
    TE_CROSS_ENTROPY_LOGIT_BYTES,
    ZERO3_GATHERED_UNITS,
    StackMemory,
    allocator_fraction,
    backward_transient_bytes,
    held_outputs_bytes,
    logits_bytes,
    stack_memory,
)
from shardwise.specs._checks import Number
from shardwise.units import GIB

# Adam: fp32 master weight, momentum, variance (Rajbhandari et al. 2020, ZeRO, Sec. 3.1: K = 12).
OPTIMIZER_BYTES_PER_PARAM = 12.0
MASTER_WEIGHT_BYTES = 4.0  # of those 12, the fp32 master weight
# What other optimizers keep per parameter (`Plan.optimizer_state`), as (master weight, moments):
# - "fp32-remainders": the fp32 master's 16 low bits (an int16) beside the bf16 weight, which holds
#   its 16 high bits: Transformer Engine's FusedAdam `store_param_remainders` (transformer_engine/
#   pytorch/optimizers/fused_adam.py; "Works only when param type is BF16 and master weight type is
#   FP32"), which Megatron-Core's precision-aware optimizer passes from core 0.12 with TE >= 2.1
#   (megatron/core/optimizer/__init__.py, commit f2ece182d8; distrib_optimizer.py keeps no fp32 shard
#   of its own then), and Apex's DistributedFusedAdam `store_param_remainders` (apex/contrib/
#   optimizers/distributed_fused_adam.py: `param_remainders_shard`, int16), which NeMo 1 sets for
#   bf16 O2 training with fp32 optimizer state (megatron_base_model.py setup_optimization): 2 + 4 + 4.
# - "bf16": Apex's DistributedFusedAdam with dtype bf16 keeps exp_avg and exp_avg_sq in bf16 and, the
#   state's dtype being the model's, no copy of the weights (NeMo 1: `store_params` False): 0 + 2 + 2.
# - "fp32-bf16-moments", "fp32-remainders-bf16-moments": Megatron-Core's precision-aware optimizer
#   with bf16 exp_avg and exp_avg_sq (OptimizerConfig exp_avg_dtype, exp_avg_sq_dtype; TE FusedAdam
#   keeps the moments in that dtype), beside Megatron-Core's own fp32 master shard where the run's FP8
#   recipe is current scaling or MXFP8 (optimizer_config.py `use_precision_aware_optimizer_no_fp8_or_ds_fp8`
#   False: "Master weight is managed by MCore when main_params_dtype is fp32", optimizer/__init__.py,
#   core 0.13 on), else TE's master as remainders: 4 + 4 and 2 + 4. Megatron-Bridge's DeepSeek-V3
#   recipe sets it (recipes/deepseek/deepseek_v3.py, v0.1.0rc3 to v0.5.1).
# The fp16 runs keep their fp32 master: the remainders need bf16 weights.
OPTIMIZER_STATE_BYTES = {
    "fp32": (4.0, 8.0),
    "fp32-remainders": (2.0, 8.0),
    "bf16": (0.0, 4.0),
    "fp32-bf16-moments": (4.0, 4.0),
    "fp32-remainders-bf16-moments": (2.0, 4.0),
}
# Serving's runtime reserve (engines/serving.py, engines/inflight.py): CUDA context, cuBLAS
# workspaces, NCCL buffers and allocator slack, typically 1-3 GB. A project estimate with no
# published source. Training itemises the same things per plan (`runtime_reserved_bytes`).
RUNTIME_RESERVED_BYTES = 2.0 * GIB


def weight_bytes_per_param(precision: str) -> float:
    """16-bit weights (fp8 training keeps 16-bit weights and casts per GEMM)."""
    return 2.0


def grad_bytes_per_param(precision: str, reduce_bf16: Number = False) -> Number:
    """fp32 gradient buffers for BF16 and FP8 (Megatron-LM forces fp32 accumulation for BF16),
    fp16 gradients for FP16 (Megatron-LM 2021 default). `reduce_bf16` (`Plan.grad_reduce_bf16`):
    the buffer and its data-parallel reduction in the 16-bit parameter dtype instead (Megatron-LM
    `--grad-reduce-in-bf16`, megatron/training/arguments.py; Megatron-Core's grad_reduce_in_fp32
    False, whose buffers take the parameter's dtype, core/distributed/param_and_grad_buffer.py
    group_params_for_buffers): 2."""
    if precision == "fp16":
        return 2.0
    return ifelse(as_bool(reduce_bf16), 2.0, 4.0)


def optimizer_bytes_per_param(state: str = "fp32", precision: str = "bf16") -> float:
    """Bytes of optimizer state per parameter (master weight and Adam moments) for `Plan.optimizer_state`
    (`OPTIMIZER_STATE_BYTES`): 12 for "fp32", 10 for "fp32-remainders" with bf16 weights, 4 for "bf16"."""
    return sum(_optimizer_state(state, precision))


def master_weight_bytes(state: str = "fp32", precision: str = "bf16") -> float:
    """Of `optimizer_bytes_per_param`, the bytes of the master weight (4 for an fp32 one)."""
    return _optimizer_state(state, precision)[0]


def megatron_optimizer_state(state: str, precision: str, fp8_recipe: str) -> str:
    """The optimizer state Megatron-Core keeps for a planned one under the precision-aware optimizer
    (the rule above OPTIMIZER_STATE_BYTES): its own fp32 master shard where the FP8 recipe is current
    scaling or MXFP8, else Transformer Engine's FusedAdam keeps the master, as 16-bit remainders
    beside bf16 weights, whole in fp32 beside fp16 ones (`_optimizer_state`). NVFP4 (not read from
    Megatron-Core's source here) and other states pass unchanged."""
    if precision not in ("bf16", "fp16", "fp8", "mxfp8"):
        return state
    mcore_master = precision == "mxfp8" or (precision == "fp8" and fp8_recipe == "te_current")
    remainders = not mcore_master and precision != "fp16"
    if state in ("fp32-bf16-moments", "fp32-remainders-bf16-moments"):
        return "fp32-remainders-bf16-moments" if remainders else "fp32-bf16-moments"
    if state == "fp32-remainders" and not remainders:
        return "fp32"
    return state


def _optimizer_state(state: str, precision: str) -> tuple[float, float]:
    if state not in OPTIMIZER_STATE_BYTES:
        allowed = ", ".join(OPTIMIZER_STATE_BYTES)
        raise ValueError(f"optimizer_state {state!r} is not allowed; choose {allowed}")
    if state.startswith("fp32-remainders") and precision == "fp16":
        state = state.replace("fp32-remainders", "fp32")
    return OPTIMIZER_STATE_BYTES[state]


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes on one GPU (the fullest pipeline stage)."""

    # every property is a function of the same element's fields (`engines.distinct._lazy`)
    ELEMENTWISE_PROPERTIES: ClassVar[bool] = True

    weights_bytes: Number
    gradients_bytes: Number
    optimizer_bytes: Number
    activations_bytes: Number  # saved activations, the loss's logits, a layer's backward gradients
    reserved_bytes: Number  # CUDA context, library workspaces, NCCL's buffers
    buffers_bytes: Number = 0.0  # gradient copies and buckets, ZeRO-3's gathered units
    allocator_bytes: Number = 0.0  # what the caching allocator reserves but cannot hand out
    # what it keeps cached beside a step of whole-shard flat tensors and would release before running
    # out (`physics.memory_cached`): in a measured reserved or device peak, not in `total_bytes`
    cached_bytes: Number = 0.0

    @property
    def total_bytes(self) -> Number:
        return (
            self.weights_bytes
            + self.gradients_bytes
            + self.optimizer_bytes
            + self.activations_bytes
            + self.buffers_bytes
            + self.allocator_bytes
            + self.reserved_bytes
        )

    def as_dict(self) -> dict[str, Number]:
        return {
            "weights": self.weights_bytes,
            "gradients": self.gradients_bytes,
            "optimizer": self.optimizer_bytes,
            "activations": self.activations_bytes,
            "buffers": self.buffers_bytes,
            "allocator": self.allocator_bytes,
            "reserved": self.reserved_bytes,
            "total": self.total_bytes,
        }


def zero_shards(dp: Number, zero_stage: Number) -> tuple[Number, Number, Number]:
    """Over how many ranks ZeRO shards the (weights, gradients, optimizer state): dp from stage
    3, 2 and 1 on, else 1 (Rajbhandari et al. 2020). Under hybrid sharding `dp` is the shard
    group (`Plan.zero_ranks`: FSDP HYBRID_SHARD keeps the whole state once per shard group)."""
    z = as_array(zero_stage)
    return ifelse(z >= 3, dp, 1), ifelse(z >= 2, dp, 1), ifelse(z >= 1, dp, 1)


def model_state_bytes(
    params: Number,
    dp: Number,
    zero_stage: Number,
    precision: str,
    reduce_bf16: Number = False,
    optimizer_state: str = "fp32",
) -> tuple[Number, Number, Number]:
    """(weights, gradients, optimizer) bytes for `params` parameters under a ZeRO stage."""
    return sharded_state_bytes(params, zero_shards(dp, zero_stage), precision, reduce_bf16, optimizer_state)


def sharded_state_bytes(
    params: Number,
    shards: tuple[Number, Number, Number],
    precision: str,
    reduce_bf16: Number = False,
    optimizer_state: str = "fp32",
) -> tuple[Number, Number, Number]:
    """`model_state_bytes` with the ZeRO `shards` (`zero_shards`) already known (`reduce_bf16`:
    `grad_bytes_per_param`'s; `optimizer_state`: `Plan.optimizer_state`, `optimizer_bytes_per_param`)."""
    w, g, o = shards
    weights = params * weight_bytes_per_param(precision) / w
    grads = params * grad_bytes_per_param(precision, reduce_bf16) / g
    optim = params * optimizer_bytes_per_param(optimizer_state, precision) / o
    return weights, grads, optim


__all__ = [
    "ALLOCATOR_FRAGMENTATION",
    "DEEPSPEED_REDUCE_BUCKET_BYTES",
    "DROPOUT_MASK_BYTES",
    "EXPANDABLE_SEGMENTS_FRAGMENTATION",
    "FLASH_STATS_BYTES",
    "MASTER_WEIGHT_BYTES",
    "OPTIMIZER_BYTES_PER_PARAM",
    "OPTIMIZER_STATE_BYTES",
    "RUNTIME_RESERVED_BYTES",
    "STACKS",
    "TE_CROSS_ENTROPY_LOGIT_BYTES",
    "TE_FP8_INPUT_BYTES",
    "TE_NVFP4_INPUT_BYTES",
    "ZERO3_GATHERED_UNITS",
    "MemoryBreakdown",
    "StackMemory",
    "allocator_fraction",
    "backward_transient_bytes",
    "grad_bytes_per_param",
    "held_outputs_bytes",
    "layer_activation_bytes",
    "layers_in_flight",
    "logits_bytes",
    "master_weight_bytes",
    "mlp_checkpointed_bytes",
    "model_state_bytes",
    "moe_checkpointed_shared_bytes",
    "moe_score_copy_bytes",
    "op_sac_layer_bytes",
    "op_sac_routed_bytes",
    "optimizer_bytes_per_param",
    "routed_expert_activation_bytes",
    "sharded_state_bytes",
    "stack_memory",
    "step_cached_bytes",
    "weight_bytes_per_param",
    "zero_shards",
]
