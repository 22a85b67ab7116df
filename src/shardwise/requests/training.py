"""A training question in the user's words: `TrainingRequest` (model, cluster, plan, stack) and
`PredictRequest` (one step, by the closed form or the simulator).

A request is built from plain fields -- keyword arguments, a dict, a CSV row, parsed flags, the
explorer's controls, a command line -- with the defaults and checks of `requests.fields`, and
goes back to a command line (`to_argv`) or a CSV row (`to_row`). `build()` resolves presets,
files and the calibration once (`requests.build`) and `PredictRequest.run()` answers.

    >>> from shardwise.requests import PredictRequest, TrainingRequest
    >>> req = TrainingRequest(model="llama3-8b", system="dgx-h100", tp=2, global_batch=64)
    >>> PredictRequest(req).run().step_time_s  # doctest: +SKIP
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from shardwise.emit import TRAINING_TARGETS
from shardwise.errors import SpecError
from shardwise.precisions import FP8_PRECISIONS
from shardwise.presets.stack_defaults import resolve_recompute
from shardwise.requests import fields as F
from shardwise.requests.field_names import check_names
from shardwise.requests.field_ranges import check_training, require
from shardwise.requests.fields import default
from shardwise.requests.idle_flags import refuse_expert_flags, refuse_idle_flags


@dataclass(frozen=True)
class TrainingRequest:
    """Model, cluster, plan and software stack, as given (None: not given, the default applies).
    The names are the command line's flags with underscores (`--num-gpus` is `num_gpus`)."""

    model: str | None = default("model")
    layers: int | None = default("layers")
    hidden: int | None = default("hidden")
    heads: int | None = default("heads")
    kv_heads: int | None = default("kv_heads")
    ffn_hidden: int | None = default("ffn_hidden")
    vocab: int | None = default("vocab")
    family: str | None = default("family")
    seq_len: int | None = default("seq_len")
    calibration: str | None = default("calibration")
    system: str | None = default("system")
    gpu: str | None = default("gpu")
    gpus_per_node: int | None = default("gpus_per_node")
    p2p: str | None = default("p2p")
    nvls: str | None = default("nvls")
    intra_link: str | None = default("intra_link")
    inter_link: str | None = default("inter_link")
    nics_per_node: float | None = default("nics_per_node")
    link_latency: str | None = default("link_latency")
    nodes: int | None = default("nodes")
    num_gpus: int | None = default("num_gpus")
    tp: int = default("tp")
    pp: int = default("pp")
    dp: int | None = default("dp")
    cp: int = default("cp")
    cp_comm: str = default("cp_comm")
    ep: int = default("ep")
    etp: int | None = default("etp")
    expert_imbalance: float = default("expert_imbalance")
    moe_dispatcher: str = default("moe_dispatcher")
    moe_overlap: bool = default("moe_overlap")
    moe_capacity_factor: float = default("moe_capacity_factor")
    moe_pad_to_capacity: bool = default("moe_pad_to_capacity")
    vpp: int = default("vpp")
    global_batch: int | None = default("global_batch")
    micro_batch: int = default("micro_batch")
    schedule: str | None = default("schedule")
    recompute: str | None = default("recompute")  # None: the framework's (`default_recompute`), else none
    recompute_layers: int = default("recompute_layers")
    offload_activations: int = default("offload_activations")
    offload_optimizer: float = default("offload_optimizer")
    recompute_modules: str | None = default("recompute_modules")
    mtp_layers: int = default("mtp_layers")
    cuda_graph_scope: str | None = default("cuda_graph_scope")
    sequence_parallel: bool | None = default("sequence_parallel")
    zero: int | None = default("zero")
    shard_group: int = default("shard_group")
    lora_rank: int = default("lora_rank")
    lora_targets: str = default("lora_targets")
    packed_document_len: int = default("packed_document_len")
    pipeline_flushes: int = default("pipeline_flushes")
    first_stage_layers: int | None = default("first_stage_layers")
    last_stage_layers: int | None = default("last_stage_layers")
    stage_layers: str | None = default("stage_layers")
    framework: str = default("framework")
    precision: str | None = default("precision")  # None: bf16, fp16 on a GPU without BF16
    flash_attention: bool | None = default("flash_attention")
    attention_kernel: str | None = default("attention_kernel")
    eager_kernels: bool | None = default("eager_kernels")
    fp8_recipe: str | None = default("fp8_recipe")
    selective_policy: str | None = default("selective_policy")
    async_tp_grad: bool | None = default("async_tp_grad")
    tp_comm_overlap: bool | None = default("tp_comm_overlap")
    overlap_grad_reduce: bool | None = default("overlap_grad_reduce")
    overlap_param_gather: bool | None = default("overlap_param_gather")
    grad_accumulation_fusion: bool | None = default("grad_accumulation_fusion")
    overlap_p2p: bool | None = default("overlap_p2p")
    pipeline_sync: bool | None = default("pipeline_sync")
    scatter_gather: bool | None = default("scatter_gather")
    grad_reduce_bf16: bool | None = default("grad_reduce_bf16")
    scan_unpipelined: bool | None = default("scan_unpipelined")
    functional_a2a: bool | None = default("functional_a2a")
    expandable_segments: bool | None = default("expandable_segments")
    partition_activations: bool | None = default("partition_activations")
    zero1_grad_all_reduce: bool | None = default("zero1_grad_all_reduce")
    hf_gpt2_ops: bool | None = default("hf_gpt2_ops")
    cublas_before_11: bool | None = default("cublas_before_11")
    optimizer_step_bytes: float | None = default("optimizer_step_bytes")
    loss_kernel: str | None = default("loss_kernel")
    optimizer_state: str | None = default("optimizer_state")
    zero3_buckets: str | None = default("zero3_buckets")
    fsdp2_grad_sync: str | None = default("fsdp2_grad_sync")

    def __post_init__(self) -> None:
        F.normalize(self, F.TRAINING_FIELDS)
        if isinstance(self.precision, str):  # as the command line's choice takes it: BF16 is bf16
            object.__setattr__(self, "precision", self.precision.lower())
        check_training(self)  # the ranges the command line checks, before anything prints `--tp 0`
        check_names(self)  # the framework, precision and other names, as the command line refuses them
        # a recipe given (not the framework's default) says how FP8 casts: with another precision
        # it would change nothing, so it is refused rather than silently ignored
        if self.fp8_recipe is not None and self.precision not in FP8_PRECISIONS:
            raise SpecError(
                f"--fp8-recipe: {self.fp8_recipe} is not allowed with --precision {self.precision}; "
                f"it applies only to --precision {' or '.join(FP8_PRECISIONS)} (leave --fp8-recipe out)"
            )

    # --- ways in -----------------------------------------------------------------------------
    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], where: str = "") -> TrainingRequest:
        """From a dict, a CSV row, a YAML mapping or the explorer's controls: keys are field names
        or flags (`num_gpus`, `num-gpus`, `--num-gpus`); an unknown key is an error."""
        return cls(**F.values_of(data, F.TRAINING_FIELDS, where))

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> TrainingRequest:
        """From a click command's parsed options (click's names; a command's own options are left out)."""
        return cls(**F.by_name(dict(options)))

    @classmethod
    def from_argv(cls, argv: list[str] | tuple[str, ...] | str) -> TrainingRequest:
        """From command-line arguments (`--model llama3-8b --tp 2 ...`, a list or one string)."""
        args = F.split_argv(argv)
        return cls(**F.parse_argv(args))

    # --- ways out ----------------------------------------------------------------------------
    def values(self) -> dict[str, Any]:
        """Every field by name."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def given(self) -> dict[str, Any]:
        """The fields that differ from their defaults."""
        return {f.name: v for f in F.TRAINING_FIELDS if (v := getattr(self, f.name)) != f.default}

    def to_argv(self) -> list[str]:
        """The command-line arguments that ask the same question."""
        return F.argv_of(self.values())

    def to_row(self) -> dict[str, str]:
        """A CSV row (field name -> text) of the fields given; `from_mapping` reads it back."""
        out: dict[str, str] = {}
        for name, value in self.given().items():
            out[name] = ("yes" if value else "no") if isinstance(value, bool) else F._text(value)
        return out

    def with_(self, **changes: Any) -> TrainingRequest:
        return replace(self, **changes)

    # --- the answer --------------------------------------------------------------------------
    def build(self, model: Any = None) -> Any:
        """The `requests.build.Built` scenario (presets, files and calibration resolved); `model`:
        a `specs.Model` to use instead of the `model` field (a shape no preset or file names)."""
        from shardwise.requests import build

        return build.scenario(self.values(), model)

    def scenario(self) -> Any:
        return self.build().scenario


ENGINES = ("analytic", "simulate")
# the training tools whose launch `predict --emit` and `plan --emit` print
EMIT_TARGETS = TRAINING_TARGETS


# what of each GPU's memory `plan` keeps free unless --memory-headroom says otherwise (the allocator's
# fragmentation and the framework's buffers a model does not see vary by run); `predict` warns when a
# plan that fits leaves less than this, since `plan` would drop it (`plan_headroom_note`)
PLAN_MEMORY_HEADROOM = "10%"


def plan_headroom_note(est: Any) -> str | None:
    """Where a plan fits with less to spare than `plan` keeps free: that `plan` drops it (llama3-8b
    tp=2 mb=2 on a DGX H100: predict 'fits', plan's why 'does not fit: needs 85 GB'); else None."""
    import numpy as np

    from shardwise.units import format_bytes, share_or_bytes

    capacity = float(np.max(est.scenario.cluster.gpu.memory_bytes))
    total = float(np.max(est.memory.total_bytes))
    if not bool(np.all(est.fits_in_memory)) or capacity - total >= share_or_bytes("", PLAN_MEMORY_HEADROOM, capacity):
        return None
    return (
        f"{format_bytes(capacity - total)} to spare: less than the {PLAN_MEMORY_HEADROOM} of each GPU `plan` "
        "keeps free (--memory-headroom), so `plan` drops this layout as not fitting"
    )


@dataclass(frozen=True)
class PredictResult:
    """One step's estimate, its 80% interval (and what the interval rests on), what was assumed."""

    request: PredictRequest
    estimate: Any  # engines.result.TrainingEstimate
    step_time_s_low: float
    step_time_s_high: float
    interval_basis: str
    notes: tuple[str, ...]
    launch: dict[str, Any] | None = None  # the request's --emit: the plan's launch (`emit.report.training_launch`)
    # "--emit TARGET" where the recompute is the mode that launch writes (`emit_stack.launch_recompute`);
    # None: `resolve_recompute` of the request says where it came from
    emit_recompute_source: str | None = None

    @property
    def step_time_s(self) -> float:
        return float(self.estimate.step_time_s)

    @property
    def scenario(self) -> Any:
        return self.estimate.scenario

    @property
    def recompute_from(self) -> str:
        """The header's words on a recompute mode the framework chose (`emit_stack.recompute_words`)."""
        t = self.request.training
        if self.emit_recompute_source is not None:
            return f"as the {self.emit_recompute_source.removeprefix('--emit ')} launch runs it; --recompute to choose"
        from shardwise.requests.emit_stack import recompute_words

        return recompute_words(t.framework, t.recompute, t.recompute_layers, self.scenario.plan, self.scenario.model)

    @property
    def recompute_source(self) -> str:
        """Where the recompute priced came from, as --json says it: "--recompute", "--recompute-layers",
        "framework default" (`stack_defaults.resolve_recompute`) or "--emit TARGET" (the launch's)."""
        t = self.request.training
        return self.emit_recompute_source or resolve_recompute(t.framework, t.recompute, t.recompute_layers).source

    def as_dict(self) -> dict[str, Any]:
        """The JSON `predict --json` prints."""
        from shardwise import export
        from shardwise.requests.emit_stack import titan_config_json

        tokens, step = float(self.estimate.tokens_per_s), self.step_time_s
        low, high = self.step_time_s_low, self.step_time_s_high
        n = float(self.estimate.scenario.cluster.num_gpus)  # per GPU as plan's rows and calibrate's CSV have it
        return {
            **export.estimate_dict(self.estimate),
            "step_time_s_low": low,
            "step_time_s_high": high,
            "tokens_per_s_low": tokens * step / high,
            "tokens_per_s_high": tokens * step / low,
            "tokens_per_s_per_gpu": tokens / n,
            "tokens_per_s_per_gpu_low": tokens * step / high / n,
            "tokens_per_s_per_gpu_high": tokens * step / low / n,
            "interval": {"level": 0.8, "basis": self.interval_basis},
            "engine": self.request.engine,
            "recompute_source": self.recompute_source,
            # where the model's torchtitan config runs another recompute (`emit_stack.titan_config_json`)
            **titan_config_json(self.request.training, self.scenario.model, self.emit_recompute_source),
            "scenario": export.scenario_dict(self.estimate.scenario),
            # the command that prices the step; its launch, where asked, beside it
            # what was assumed (the command line prints them on stderr), and `plan`'s headroom where it is short
            "notes": [*self.notes, *filter(None, [plan_headroom_note(self.estimate)])],
            "command": replace(self.request, emit=None, emit_version=None).command(),
            **({"launch": self.launch} if self.launch is not None else {}),
        }

    def launch_text(self) -> str | None:
        """The launch `predict --emit` prints under the estimate (None without --emit)."""
        from shardwise.emit.report import text

        return None if self.launch is None else text(self.launch, "this plan")


@dataclass(frozen=True)
class PredictRequest:
    """`shardwise predict`: one training step of `training`, by the closed form ("analytic") or
    the discrete-event simulation of the pipeline schedule ("simulate"); with `emit` (a training
    tool: megatron, torchtitan, deepspeed) and `emit_version`, the plan's launch by that tool too."""

    training: TrainingRequest
    engine: str = "analytic"
    emit: str | None = None
    emit_version: str | None = None

    def __post_init__(self) -> None:
        require(self, "training", TrainingRequest)
        if self.engine not in ENGINES:
            raise SpecError(f"engine: {self.engine!r} is not allowed; use one of {', '.join(ENGINES)}")
        object.__setattr__(self, "emit", _checked_emit(self.emit, self.emit_version))
        refuse_idle_flags(self.training)

    @classmethod
    def from_options(
        cls, options: dict[str, Any], engine: str = "analytic", emit: str | None = None, emit_version: str | None = None
    ) -> PredictRequest:
        """From `predict`'s parsed click options: --emit refused first (one line), then the fields."""
        _checked_emit(emit, emit_version)
        return cls(TrainingRequest.from_options(options), engine, emit, emit_version)

    @classmethod
    def from_argv(cls, argv: list[str] | tuple[str, ...] | str) -> PredictRequest:
        """From `predict`'s arguments (with or without the leading `shardwise predict`)."""
        args = F.split_argv(argv)
        while args and args[0] in ("shardwise", "predict"):
            args.pop(0)
        own = {
            "--engine": F.Field("engine", "str", "analytic", ENGINES),
            "--emit": F.Field("emit", "str"),
            "--emit-version": F.Field("emit_version", "str"),
        }
        values = F.parse_argv(args, own)
        mine = {f.name for f in own.values()}
        training = TrainingRequest(**{k: v for k, v in values.items() if k not in mine})
        return cls(training, **{k: v for k, v in values.items() if k in mine})

    def to_argv(self) -> list[str]:
        out = ["predict", *self.training.to_argv(), *(["--engine", self.engine] if self.engine != "analytic" else [])]
        for flag, value in (("--emit", self.emit), ("--emit-version", self.emit_version)):
            out += [flag, value] if value is not None else []
        return out

    def command(self) -> str:
        """The command line that asks this question."""
        return "shardwise " + shlex.join(self.to_argv())

    def run(self) -> PredictResult:
        from shardwise.requests import build
        from shardwise.requests.emit_stack import emit_training, priced_launch

        priced, stack_notes, source = self, (), None
        if self.emit is not None:  # priced under the stack the tool's launch runs (`emit_stack`)
            training, stack_notes = emit_training(self.training, self.emit)
            priced = replace(self, training=training)
            if self.training.recompute is None and not self.training.recompute_layers:
                source = f"--emit {self.emit}"  # the mode its launch writes (`emit_stack.launch_recompute`)
        built = priced.training.build()
        scn = built.scenario
        refuse_expert_flags(self.training, scn.model)  # the rest of refuse_idle_flags ran in __post_init__
        if self.engine == "simulate":
            from shardwise.engines.simulated import simulate_training_step

            est = simulate_training_step(scn).estimate
        else:
            from shardwise.engines.training import estimate_training_step

            est = estimate_training_step(scn)
        spread = build.spread([scn], built.calibration)
        low, high = (float(x[0]) for x in spread.bounds(float(est.step_time_s)))
        launch = None if self.emit is None else priced_launch(est, self.emit, self.emit_version)
        notes = (*built.notes, *stack_notes)
        return PredictResult(priced, est, low, high, spread.basis, notes, launch, source)


def _checked_emit(emit: str | None, emit_version: str | None) -> str | None:
    """`predict --emit`'s training tool, lower-cased (`checked_emit`)."""
    return checked_emit(emit, emit_version, "`predict` prices training")


def checked_emit(emit: str | None, emit_version: str | None, command: str) -> str | None:
    """`--emit`'s training launch target, lower-cased (None without one), refused in one line where
    it cannot be: vLLM (it serves), an unknown tool, --emit-version alone; `command` says what the
    refusing command does ("`plan` lays out training")."""
    if emit is None:
        if emit_version is not None:
            raise SpecError("--emit-version needs --emit TARGET")
        return None
    target = emit.lower()
    if target == "vllm":
        raise SpecError(f"--emit vllm: vLLM serves models, and {command}; use `shardwise serve ... --emit vllm`")
    if target not in EMIT_TARGETS:
        raise SpecError(f"--emit: {target!r} is not allowed; use one of {', '.join(EMIT_TARGETS)}")
    return target
