"""Flags shared by the commands that take a model, a cluster and a parallel plan, and the code
that turns them into a `Scenario` (heavy imports happen inside the functions)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from shardwise.precisions import FP8_RECIPES, TRAINING_PRECISIONS
from shardwise.requests.fields import SELECTIVE_POLICIES, by_name

F = Callable[..., Any]


class Aliased(click.Option):
    """An option whose old spellings (`hidden_aliases`) still work but are left out of --help:
    one name per meaning across the commands, the old ones kept for a release."""

    def __init__(self, *args: Any, hidden_aliases: tuple[str, ...] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hidden_aliases = hidden_aliases

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        shown, self.opts = self.opts, [o for o in self.opts if o not in self.hidden_aliases]
        try:
            return super().get_help_record(ctx)
        finally:
            self.opts = shown


def alias_option(*decls: str, old: tuple[str, ...] = (), **kwargs: Any) -> F:
    """click.option with old spellings accepted but hidden (see `Aliased`)."""
    return click.option(*decls[:1], *old, *decls[1:], cls=Aliased, hidden_aliases=old, **kwargs)


def non_empty(hint: str) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """A click callback that refuses an empty name (`--gpu ''` must not quietly mean "none given")."""

    def check(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        from shardwise.errors import SpecError

        for v in value if isinstance(value, tuple) else (value,):
            if isinstance(v, str) and not v.strip():
                flag = param.opts[0] if param.opts else param.name
                raise SpecError(f"{flag}: an empty name is not allowed; {hint}")
        return value

    return check


NAME_OR_FILE = "give a preset name or a YAML file"
LINK_NAME = "give a preset name, a YAML file or a rate like 600GB/s"


def _stack(*decorators: F) -> F:
    def apply(func: F) -> F:
        for d in reversed(decorators):
            func = d(func)
        return func

    return apply


model_options = _stack(
    click.option(
        "--model",
        "model_name",
        metavar="NAME|FILE",
        callback=non_empty(NAME_OR_FILE),
        help="Model preset (see `shardwise presets models`), a YAML file, or a Hugging Face config.json.",
    ),
    click.option("--layers", type=int, help="Transformer layers (overrides the preset)."),
    click.option("--hidden", type=int, help="Hidden size h."),
    click.option("--heads", type=int, help="Attention heads a."),
    click.option("--kv-heads", type=int, help="Key/value heads (grouped-query attention); default: heads."),
    click.option("--ffn-hidden", type=int, help="MLP hidden size; default: 4 x hidden."),
    click.option("--vocab", type=int, help="Vocabulary size; default 51200 for a custom model."),
    click.option(
        "--family",
        type=click.Choice(["gpt", "llama"], case_sensitive=False),
        help="Architecture defaults for a custom model [default: gpt].",
    ),
    click.option("--seq-len", type=int, help="Sequence length s in tokens; default 2048 for a custom model."),
)

cluster_options = _stack(
    click.option(
        "--calibration",
        metavar="FILE",
        callback=non_empty("give the YAML file `shardwise calibrate` wrote"),
        help="A calibration from `shardwise calibrate` (your measured runs): fitted GEMM efficiency, link "
        "bandwidths and overheads, and the error bars that come with them.",
    ),
    click.option(
        "--system",
        metavar="NAME|FILE",
        callback=non_empty(NAME_OR_FILE),
        help="System preset (dgx-a100, dgx-h100, a100-pcie-8x, ...).",
    ),
    click.option(
        "--gpu",
        "gpu_name",
        metavar="NAME|FILE",
        callback=non_empty(NAME_OR_FILE),
        help="GPU preset or YAML file (instead of, or overriding, the system's).",
    ),
    click.option("--gpus-per-node", type=int, help="GPUs per server [default: the system's, else 8]."),
    click.option(
        "--p2p",
        type=click.Choice(["on", "off"], case_sensitive=False),
        help="Can the GPUs of a server reach each other's memory? off: NCCL stages every transfer through "
        "host memory (GeForce cards on the stock driver, many VMs). [default: the system's, else on]",
    ),
    click.option(
        "--nvls",
        type=click.Choice(["on", "off"], case_sensitive=False),
        help="May NCCL reduce inside the NVLink switch (NVLink SHARP) for all-reduces in a server, where the "
        "link has it (H100 and later with NVSwitch)? off: as NCCL_NVLS_ENABLE=0. [default: the system's, else on]",
    ),
    click.option(
        "--intra-link",
        metavar="NAME|FILE|RATE",
        callback=non_empty(LINK_NAME),
        help="Link inside a server: preset (nvlink3, pcie4, ...), YAML file, or a sustained rate like 600GB/s.",
    ),
    click.option(
        "--inter-link",
        metavar="NAME|FILE|RATE",
        callback=non_empty(LINK_NAME),
        help="Each GPU's link across servers (ib-hdr, ib-ndr, ... or a rate).",
    ),
    click.option(
        "--nics-per-node",
        type=float,
        help="Network cards per server, shared by its GPUs across servers [default: the system's; 1 per GPU "
        "with --gpu].",
    ),
    click.option(
        "--link-latency",
        metavar="TIME",
        help="Per-step latency of the links given with --intra-link/--inter-link (e.g. 2us) [default: the "
        "replaced link's, or its kind's: NVLink 1us, PCIe 2us, network 5us].",
    ),
    click.option("--nodes", type=int, help="Servers in the cluster."),
    click.option("--num-gpus", type=int, help="GPUs in the cluster (instead of --nodes)."),
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


plan_layout_options = _stack(
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
        default="none",
        show_default=True,
        help="Activation recomputation.",
    ),
    recompute_layers_option,
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


execution_options = _stack(
    click.option(
        "--framework",
        default="megatron-core",
        show_default=True,
        metavar="NAME",
        callback=non_empty(NAME_OR_FILE),
        help="Software stack whose execution flags apply: megatron-core, megatron-lm-2022, megatron-lm-2021, "
        "megatron-deepspeed, fsdp, torchtitan (see `shardwise presets frameworks`); flags below override it.",
    ),
    click.option(
        "--precision",
        type=click.Choice(TRAINING_PRECISIONS, case_sensitive=False),
        default="bf16",
        show_default=True,
        help="Compute precision: fp8 is per-tensor scaling (Hopper and later), mxfp8 block scaling (Blackwell).",
    ),
    click.option(
        "--flash-attention/--no-flash-attention",
        default=None,
        help="Fused attention that never stores the s x s scores [default: the framework's; on for all but "
        "megatron-deepspeed, whose --use-flash-attn flags are opt-in].",
    ),
    click.option(
        "--attention-kernel",
        type=click.Choice(["fused", "flash2", "sdpa-flash2"], case_sensitive=False),
        help="Attention kernel: fused (Transformer Engine / cuDNN), flash2 (the flash-attn package's "
        "FlashAttention-2) or sdpa-flash2 (PyTorch SDPA's bundled FlashAttention-2) "
        "[default: the framework's].",
    ),
    _switch("eager-kernels", "One kernel per element-wise op (PyTorch eager) instead of fused kernels."),
    click.option(
        "--fp8-recipe",
        type=click.Choice(FP8_RECIPES, case_sensitive=False),
        help="How --precision fp8/mxfp8 casts and multiplies: te (Transformer Engine) or a torchao.float8 "
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
)

stage_options = _stack(
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

plan_options = _stack(plan_layout_options, stage_options, execution_options)


def echo_notes(notes: tuple[str, ...] | list[str]) -> None:
    """What the request layer assumed, on stderr (stdout stays the answer)."""
    for note in notes:
        click.echo(f"note: {note}", err=True)


def request_of(o: dict[str, Any]) -> Any:
    """The `TrainingRequest` of a command's parsed options."""
    from shardwise.requests.training import TrainingRequest

    return TrainingRequest.from_options(o)


def build_model(o: dict[str, Any]) -> Any:
    from shardwise.requests.build import build_model as build

    return build(by_name(o))


def build_cluster(o: dict[str, Any]) -> Any:
    """The cluster of the options (`requests.build.build_cluster`); its notes go to stderr."""
    from shardwise.requests.build import build_cluster as build

    notes: list[str] = []
    cluster = build(by_name(o), notes, load_calibration(o))
    echo_notes(notes)
    return cluster


def load_calibration(o: dict[str, Any]) -> Any:
    """The `--calibration FILE` (a `calibration.store.Calibration`), or None."""
    if not o.get("calibration"):
        return None
    if "_calibration" not in o:
        from shardwise.requests.build import load_calibration as load

        o["_calibration"] = load(o["calibration"])
    return o["_calibration"]


def execution_kwargs(o: dict[str, Any], sequence_parallel: bool | None = None, tp: int = 1) -> dict[str, Any]:
    from shardwise.requests.build import execution_kwargs as kwargs

    return kwargs(by_name(o), sequence_parallel, tp)


def stage_kwargs(o: dict[str, Any], layers: int | None = None) -> dict[str, Any]:
    from shardwise.requests.build import stage_kwargs as kwargs

    return kwargs(by_name(o), layers)


def check_output_path(path: str, allowed: tuple[str, ...], flag: str = "") -> None:
    """Fail before any work if `path` cannot be written: a known extension, an existing directory,
    and pyarrow for Parquet (`flag` names the option in that message)."""
    from pathlib import Path

    from shardwise.atomic import check_writable
    from shardwise.errors import SpecError

    p = Path(path)
    if p.suffix.lower() not in allowed:
        where = f"{flag} {path}" if flag else path
        raise SpecError(f"{where}: unknown file format {p.suffix!r}; use one of {', '.join(allowed)}")
    check_writable(p)
    if p.suffix.lower() == ".parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise SpecError(f"{flag} .parquet needs pyarrow: pip install 'shardwise[parquet]'") from None
