"""The choices of a parallel plan's categorical fields: the pipeline schedules and recomputation
modes (`Schedule`, `Recompute`: names, enum members or integer codes, so a planner can evaluate many
plans in one vectorized call), the MoE dispatchers, attention kernels, CP communication types, and
which fields are execution flags and booleans (`specs.plan`).
"""

from __future__ import annotations

from enum import IntEnum


class Schedule(IntEnum):
    """Pipeline schedules (Huang et al. 2019 GPipe; Narayanan et al. 2021 1F1B and interleaved;
    Qi et al. 2023 ZB-H1, which splits the backward pass into input and weight gradients)."""

    GPIPE = 0
    ONE_F_ONE_B = 1
    INTERLEAVED = 2
    ZB_H1 = 3

    @property
    def label(self) -> str:
        return {0: "gpipe", 1: "1f1b", 2: "interleaved", 3: "zb-h1"}[int(self)]


class Recompute(IntEnum):
    """Activation recomputation (Korthikanti et al. 2022): none, selective (attention core), full."""

    NONE = 0
    SELECTIVE = 1
    FULL = 2

    @property
    def label(self) -> str:
        return self.name.lower()


# "dp-gather": SGLang's data-parallel attention without an all-to-all backend, set by its serving
# engine preset (`engines.engine_presets.EnginePreset.moe_dispatcher`); not a command-line choice
MOE_DISPATCHERS = ("alltoall", "flex", "allgather", "dp-gather")
# "sdpa-mem-efficient": PyTorch SDPA's memory-efficient backend (xFormers' CUTLASS kernels), what SDPA
# runs where its flash backend cannot (before sm80: `requests.attention`)
# "flash3": FlashAttention-3 (Hopper), "flash4": FlashAttention-4 (CuTe DSL; Hopper and data-centre Blackwell),
# the flash-attn packages called directly or by HF's attn_implementation; where they run FlashAttention-2's
# code, priced as "flash2" (`physics.attention_flash34`). `requests.fields.ATTENTION_KERNEL_CHOICES` spells
# the same list (tests/test_flash34.py holds them equal)
ATTENTION_KERNELS = ("fused", "flash2", "sdpa-flash2", "te-flash2", "sdpa-mem-efficient", "flash3", "flash4")
# the loss kernel: the stack's own, Transformer Engine's parallel_cross_entropy, or an eager cross-entropy
# on the 16-bit logits without an fp32 cast (held by the caller through the backward pass, or freed
# before it), or the fp32 loss compiled alone (`physics.memory_losses`)
LOSS_KERNELS = ("stack", "te", "eager-bf16", "eager-bf16-freed", "compiled")
# the optimizer's state per parameter (`physics.memory.optimizer_bytes_per_param`): an fp32 master
# weight and fp32 Adam moments; the master as the 16 low bits beside a bf16 weight; bf16 moments and
# no master; bf16 moments beside an fp32 master or its 16-bit remainders (Megatron-Core's
# precision-aware optimizer with --exp-avg-dtype / --exp-avg-sq-dtype bf16)
OPTIMIZER_STATES = ("fp32", "fp32-remainders", "bf16", "fp32-bf16-moments", "fp32-remainders-bf16-moments")
# the built-in stacks whose memory `Plan.memory_stack` may name: the keys of `physics.memory_stacks.STACKS`
# (tests/test_framework_files.py holds the two equal, and every framework preset among them). Listed
# here, not read from there: specs never import physics, and a plan with a typo ("fsdpp") is refused
# when built, as any other field's choice is, not priced as Megatron-Core's memory.
MEMORY_STACKS = (
    *("megatron-core", "megatron-lm-2022", "megatron-lm-2021", "megatron-deepspeed", "nanotron", "internevo"),
    *("fsdp", "fsdp2", "torchtitan", "torchtitan-compile", "deepspeed", "colossalai", "composer", "modalities"),
    *("hf-transformers", "nemo-automodel", "maxtext", "paxml", "nanotron-defaults", "flash-attn-trainer"),
)


# the kernels that run FlashAttention-2's code (`physics.attention_kernels`): the flash-attn package,
# PyTorch SDPA's build of it, and Transformer Engine's FlashAttention backend (flash-attn's kernels
# called by TE, with TE's own context-parallel ring: NeMo's launcher set NVTE_FUSED_ATTN=0 in 2024)
FLASH2_KERNELS = ("flash2", "sdpa-flash2", "te-flash2")
# the kernels whose context parallelism is PyTorch's ring (`physics.attention`): FlashAttention-2's and
# SDPA's memory-efficient backend, which the same ring calls where flash cannot run
TORCH_RING_KERNELS = ("flash2", "sdpa-flash2", "sdpa-mem-efficient")

CP_COMM_TYPES = ("p2p", "all_gather", "a2a")

# When FSDP2 (`Plan.per_param_sharding`) reduce-scatters a micro-batch's gradients at pp = 1
# (`Plan.fsdp2_grad_sync`, `physics.microbatch.fsdp2_deferred_sync`): on every micro-batch (FSDP2's
# own default, requires_gradient_sync True; torchtitan, torchtune, OLMo-core) or only on the last,
# the others' accumulated unsharded (set_requires_gradient_sync(False): NeMo AutoModel's get_sync_ctx)
EVERY_MICRO_BATCH, LAST_MICRO_BATCH = "every-micro-batch", "last-micro-batch"
FSDP2_GRAD_SYNCS = (EVERY_MICRO_BATCH, LAST_MICRO_BATCH)

# How a software stack executes a layout: what a framework preset sets (presets/frameworks.yaml,
# with its default zero_stage) and the execution flags of the CLI.
EXECUTION_FLAGS = (
    "async_tp_grad",
    "tp_comm_overlap",
    "overlap_grad_reduce",
    "overlap_param_gather",
    "grad_accumulation_fusion",
    "overlap_p2p",
    "pipeline_sync",
    "scatter_gather",
)
BOOLEAN_FIELDS = (
    "sequence_parallel",
    "flash_attention",
    "moe_overlap",
    "moe_pad_to_capacity",
    "eager_kernels",
    "eager_rotary",
    "yarn_rotary_eager",
    "per_param_sharding",
    "fsdp2_expert_mesh_of_one",
    "p2p_serial",
    "tp_shard_overlap",
    "eager_glu",
    "layout_copies",
    "head_copies",
    "hf_gpt2_ops",
    "cublas_before_11",
    "grad_reduce_bf16",
    "spmd_grad_reduce",
    "scan_unpipelined",
    "functional_a2a",
    "zero1_grad_all_reduce",
    "aligned_chunk_sync",
    "expandable_segments",
    "partition_activations",
    *EXECUTION_FLAGS,
)
