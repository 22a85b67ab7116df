"""The parallel plan (the "Execution" of Calculon's split): how one model is laid out and run.

Categorical fields (schedule, recompute) accept names ('1f1b'), enum members, integer codes,
or numpy arrays of codes, so a planner can evaluate many plans in one vectorized call. Their
choices are `specs.plan_choices`, the checks run when a plan is built `specs.plan_checks`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from shardwise.recompute_policies import SELECTIVE_POLICIES  # noqa: F401 (re-exported: the Plan's checks)
from shardwise.specs._checks import Number
from shardwise.specs.memo import hash_once

# re-exported: the names the engines, the CLI and the tests read here
from shardwise.specs.plan_checks import (  # noqa: F401
    _RULE_FIELDS,
    _plain_rules_hold,
    check_fields,
    check_rules,
    check_rules_once,
)
from shardwise.specs.plan_choices import (  # noqa: F401
    ATTENTION_KERNELS,
    EXECUTION_FLAGS,
    FLASH2_KERNELS,
    FSDP2_GRAD_SYNCS,
    LOSS_KERNELS,
    OPTIMIZER_STATES,
    TORCH_RING_KERNELS,
    Recompute,
    Schedule,
)
from shardwise.specs.plan_layout import PlanLayout
from shardwise.specs.zero3 import Zero3Buckets


@hash_once
@dataclass(frozen=True)
class Plan(PlanLayout):
    """tp x pp x dp x cp GPUs; `vpp` virtual stages (model chunks) per GPU for the interleaved
    schedule; `cp` context-parallel ranks split every sequence (Megatron-Core's ring attention:
    each rank holds 1/cp of the tokens, load-balanced for causal masks, and passes its keys and
    values around the CP ring; gradients are reduced over dp x cp). `cp_comm` is Megatron-Core's
    `--cp-comm-type`: "p2p" (the ring, overlapped with the attention of the chunk in hand),
    "all_gather" (the whole sequence's keys and values gathered before attention, their gradients
    reduce-scattered after) or "a2a" (DeepSpeed-Ulysses: all-to-alls turn the sequence split into
    a split of the heads before attention and back after; heads and KV heads per TP rank must
    divide by cp).

    Mixture-of-experts layers (Megatron-Core's "MoE parallel folding"): the tp x cp x dp GPUs of a
    stage are regrouped for the experts into `ep` expert-parallel ranks, each holding experts / ep
    experts, times `etp` expert-tensor-parallel ranks that split each expert's matrices (0: etp =
    tp, Megatron-Core's default), times the expert-data-parallel ranks that hold the same experts
    (`expert_dp`). Tokens reach their experts by all-to-all over the EP group.
    `expert_imbalance` is the busiest EP rank's tokens over the mean (1: a balanced router);
    `moe_dispatcher` how tokens travel: "alltoall" (a copy per chosen expert, the NeMo recipes'),
    "flex" (DeepEP / HybridEP: one copy per node and per rank that holds a chosen expert, as the
    NeMo recipes run DeepSeek-V3 and Qwen3), "allgather" (Megatron-Core's default: the ep x etp
    group all-gathers its tokens once and reduce-scatters the outputs; vLLM's default under
    data-parallel attention), or "dp-gather" (serving only, SGLang's data-parallel attention: the
    group gathers its tokens in 16 bits and routes them on every rank; a batch with prompt tokens
    gathers and combines by all-reduces, `physics.moe_dispatch.DP_GATHER_BYTES_PER_ELEMENT`);
    `moe_overlap`: the forward of one micro-batch and the backward of another run layer by layer
    together, so each one's all-to-alls hide behind the other's compute (Megatron-Core's combined 1F1B,
    `--overlap-moe-expert-parallel-comm`; training only, pp = 1 or the interleaved schedule).
    `moe_capacity_factor` > 0 drops tokens in training: each expert takes at most ceil(T k / E x
    factor) copies from each rank that routes to it (Megatron-Core's `--moe-expert-capacity-factor`);
    `moe_pad_to_capacity` pads every expert to exactly that many (`--moe-pad-expert-input-to-capacity`,
    the all-to-all dispatcher's drop-and-pad path: static splits, no host read of them;
    `physics.moe.capacity_copies`). 0: dropless.

    `shard_group` (hybrid sharded data parallelism: PyTorch FSDP's HYBRID_SHARD, FSDP2's HSDP
    mesh of torchtitan's data_parallel_shard_degree x data_parallel_replicate_degree, MaxText's
    ici_fsdp_parallelism inside a slice with dcn_data_parallelism across them): ZeRO shards the
    model state over groups of that many consecutive dp x cp ranks instead of all of them, and the
    dp x cp / shard_group groups are replicas that all-reduce their gradient shards
    (`engines.data_parallel`). 0: all dp x cp ranks, plain ZeRO / FSDP FULL_SHARD. Needs ZeRO >= 1
    and must divide dp x cp.

    `global_batch` and `micro_batch` are in sequences; m = global_batch / (dp * micro_batch)
    micro-batches pass through the pipeline per step. `pipeline_flushes` > 1 runs them as that many
    separate schedules of m / pipeline_flushes micro-batches, each filling and draining the
    pipeline: NeMo AutoModel calls its torch.distributed.pipelining schedule once per local batch
    (nemo_automodel/recipes/llm/train_ft.py: n_microbatches = local_batch_size //
    pp_microbatch_size, and gradient accumulation over global_batch / (local_batch_size x dp)
    local batches). 1: one schedule per step (Megatron-LM, torchtitan).

    `recompute_layers` > 0 recomputes the first that many layers of every model chunk (of every
    stage without interleaving) whole, keeping only their input, as Megatron-LM's
    `--recompute-granularity full --recompute-method block --recompute-num-layers N` does
    (megatron/core/transformer/transformer_block.py, `_checkpointed_forward`); the other layers
    keep what `recompute` says (none: everything). A count, not a fraction: Megatron states one per
    chunk, and IBM fms-fsdp's fraction of checkpointed blocks (no pipeline) is a whole number of
    blocks of the model (`specs.stages.recomputed_split`). 0: none; with recompute="full" every
    layer is recomputed anyway.

    `recompute_modules`: what recompute="selective" redoes, by Megatron-Core's module names
    (`--recompute-modules`, megatron/core/transformer/transformer_config.py): "core_attn" the
    attention core, "moe_act" the experts' activation, "layernorm" the norms not fused into a linear
    layer (an MoE layer's pre-MLP norm, latent attention's input norm), "mla_up_proj" latent
    attention's up-projections and rotary parts, "mlp" a dense layer's MLP, "moe" the whole MoE
    layer (router, dispatch and combine, experts), "shared_experts" the shared experts. Empty: the
    stack's `selective_policy` (Megatron's own default is core_attn alone). Needs
    recompute="selective" and the Megatron policy ("attention").

    `mtp_layers` > 0 trains that many multi-token-prediction modules on the last pipeline stage
    (DeepSeek-V3 Sec. 2.2; Megatron-Core `--mtp-num-layers`), each one more transformer layer of
    the decoder's kind, a 2h -> h projection, the embedding and the output layer with its loss
    again (`engines.mtp`). 0: none.

    `cuda_graph_scope`: what Megatron-Core replays from CUDA graphs (`--cuda-graph-scope`,
    `physics.stack.CUDA_GRAPH_SCOPES`): "full_iteration" every kernel of the step (no host time
    per kernel), or blocks of every layer -- "attn", "mlp" (dense layers), "moe_router",
    "moe_preprocess" (with moe_router) -- whose kernels the host issues as one graph launch per
    pass. Empty: eager. Only `host_kernel_s` changes: a GPU-bound step is not faster.

    `lora_rank` > 0 fine-tunes with LoRA instead of training every weight: the base weights are
    frozen and adapters of that rank sit beside the linear layers `lora_targets` names, a comma-
    separated subset of qkv, proj, fc1, fc2 (Megatron-Bridge's `target_modules` linear_qkv,
    linear_proj, linear_fc1, linear_fc2; default all four, `physics.lora`; 0: full training).

    `packed_document_len` > 0: every sequence is a pack of documents of that many tokens, as
    fine-tuning recipes pack short samples (NeMo / Megatron-Bridge `packed_sequence_specs`), and
    attention runs causally within each document (Transformer Engine's THD format with
    cu_seqlens), so its work and its kernel's efficiency follow the document, not the sequence;
    the linear layers still see every token of the pack (`physics.flops.layer_forward`). 0: one
    document per sequence. At most the sequence length; not with context parallelism.

    `offload_activation_layers` > 0 copies the saved activations of the first that many layers to
    host memory in the forward pass and back in the backward pass, beside compute (Megatron-Core's
    `--cpu-offloading --cpu-offloading-num-layers N`, Transformer Engine's CPU offload;
    `physics.offload`): fewer layers' activations held, the copies' excess over the compute
    exposed. As Megatron-Core allows it: pp = 1, no recomputation, fewer than the model's layers.
    `offload_optimizer` (0-1): the share of the optimizer state (fp32 master weights and Adam
    moments) held and stepped on the host CPU (Megatron-Core's `--optimizer-cpu-offload
    --optimizer-offload-fraction`, DeepSpeed's `offload_optimizer` at 1): off the GPU's memory, its
    gradients copied out and parameters back over the host link around a CPU Adam step.

    Pipeline stages: by default the layers are spread as evenly as possible (when pp does not
    divide them, the middle stages take the extra layers first, then the first stage: the first
    and last stages also run the embedding and the output layer). `first_stage_layers` /
    `last_stage_layers` (> 0) fix those two as Megatron-LM's `--decoder-first-pipeline-num-layers`
    / `--decoder-last-pipeline-num-layers` do (the middle stages split the rest evenly);
    `stage_layers` gives every stage's count explicitly (one plan at a time).

    Execution details that differ between frameworks and versions are explicit (`--framework`
    sets them together, see `presets/frameworks.yaml`):
    `async_tp_grad`: the backward TP collectives of QKV and MLP up overlap their own GEMMs
    (Megatron's asynchronous gradient all-reduce / reduce-scatter); `tp_comm_overlap`: Transformer
    Engine's userbuffers also overlap the forward TP collectives with the GEMMs (Megatron-Core's
    `--tp-comm-overlap`, needs sequence parallelism, ignored without it);
    `overlap_grad_reduce`: the DP gradient reduction runs in buckets during the last backward pass
    (not under ZB-H1: `grad_reduce_overlapped`);
    `overlap_param_gather`: the distributed optimizer's parameter all-gather runs behind the next
    step's first forward pass instead of after the optimizer; `grad_accumulation_fusion`: the
    weight-gradient GEMM accumulates into the fp32 main_grad; `overlap_p2p`: pipeline sends run
    beside compute (Megatron: the interleaved schedule only; None = that default) instead of
    blocking it; `pipeline_sync`: a blocking send is followed by a device synchronisation
    (Megatron's batched send/receive); `scatter_gather`: pipeline sends carry 1/tp of the
    activation per rank, re-assembled by an all-gather inside the node (Narayanan et al. 2021
    §4.1); `flash_attention`: fused attention that never writes the s x s score matrix (Dao et
    al. 2022); `framework`: the name of the framework preset these came from, which picks the
    stack's memory rules (`physics.memory_stacks.STACKS`) but sets none of these flags: a Plan
    built by hand takes the defaults below, the command line the preset's (`requests.plan_build`;
    `TrainingRequest(...).scenario()` builds the plan `shardwise predict` prices);
    `memory_stack`: the built-in stack whose memory entry prices the plan's memory where it is not `framework`'s
    own (a framework file's `like:`; "": its own, `memory_stack_key`); one of `plan_choices.MEMORY_STACKS`.

    What the software stack's kernels are (`physics.stack`, set by the framework preset):
    `attention_kernel` "fused" (Transformer Engine / cuDNN, as Megatron-Core runs it), "flash2"
    (FlashAttention-2, the flash-attn package) or "sdpa-flash2" (PyTorch SDPA's flash backend, its bundled
    copy of FlashAttention-2: slower on Hopper, `physics.attention_kernels.SDPA_FLASH_FORWARD_FRACTION`),
    "te-flash2" (Transformer Engine's FlashAttention backend: flash-attn's kernels under Megatron-Core,
    TE's context-parallel ring; NeMo 24.01-24.07 as its launcher ran it, `physics.attention_kernels`),
    "flash3" (FlashAttention-3, Hopper) or "flash4" (FlashAttention-4, Hopper and data-centre Blackwell),
    each at its own published speed and ramp, as "flash2" where its package runs FlashAttention-2's code
    (`physics.attention_flash34`);
    `eager_kernels`: element-wise work (norms, rotary embedding, activation, the loss) runs as one eager
    PyTorch kernel per op instead of fused kernels; `eager_rotary`: the rotary embedding alone stays ATen kernels
    with fp32 intermediates where the rest is fused (torchtitan's complex multiply, which TorchInductor does not
    generate code for: `physics.stack`); `yarn_rotary_eager`: a YaRN rotary embedding (`Model.yarn_rope`) runs
    as eager ATen kernels (Megatron-Core, `physics.layer_parts.MEGATRON_YARN_ROPE_PASSES`);
    `selective_policy`: what recompute="selective" recomputes ("attention": Megatron's attention core; "op":
    torchtitan's op-level policy, every second matrix multiply and all element-wise work); `host_kernel_s`: the
    host's time to issue one kernel (0: never the bottleneck), which the GPU waits for when its kernels are shorter;
    `fp8_recipe`: how FP8 training (precision fp8 or mxfp8) casts and multiplies: "te"
    (Transformer Engine's delayed scaling, the default; weights cast once a step), "te_current" (its
    current scaling, an amax pass before each cast: `physics.casts`), "te-jax" (Transformer
    Engine's JAX path: weights cast at every use, again when a layer is rematerialised) or a
    torchao.float8 recipe, "tensorwise" (dynamic per-tensor scales, weights cast at every use),
    "tensorwise_fp8_all_gather" (FSDP2 gathers the weights already in FP8, torchtitan's setting
    for it), "rowwise" or "rowwise_with_gw_hp"
    (`physics.fp8_recipes`); `per_param_sharding`: ZeRO-3 as PyTorch FSDP2 runs it
    (`fully_shard`), every parameter its own shard, so each all-gather is copied out to the
    parameters and each gradient copied into the reduce-scatter's buffer on the compute stream, `physics.stack`.
    `fsdp2_grad_sync`: under per_param_sharding, when a step at pp = 1 reduce-scatters its gradients:
    "every-micro-batch" (FSDP2's default; torchtitan, torchtune, OLMo-core) or "last-micro-batch" (the
    stack's loop turns gradient sync off for the others and FSDP2 adds their unsharded gradients, then
    copies the sum into the reduce-scatter once: NeMo AutoModel's get_sync_ctx); under pipeline
    parallelism torch.distributed.pipelining defers it whatever this says (`physics.microbatch.
    fsdp2_deferred_sync`). `unfused_accumulate_bytes`: bytes per weight per micro-batch that adding a
    16-bit weight gradient to its accumulator moves without gradient-accumulation fusion, the stack's
    own where FSDP2's deferred add is not (`physics.microbatch`); `fsdp2_expert_mesh_of_one`: FSDP2
    wraps the routed experts over their expert-data-parallel mesh even where it has one rank, and
    copies them each micro-batch without communicating (torchtitan; NeMo AutoModel leaves them
    unwrapped there: `engines.fsdp2_copies`); `p2p_serial`: blocking pipeline
    sends and receives run one after the other, each on its own (DeepSpeed's PipelineEngine), not
    paired in one batched send/receive (Megatron).
    `layer_host_ops`: host operations one layer costs per micro-batch, forward and backward, in
    units of `host_kernel_s` (a stack's count from its code, `physics.stack`; 0: the kernels
    `physics.stack.layer_kernels` counts); `loss_bytes_per_logit`: bytes the loss moves per logit,
    forward and backward, besides the output GEMM (0: the fused vocab-parallel loss's, e + 12);
    `optimizer_step_bytes`: bytes per local parameter the stack's optimizer step moves (0: Megatron's
    fused step, `engines.training_layout.OPTIMIZER_TRAFFIC_BYTES_PER_PARAM`; `physics.hf_gpt2`);
    `serving_layer_kernels`: the kernels a serving engine launches for one dense layer's forward
    (0: the fused stack's count), `fused_residual_norms` how many of its two residual adds it fuses
    with the next norm (`engines.engine_kernels`, set from the engine by `engines.serving`), and
    `norm_fusion_max_bytes` the all-reduce messages below which its all-reduces absorb 2 norms (0: none);
    `p2p_host_ops`: host operations a middle pipeline stage spends per micro-batch and model chunk
    around its sends and receives while the GPU idles (nanotron's metadata handshakes and host syncs,
    `physics.microbatch`; the first and last stage half), in units of `host_kernel_s`;
    `tp_shard_overlap`: with sequence parallelism and `async_tp_grad`, the all-gather that feeds a
    GEMM runs beside the GEMM of the rank's own rows, 1/tp of it (nanotron's asynchronous linears,
    `engines.costs`); `eager_glu`: a gated MLP's SiLU and multiply run as two kernels beside otherwise
    fused element-wise work; `layout_copies`: q, k and v are copied out of the fused QKV output and k, v
    concatenated and permuted for the attention kernel (nanotron, `physics.stack`); `head_copies`: q, k
    and v each copied head-major, their gradients copied back, SDPA's output once more (Modalities);
    `hf_gpt2_ops`: the model is Hugging Face Transformers v4.12's eager GPT-2 (modeling_gpt2.py): five
    element-wise passes over materialised scores, gelu_new as eight ATen ops, addmm's bias copies and
    unfused residual dropouts (`physics.hf_gpt2`); `cublas_before_11`: the stack's cuBLAS predates
    11.0 (CUDA 10.x), whose 16-bit GEMMs with a dimension not a multiple of 8 run on the CUDA cores
    (`physics.gemm_align`: GPT-2's 50,257-wide LM head);
    `grad_reduce_bf16`: the gradient buffer and its data-parallel reduction in the 16-bit parameter
    dtype, not fp32 (Megatron-LM `--grad-reduce-in-bf16`; Megatron-Core's grad_reduce_in_fp32=False,
    which NVIDIA's performance recipes set: `physics.memory.grad_bytes_per_param`);
    `spmd_grad_reduce`: the gradient reduction as XLA runs it (MaxText, Paxml): in the 16-bit dtype
    of the dot that makes each weight gradient, and under hybrid sharding the replicas' all-reduce
    exposed, not hidden (`engines.data_parallel.SPMD_GRAD_BYTES`);
    `functional_a2a`: under torchtitan's per-op selective checkpointing, eager expert-parallel
    all-to-alls are functional collectives (`_c10d_functional.all_to_all_single`, on the policy's save
    list: their outputs kept, not re-sent), as torchtitan ran them before pytorch/torchtitan#4085
    (2026-08-18; since, spmd_types' in-place all_to_all, rerun in the recompute); compiled runs
    trace functional collectives either way (`engines.moe_op_sac.exchange_saved`); memory and time;
    `scan_unpipelined`: under ZeRO-3, XLA's scanned layers without its collective pipeliner: each
    layer's first weight gather (forward and backward) and last gradient reduce-scatter wait with
    nothing beside them (Paxml in JAX-Toolbox's 23.10/24.04 launches, `physics.xla_scan`);
    `zero1_grad_all_reduce`: under ZeRO-1 the stack all-reduces every local gradient once after the
    last backward pass, exposed, instead of reduce-scattering it in buckets beside it, and its
    step's gradient passes (the norm for clipping, the scaling, the zeroing) run over every local
    gradient, not the rank's shard (nanotron: no DDP wrapper under fp32 accumulation with ZeRO,
    `engines.dp_comm.zero_stage_fields`, `engines.training_layout.optimizer_time_s`);
    `aligned_chunk_sync`: under the interleaved schedule the stack's data parallelism is
    Megatron-Core's DDP and distributed optimizer, which launch model chunk 0's whole gradient
    reduction after its last backward pass and its whole parameter gather before the first forward
    (align_grad_reduce, align_param_gather), so all of chunk 0's share stays exposed; false: chunk
    0's 1/v hides behind one chunk's backward pass, the last bucket exposed (`engines.dp_comm.DpComm.exposed_s`);
    `loss_kernel`: "stack" (the framework's loss, `physics.memory_stacks.STACKS`) or "te", Transformer
    Engine's parallel_cross_entropy (Megatron-Core cross_entropy_loss_fusion with
    cross_entropy_fusion_impl="te"), which keeps only the 16-bit logits
    (`physics.memory_stacks.TE_CROSS_ENTROPY_LOGIT_BYTES`), or "eager-bf16", PyTorch's eager
    cross-entropy on the 16-bit logits without an fp32 cast (`EAGER_BF16_LOGIT_BYTES`; "eager-bf16-freed":
    its logits freed before the backward pass, `EAGER_BF16_FREED_LOGIT_BYTES`), or "compiled", the
    fp32 loss compiled alone with the model eager (torchtitan's compile.components "loss",
    `COMPILED_LOSS_LOGIT_BYTES`): the kernel's bytes
    replace the stack's, more or fewer (`physics.memory_losses`); memory only, no time;
    `expandable_segments`: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, so PyTorch's caching
    allocator hands out what it keeps in split blocks (`physics.memory_stacks.allocator_fraction`); memory only;
    `partition_activations`: DeepSpeed's partitioned checkpoints (--partition-activations): under full recomputation
    a layer keeps 1/tp of its input, all-gathered over TP before it is recomputed (`physics.remat_partition`);
    `optimizer_state`: what the optimizer keeps per parameter (`physics.memory.optimizer_bytes_per_param`):
    "fp32" (an fp32 master weight and fp32 Adam moments, 12 bytes), "fp32-remainders" (the master's
    16 low bits beside the bf16 weight: Transformer Engine's FusedAdam `store_param_remainders`, which
    Megatron-Core's --use-precision-aware-optimizer turns on, and Apex's DistributedFusedAdam; 10
    bytes) or "bf16" (bf16 moments, the bf16 weight its own master: Apex's DistributedFusedAdam with
    dtype bf16; 4 bytes), "fp32-bf16-moments" (an fp32 master, bf16 moments: 8 bytes) or
    "fp32-remainders-bf16-moments" (the remainders, bf16 moments: 6 bytes), Megatron-Core's
    precision-aware optimizer with bf16 exp_avg and exp_avg_sq, whose master is Megatron-Core's fp32
    shard under FP8 current scaling and MXFP8 and TE's remainders otherwise; memory only, no time;
    `zero3_buckets`: ZeRO-3 as DeepSpeed's stage 3 runs it, module by module with its prefetch and reduction
    buckets (`specs.zero3.Zero3Buckets`, `physics.zero3_deepspeed`); None: FSDP's units.
    """

    tp: Number = 1
    pp: Number = 1
    dp: Number = 1
    global_batch: Number = 1
    micro_batch: Number = 1
    vpp: Number = 1
    cp: Number = 1
    cp_comm: str = "p2p"
    ep: Number = 1
    etp: Number = 0
    expert_imbalance: Number = 1.0
    moe_dispatcher: str = "alltoall"
    moe_overlap: bool | np.ndarray = False
    moe_capacity_factor: Number = 0.0
    moe_pad_to_capacity: bool | np.ndarray = False
    schedule: Schedule | np.ndarray | str = Schedule.ONE_F_ONE_B
    recompute: Recompute | np.ndarray | str = Recompute.NONE
    recompute_layers: Number = 0
    recompute_modules: tuple[str, ...] = ()
    mtp_layers: Number = 0
    cuda_graph_scope: tuple[str, ...] = ()
    sequence_parallel: bool | np.ndarray = False
    zero_stage: Number = 0
    shard_group: Number = 0
    lora_rank: Number = 0
    lora_targets: str = "qkv,proj,fc1,fc2"
    packed_document_len: Number = 0
    pipeline_flushes: Number = 1
    precision: str = "bf16"
    flash_attention: bool | np.ndarray = True
    async_tp_grad: bool | np.ndarray = True
    tp_comm_overlap: bool | np.ndarray = False
    overlap_grad_reduce: bool | np.ndarray = True
    overlap_param_gather: bool | np.ndarray = False
    grad_accumulation_fusion: bool | np.ndarray = True
    overlap_p2p: bool | np.ndarray | None = None
    pipeline_sync: bool | np.ndarray = True
    scatter_gather: bool | np.ndarray = True
    first_stage_layers: Number = 0
    last_stage_layers: Number = 0
    stage_layers: tuple[int, ...] | None = None
    framework: str = "megatron-core"
    attention_kernel: str = "fused"
    eager_kernels: bool | np.ndarray = False
    eager_rotary: bool | np.ndarray = False
    yarn_rotary_eager: bool | np.ndarray = False
    selective_policy: str = "attention"
    fp8_recipe: str = "te"
    host_kernel_s: Number = 0.0
    per_param_sharding: bool | np.ndarray = False
    fsdp2_grad_sync: str = "every-micro-batch"
    fsdp2_expert_mesh_of_one: bool | np.ndarray = False
    unfused_accumulate_bytes: Number = 10.0  # physics.microbatch.MAIN_GRAD_ADD_BYTES
    p2p_serial: bool | np.ndarray = False
    layer_host_ops: Number = 0.0
    loss_bytes_per_logit: Number = 0.0
    optimizer_step_bytes: Number = 0.0
    serving_layer_kernels: Number = 0
    fused_residual_norms: Number = 0
    norm_fusion_max_bytes: Number = 0.0
    p2p_host_ops: Number = 0.0
    tp_shard_overlap: bool | np.ndarray = False
    eager_glu: bool | np.ndarray = False
    layout_copies: bool | np.ndarray = False
    head_copies: bool | np.ndarray = False
    hf_gpt2_ops: bool | np.ndarray = False
    cublas_before_11: bool | np.ndarray = False
    grad_reduce_bf16: bool | np.ndarray = False
    spmd_grad_reduce: bool | np.ndarray = False
    scan_unpipelined: bool | np.ndarray = False
    functional_a2a: bool | np.ndarray = False
    zero1_grad_all_reduce: bool | np.ndarray = False
    aligned_chunk_sync: bool | np.ndarray = False
    expandable_segments: bool | np.ndarray = False
    partition_activations: bool | np.ndarray = False
    loss_kernel: str = "stack"
    optimizer_state: str = "fp32"
    offload_activation_layers: Number = 0
    offload_optimizer: Number = 0.0
    memory_stack: str = ""
    zero3_buckets: Zero3Buckets | None = None

    def __post_init__(self) -> None:
        check_fields(self)
        check_rules_once(self)

    def _check_rules(self) -> bool:
        """The rules between fields, over every plan: whole micro-batches, stage counts, the
        interleaved schedule's needs (True: they hold). They read _RULE_FIELDS alone."""
        return check_rules(self)

    @property
    def grad_reduce_overlapped(self) -> bool | np.ndarray:
        """`overlap_grad_reduce` as the schedule runs it. ZB-H1 hides none of the reduction: the
        zero-bubble runtime (sail-sg/zero-bubble-pipeline-parallelism
        megatron/core/pipeline_parallel/zerobubble/runtime.py@ed77fa7a, `SchedNodeRuntime.prepare`:
        `assert no_sync_func is None, "Sync func is not supported yet"`) runs without Megatron's
        bucketed overlap, and its deferred W passes, the last operations of a stage, finish each
        weight's gradient; the reduction runs whole in `finalize_model_grads` after them."""
        on = np.asarray(self.overlap_grad_reduce, dtype=bool) & (np.asarray(self.schedule) != Schedule.ZB_H1)
        return bool(on) if on.ndim == 0 else on

    def with_(self, **changes: object) -> Plan:
        return replace(self, **changes)  # type: ignore[arg-type]
