"""The flags of a parallel plan, shared by the commands that take one: its layout (tp, pp, dp, cp,
ep, vpp, batch, recomputation, ZeRO, LoRA, ...), its pipeline stages' layers, and the software
stack's execution flags (`execution_options`: the framework preset and what overrides it). Their
defaults are the request fields' (`requests.fields`)."""

from __future__ import annotations

import click

from shardwise.cli.option_kit import NAME_OR_FILE, F, FiniteRange, an_input, stack_options
from shardwise.precisions import FP8_RECIPES, TRAINING_PRECISIONS
from shardwise.requests.fields import ATTENTION_KERNEL_CHOICES, SELECTIVE_POLICIES

# --recompute's help: without the flag the stack's own default applies (`presets.stack_defaults.framework_recompute`)
RECOMPUTE_HELP = (
    "Activation recomputation [default: the framework's (`default_recompute`): full for maxtext and paxml "
    "(MaxText's remat_policy 'full', Praxis's SAVE_NOTHING); selective for torchtitan (main's per-op SelectiveAC, "
    "pytorch/torchtitan#2357); none for the others]."
)

# LoRA fine-tuning, on predict and on plan
lora_rank_option = click.option(
    "--lora-rank",
    type=click.IntRange(0, 65536),
    default=0,
    show_default=True,
    help="Fine-tune with LoRA adapters of this rank on the attention and MLP layers, the base weights "
    "frozen (Megatron-Bridge's default rank is 32); 0 = train every weight.",
)
lora_targets_option = click.option(
    "--lora-targets",
    metavar="LIST",
    default="qkv,proj,fc1,fc2",
    show_default=True,
    help="With --lora-rank: the linear layers that get adapters, a comma-separated subset of qkv, proj, fc1, fc2 "
    "(Megatron-Bridge's target_modules; NeMo's performance recipes use qkv alone).",
)

# multi-token prediction and pipeline flushes, on predict and on plan
mtp_layers_option = click.option(
    "--mtp-layers",
    type=click.IntRange(0, 16),
    default=0,
    show_default=True,
    help="Multi-token-prediction modules trained on the last pipeline stage (DeepSeek-V3; Megatron-Core "
    "--mtp-num-layers): each one more layer, a 2h -> h projection and the output layer with its loss.",
)

pipeline_flushes_option = click.option(
    "--pipeline-flushes",
    type=click.IntRange(1, None),
    default=1,
    show_default=True,
    metavar="N",
    help="Run the step's micro-batches as N separate pipeline schedules, each filling and draining the "
    "pipeline (NeMo AutoModel: one per local batch, global batch / (local batch x dp)); 1 = one schedule.",
)

# packed sequences (fine-tuning data), on predict and on plan
packed_document_len_option = click.option(
    "--packed-document-len",
    type=click.IntRange(0, None),
    default=0,
    show_default=True,
    metavar="TOKENS",
    help="Each sequence packs documents of this many tokens (NeMo / Megatron-Bridge packed_sequence_specs); "
    "attention runs within each document only; 0 = one document per sequence.",
)

# Megatron-LM's block recomputation, on predict and on plan
recompute_layers_option = click.option(
    "--recompute-layers",
    type=click.IntRange(0, 100_000),
    default=0,
    show_default=True,
    help="Recompute the first N layers of every pipeline stage (every model chunk with --vpp) whole, keeping "
    "only their input; the others as --recompute says (Megatron-LM --recompute-granularity full "
    "--recompute-method block --recompute-num-layers N); 0 = none.",
)

# Megatron-Core's activation offload to host memory (`physics.offload`), on predict
offload_activations_option = click.option(
    "--offload-activations",
    type=click.IntRange(0, 100_000),
    default=0,
    show_default=True,
    metavar="N",
    help="Copy the saved activations of the first N layers to host memory in the forward pass and back in the "
    "backward pass, beside compute (Megatron-Core --cpu-offloading --cpu-offloading-num-layers N; pp 1, no "
    "recomputation); priced over the GPU's host_link. 0 = none.",
)

# the optimizer state on the host CPU (`physics.offload.optimizer_host_s`), on predict and plan
offload_optimizer_option = click.option(
    "--offload-optimizer",
    type=FiniteRange(0.0, 1.0),
    default=0.0,
    show_default=True,
    metavar="SHARE",
    help="Hold and step this share of the optimizer state (fp32 master weights, Adam moments) on the host CPU "
    "(Megatron-Core --optimizer-cpu-offload --optimizer-offload-fraction SHARE; DeepSpeed offload_optimizer: 1); "
    "priced with the GPU's host_link and host_adam. 0 = none.",
)

# Megatron-Core's per-module selective recomputation, on predict and timeline
recompute_modules_option = click.option(
    "--recompute-modules",
    help="With --recompute selective: the modules recomputed, by Megatron-Core's names, comma-separated "
    "(--recompute-modules): core_attn, moe_act, layernorm, mla_up_proj, mlp, moe, shared_experts "
    "[default: the framework's selective policy; Megatron's is core_attn].",
)

# Megatron-Core's CUDA graphs, on predict, timeline and plan
cuda_graph_scope_option = click.option(
    "--cuda-graph-scope",
    help="What Megatron-Core replays from CUDA graphs (--cuda-graph-scope): full_iteration, or blocks of every "
    "layer, comma-separated: attn, mlp, moe_router, moe_preprocess; only the host's time per kernel changes "
    "[default: none, eager].",
)


plan_layout_options = stack_options(
    click.option("--tp", type=int, default=1, show_default=True, help="Tensor-parallel degree."),
    click.option("--pp", type=int, default=1, show_default=True, help="Pipeline-parallel stages."),
    click.option("--dp", type=int, help="Data-parallel replicas [default: GPUs / (tp x pp x cp)]."),
    click.option(
        "--cp",
        type=int,
        default=1,
        show_default=True,
        help="Context-parallel ranks: each sequence split over cp GPUs (ring attention).",
    ),
    click.option(
        "--cp-comm",
        type=click.Choice(["p2p", "all_gather", "a2a"], case_sensitive=False),
        default="p2p",
        show_default=True,
        help="How CP ranks exchange keys and values (Megatron-Core --cp-comm-type): a ring overlapped with "
        "attention, an all-gather, or Ulysses all-to-alls over the heads.",
    ),
    click.option(
        "--ep",
        type=int,
        default=1,
        show_default=True,
        help="Expert-parallel ranks (mixture-of-experts models): each holds experts / ep experts; tokens reach "
        "them by all-to-all.",
    ),
    click.option("--etp", type=int, help="Ranks splitting each expert's matrices [default: tp, as Megatron-Core]."),
    click.option(
        "--expert-imbalance",
        type=float,
        default=1.0,
        show_default=True,
        help="Tokens of the busiest expert rank over the mean (1: a balanced router).",
    ),
    click.option(
        "--moe-dispatcher",
        type=click.Choice(["alltoall", "flex", "allgather"], case_sensitive=False),
        default="alltoall",
        show_default=True,
        help="alltoall: a copy per chosen expert (the NeMo recipes'); flex: DeepEP/HybridEP, one copy per "
        "node and per rank; allgather: the ep x etp group gathers its tokens once (Megatron-Core's default).",
    ),
    click.option(
        "--moe-overlap/--no-moe-overlap",
        default=False,
        show_default=True,
        help="Hide the expert all-to-alls behind another micro-batch's compute (Megatron-Core's combined 1F1B, "
        "--overlap-moe-expert-parallel-comm; pp=1 or --vpp).",
    ),
    click.option(
        "--moe-capacity-factor",
        type=float,
        default=0.0,
        show_default=True,
        help="Drop tokens in training: each expert takes at most ceil(tokens x k / experts x this) copies from "
        "each rank (Megatron-Core's --moe-expert-capacity-factor); 0: dropless.",
    ),
    click.option(
        "--moe-pad-to-capacity/--no-moe-pad-to-capacity",
        default=False,
        show_default=True,
        help="Pad every expert to its capacity (--moe-pad-expert-input-to-capacity; alltoall dispatcher).",
    ),
    click.option(
        "--vpp",
        type=int,
        default=1,
        show_default=True,
        help="Virtual stages (model chunks) per GPU; > 1 selects the interleaved schedule.",
    ),
    click.option("--global-batch", type=int, help="Sequences per optimizer step (required)."),
    click.option("--micro-batch", type=int, default=1, show_default=True, help="Sequences per micro-batch."),
    click.option(
        "--schedule",
        type=click.Choice(["gpipe", "1f1b", "interleaved", "zb-h1"], case_sensitive=False),
        help="Pipeline schedule [default: 1f1b, interleaved if --vpp > 1].",
    ),
    click.option(
        "--recompute",
        type=click.Choice(["none", "selective", "full"], case_sensitive=False),
        default=None,
        help=RECOMPUTE_HELP,
    ),
    recompute_layers_option,
    offload_activations_option,
    offload_optimizer_option,
    recompute_modules_option,
    cuda_graph_scope_option,
    mtp_layers_option,
    click.option(
        "--sequence-parallel/--no-sequence-parallel",
        default=None,
        help="Megatron sequence parallelism inside the TP group [default: on where tp > 1, as NeMo, "
        "Megatron-Bridge and torchtitan run TP].",
    ),
    click.option(
        "--zero",
        type=click.IntRange(0, 3),
        help="ZeRO stage (0 = plain data parallelism, 1 = Megatron's distributed optimizer) [default: the "
        "framework's].",
    ),
    click.option(
        "--shard-group",
        type=click.IntRange(0, None),
        default=0,
        show_default=True,
        help="Hybrid sharding (FSDP HYBRID_SHARD / HSDP, MaxText FSDP inside a slice): ZeRO shards the model state "
        "over groups of N data-parallel ranks (e.g. one server's GPUs), replicated across the groups; 0 = all "
        "dp x cp ranks. Needs --zero >= 1.",
    ),
    lora_rank_option,
    lora_targets_option,
    packed_document_len_option,
    pipeline_flushes_option,
)


def _switch(name: str, help_text: str) -> F:
    """--NAME/--no-NAME, default None: the framework preset decides."""
    return click.option(f"--{name}/--no-{name}", default=None, help=f"{help_text} [default: the framework's]")


execution_options = stack_options(
    click.option(
        "--framework",
        default="megatron-core",
        show_default=True,
        metavar="NAME|FILE",
        callback=an_input(NAME_OR_FILE),
        help="Software stack whose execution flags apply: megatron-core, megatron-lm-2022, megatron-lm-2021, "
        "megatron-deepspeed, fsdp, torchtitan (see `shardwise presets frameworks`), or a YAML file of your own "
        "(`like: fsdp` and the fields that differ); flags below override it.",
    ),
    click.option(
        "--precision",
        type=click.Choice(TRAINING_PRECISIONS, case_sensitive=False),
        help="Compute precision: fp8 is per-tensor scaling (Hopper and later), mxfp8 block scaling (Blackwell), "
        "nvfp4 Transformer Engine's 4-bit NVFP4 recipe (Blackwell). [default: bf16; fp16 on a GPU without BF16, "
        "V100]",
    ),
    click.option(
        "--flash-attention/--no-flash-attention",
        default=None,
        help="Fused attention that never stores the s x s scores [default: the framework's; on for all but "
        "megatron-deepspeed, whose --use-flash-attn flags are opt-in].",
    ),
    click.option(
        "--attention-kernel",
        type=click.Choice(ATTENTION_KERNEL_CHOICES, case_sensitive=False),
        help="Attention kernel: fused (Transformer Engine / cuDNN), flash2 (the flash-attn package's "
        "FlashAttention-2), sdpa-flash2 (PyTorch SDPA's bundled FlashAttention-2), te-flash2 "
        "(Transformer Engine's FlashAttention-2 backend, NVTE_FUSED_ATTN=0) or sdpa-mem-efficient (SDPA's "
        "memory-efficient backend, what it runs before sm80), flash3 (FlashAttention-3, Hopper) or flash4 "
        "(FlashAttention-4, Hopper and B200-class Blackwell) [default: the framework's; on a V100 its fallback].",
    ),
    _switch("eager-kernels", "One kernel per element-wise op (PyTorch eager) instead of fused kernels."),
    click.option(
        "--fp8-recipe",
        type=click.Choice(FP8_RECIPES, case_sensitive=False),
        help="How --precision fp8/mxfp8 casts and multiplies: te (Transformer Engine, delayed scaling), "
        "te_current (Transformer Engine's current scaling: an amax pass before each cast), te-jax (its JAX "
        "path: weights cast at every use, as Paxml runs it) or a torchao.float8 "
        "recipe (tensorwise, tensorwise_fp8_all_gather, rowwise, rowwise_with_gw_hp; with mxfp8 any of "
        "them is torchao's MX) [default: the framework's].",
    ),
    click.option(
        "--selective-policy",
        type=click.Choice(SELECTIVE_POLICIES, case_sensitive=False),
        help="What --recompute selective recomputes: attention (Megatron: the attention core), op "
        "(torchtitan's op-level policy) or a JAX remat policy (MaxText's names: minimal_flash, minimal, "
        "save_dot_except_mlpwi, save_qkv_proj, ..., save_nothing) [default: the framework's].",
    ),
    _switch("async-tp-grad", "Overlap the backward TP collectives of QKV and MLP up with their own GEMMs (Megatron)."),
    _switch(
        "tp-comm-overlap",
        "Transformer Engine userbuffers: overlap every TP collective with its GEMM (Megatron-Core "
        "--tp-comm-overlap; needs --sequence-parallel).",
    ),
    _switch("overlap-grad-reduce", "Bucketed DP gradient reduction during the last backward pass."),
    _switch("overlap-param-gather", "Distributed optimizer: all-gather parameters behind the next forward pass."),
    _switch("grad-accumulation-fusion", "Weight-gradient GEMMs accumulate into the fp32 main_grad."),
    _switch("overlap-p2p", "Pipeline sends beside compute instead of blocking it."),
    _switch("pipeline-sync", "A device synchronisation after every blocking pipeline send/receive."),
    _switch("scatter-gather", "Pipeline sends of 1/tp per rank plus an in-node all-gather."),
    _switch(
        "grad-reduce-bf16",
        "Gradient buffers and their DP reduction in bf16, not fp32 (Megatron-LM --grad-reduce-in-bf16; "
        "NVIDIA's performance recipes).",
    ),
    click.option(
        "--loss-kernel",
        type=click.Choice(["stack", "te", "eager-bf16", "eager-bf16-freed", "compiled"], case_sensitive=False),
        help="The loss: the framework's own (stack), Transformer Engine's parallel_cross_entropy (te: "
        "Megatron-Core --cross-entropy-loss-fusion --cross-entropy-fusion-impl te), which keeps only the "
        "16-bit logits, or PyTorch's eager cross-entropy on the 16-bit logits without an fp32 cast "
        "(eager-bf16, 8 B a logit, also where the framework's own loss keeps fewer; eager-bf16-freed, 6 B: the "
        "logits freed before the backward, a Lightning training_step returning the loss), or the fp32 loss "
        "compiled alone, the model eager (compiled, 6 B a logit: torchtitan --compile.components loss) (memory only) "
        "[default: the framework's].",
    ),
    click.option(
        "--zero3-buckets",
        metavar="KEY=ELEMENTS,...",
        help="ZeRO-3 as DeepSpeed's stage 3 runs it, module by module, with its buckets in elements: prefetch "
        "(stage3_prefetch_bucket_size, 5e7), live (stage3_max_live_parameters, 1e9), persist "
        "(stage3_param_persistence_threshold, 1e5), reduce (reduce_bucket_size, 5e8), reuse "
        "(stage3_max_reuse_distance, 1e9), each left out at the framework's or DeepSpeed's default; none: "
        "PyTorch FSDP's per-layer units; refused on stacks without them [default: the framework's: deepspeed, "
        "megatron-deepspeed DeepSpeed's].",
    ),
    click.option(
        "--fsdp2-grad-sync",
        type=click.Choice(["every-micro-batch", "last-micro-batch"], case_sensitive=False),
        help="FSDP2 at pp 1: reduce-scatter the gradients on every micro-batch (FSDP2's default; torchtitan, "
        "torchtune, OLMo-core) or only on the last, the others' gradients added unsharded (NeMo AutoModel's "
        "defer_fsdp_grad_sync); under pipeline parallelism torch's pipeline schedule defers it anyway; refused on "
        "stacks without FSDP2 [default: the framework's].",
    ),
    click.option(
        "--optimizer-state",
        type=click.Choice(
            ["fp32", "fp32-remainders", "bf16", "fp32-bf16-moments", "fp32-remainders-bf16-moments"],
            case_sensitive=False,
        ),
        help="What the optimizer keeps per parameter: an fp32 master and fp32 Adam moments (fp32, 12 B), the "
        "master's 16 low bits beside the bf16 weight (fp32-remainders, 10 B: Megatron-Core "
        "--use-precision-aware-optimizer, Apex DistributedFusedAdam store_param_remainders) or bf16 moments "
        "and no master (bf16, 4 B: Apex DistributedFusedAdam dtype bf16), or bf16 moments beside the fp32 master "
        "(fp32-bf16-moments, 8 B) or its remainders (fp32-remainders-bf16-moments, 6 B: Megatron-Core "
        "--use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16) (memory only) "
        "[default: the framework's].",
    ),
    _switch(
        "scan-unpipelined",
        "Under ZeRO-3, XLA's scanned layers without its collective pipeliner (--xla_gpu_enable_pipelined_"
        "all_gather/reduce_scatter off): each layer's first weight gather and last gradient reduce-scatter wait "
        "beside nothing (paxml: on).",
    ),
    _switch(
        "functional-a2a",
        "Under torchtitan's per-op selective AC, eager expert all-to-alls are functional collectives whose "
        "outputs the policy keeps (torchtitan before pytorch/torchtitan#4085; compiled runs: always).",
    ),
    _switch(
        "expandable-segments",
        "The run sets PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: the caching allocator's split-block "
        "share of the memory estimate goes (memory only).",
    ),
    _switch(
        "partition-activations",
        "DeepSpeed's partitioned activation checkpoints (Megatron-DeepSpeed --partition-activations; needs "
        "--recompute full): each layer keeps 1/tp of its input and all-gathers it over TP before recomputing it.",
    ),
    _switch("zero1-grad-all-reduce", "ZeRO-1 all-reduces whole gradients after the backward (DeepSpeed 0.5)."),
    _switch("hf-gpt2-ops", "transformers 4.12's eager GPT-2 ops: unfused score passes, gelu_new, addmm bias."),
    _switch("cublas-before-11", "CUDA 10.x cuBLAS: 16-bit GEMMs with a dimension not a multiple of 8 on CUDA cores."),
)


stage_options = stack_options(
    click.option(
        "--first-stage-layers",
        type=int,
        help="Layers on the first pipeline stage (Megatron --decoder-first-pipeline-num-layers) [default: even split].",
    ),
    click.option(
        "--last-stage-layers",
        type=int,
        help="Layers on the last pipeline stage (Megatron --decoder-last-pipeline-num-layers) [default: even split].",
    ),
    click.option(
        "--stage-layers",
        metavar="N,N,...",
        help="Layers of every pipeline stage, comma-separated (one per stage; they must add up to the model's).",
    ),
)
