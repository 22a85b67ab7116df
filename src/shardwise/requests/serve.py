"""`shardwise serve` as a request: serving a model on a cluster with one or more plans -- time to
first token, time per output token, throughput and memory -- or, with latency targets, the
search for the plan, precision and load that give the most tokens/s per GPU within them.

    >>> from shardwise.requests.serve import ServeRequest
    >>> from shardwise.requests.training import TrainingRequest
    >>> req = ServeRequest(TrainingRequest(model="llama3-70b", system="dgx-h100"), plans=("tp=8", "pp=8"))
    >>> req.command()
    'shardwise serve --model llama3-70b --system dgx-h100 --plan tp=8 --plan pp=8'
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from shardwise.errors import SpecError
from shardwise.precisions import STORAGE_PRECISIONS
from shardwise.requests import fields as F
from shardwise.requests.field_ranges import require
from shardwise.requests.serve_flags import check_load_clash, check_serve_fields, default_batching, resolved_batching
from shardwise.requests.serve_targets import TargetsResult
from shardwise.requests.training import TrainingRequest
from shardwise.serving_names import FRAMEWORK_NVLS_OFF, RUNTIME_NAMES, SERVING_FRAMEWORKS
from shardwise.specs.serving import ENGINE_ALL_REDUCE

if TYPE_CHECKING:
    from shardwise.requests.serve_result import ServeResult

# The serving stacks, the runtime each implies, those with NVLS off and the runtimes are
# `serving_names`' (light, for the command line's options; imported above) ...
# ... and the all-reduce kernel each uses on small messages (physics/custom_allreduce.py), the
# default of `ServingWorkload` too
FRAMEWORK_ALL_REDUCE = ENGINE_ALL_REDUCE
# the model and cluster fields a serving request takes from the training ones (its plans are its own)
CLUSTER_NAMES = {f.name for f in (*F.MODEL_FIELDS, *F.CLUSTER_FIELDS)} | {"first_stage_layers", "last_stage_layers"}

_f = F._f
SERVE_FIELDS = (
    _f("plans", "list", (), flag="--plan"),
    _f("input_len", "int"),  # None: 512 (and not "given", for --lengths)
    _f("output_len", "int"),  # None: 128
    _f("lengths", "str", "fixed"),
    _f("burstiness", "float", 1.0),
    _f("seed", "int", 0),
    _f("concurrency", "int", dest="batch"),  # None: 1 (and not "given", for the latency targets)
    _f("max_throughput", "bool", False),
    _f("request_rate", "float"),
    _f("batching", "str", None, "inflight", "static"),  # None: the engine's (`serve_flags.resolved_batching`)
    _f("max_batched_tokens", "int"),
    _f("requests", "int", 1000),
    _f("weight_precision", "str", None, *STORAGE_PRECISIONS),
    _f("kv_precision", "str", None, *STORAGE_PRECISIONS),
    _f("ttft_max", "str"),
    _f("tpot_max", "str"),
    _f("slo_percentile", "str", None, "50", "90", "99"),
    _f("runtime", "str", None, *RUNTIME_NAMES),
    _f("attention_kernel", "str", None, "fused", "flash2", "flash3", "flash4"),
    _f("framework", "str", None, *SERVING_FRAMEWORKS),
    _f("custom_all_reduce", "bool", True),
    _f("with_frontier", "bool", False),
    _f("emit", "str", None, "vllm", "sglang", "trtllm"),
    _f("hf_id", "str"),
    _f("hf_weights", "str", None, *STORAGE_PRECISIONS),
)
DEFAULT_INPUT_LEN, DEFAULT_OUTPUT_LEN, DEFAULT_CONCURRENCY = 512, 128, 1
_OWN = {f.option: f for f in SERVE_FIELDS}


@dataclass(frozen=True)
class ServeRequest:
    """The model and cluster (`target`: a TrainingRequest whose plan fields other than the first
    and last stage's layers are not used) and the serving question. A None length or concurrency
    is "not given": the default applies (512 prompt and 128 new tokens, one request in flight)."""

    target: TrainingRequest = field(default_factory=TrainingRequest)
    plans: tuple[str, ...] = ()
    input_len: int | None = None
    output_len: int | None = None
    lengths: str = "fixed"
    burstiness: float = 1.0
    seed: int = 0
    concurrency: int | None = None
    max_throughput: bool = False
    request_rate: float | None = None
    batching: str | None = None  # None: inflight, static where the engine has no continuous batching
    max_batched_tokens: int | None = None
    requests: int = 1000
    weight_precision: str | None = None
    kv_precision: str | None = None
    ttft_max: str | None = None
    tpot_max: str | None = None
    slo_percentile: str | None = None  # None: 90; only with --ttft-max/--tpot-max
    runtime: str | None = None
    attention_kernel: str | None = None  # None: the engine's on the GPU (`engines.engine_attention`)
    framework: str | None = None  # None: tensorrt-llm, or the --emit target's engine (resolved below)
    custom_all_reduce: bool = True
    with_frontier: bool = False
    emit: str | None = None
    hf_id: str | None = None
    hf_weights: str | None = None  # what --hf-id stores, where it is not read (`emit.checkpoint.named`)

    def __post_init__(self) -> None:
        require(self, "target", TrainingRequest)
        F.normalize(self, SERVE_FIELDS, where=True)
        check_serve_fields(self)  # the ranges `serve` checks, before `.command()` can print them
        from shardwise.emit import SERVING_TARGETS

        if self.framework is None:  # --emit X prices the plans as the X server it prints runs them
            object.__setattr__(self, "framework", SERVING_TARGETS.get(str(self.emit), "tensorrt-llm"))
        object.__setattr__(self, "batching", resolved_batching(self))
        check_load_clash(self)  # the load flags that clash, before `.command()` can print them
        # flags that only qualify another: one line each where that other is missing
        if self.slo_percentile is not None and not self.targets:
            raise SpecError("--slo-percentile says which percentile --ttft-max/--tpot-max bound; add one of them")
        if self.hf_id is not None and self.emit is None:
            raise SpecError("--hf-id names the checkpoint the --emit server loads; add --emit vllm, sglang or trtllm")
        if self.hf_weights is not None and self.hf_id is None:
            raise SpecError("--hf-weights states what the --hf-id checkpoint stores; add --hf-id ORG/NAME")
        if self.emit is not None and self.framework != (engine := SERVING_TARGETS[self.emit]):
            raise SpecError(
                f"--emit {self.emit} prints {engine} servers, but --framework {self.framework} prices the plans as "
                f"{self.framework} runs them (KV-cache rule, chunk budget, all-reduce kernel); use --framework {engine}"
            )

    # --- ways in and out -----------------------------------------------------------------------
    @classmethod
    def from_options(cls, options: dict[str, Any]) -> ServeRequest:
        """From `serve`'s parsed click options (click's names)."""
        own = F.by_name(options, SERVE_FIELDS)
        target = {k: v for k, v in F.by_name(options).items() if k in CLUSTER_NAMES}
        return cls(TrainingRequest(**target), **own)

    @classmethod
    def from_argv(cls, argv: list[str] | tuple[str, ...] | str) -> ServeRequest:
        args = F.split_argv(argv)
        while args and args[0] in ("shardwise", "serve"):
            args.pop(0)
        values = F.parse_argv(args, _OWN)
        own = {f.name for f in SERVE_FIELDS}
        extra = sorted(k for k in values if k not in own and k not in CLUSTER_NAMES)
        if extra:
            raise SpecError(f"--{extra[0].replace('_', '-')}: not an option of serve")
        target = TrainingRequest(**{k: v for k, v in values.items() if k not in own})
        return cls(target, **{k: v for k, v in values.items() if k in own})

    def to_argv(self) -> list[str]:
        own = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "target"}
        if own["batching"] == default_batching(str(self.framework)):  # said by the engine's name
            own["batching"] = None
        return ["serve", *self.target.to_argv(), *F.argv_of(own, SERVE_FIELDS)]

    def command(self) -> str:
        return "shardwise " + shlex.join(self.to_argv())

    @property
    def targets(self) -> bool:
        return self.ttft_max is not None or self.tpot_max is not None

    def _tp_max(self, cluster: Any) -> int:
        """The largest tp the plans compared use (without --plan: a server's GPUs), which must split
        the heads of a model made --hidden wide (`requests.model_shape`)."""
        from shardwise.requests.serve_notes import serving_specs

        tps = [cluster.num_gpus if s.tp == "all" else s.tp for s in serving_specs(self.plans)] if self.plans else []
        return int(max(tps)) if tps else min(int(cluster.gpus_per_node), int(cluster.num_gpus))

    # --- the answer ----------------------------------------------------------------------------
    def setting(self) -> ServeSetting:
        """Model, cluster, plans, workload and traffic resolved and checked (no plan priced yet)."""
        from shardwise import hf_notes
        from shardwise.requests.build import build_cluster, build_model, load_calibration, model_notes, stage_kwargs
        from shardwise.requests.serve_mix import check_mix_flags, request_mix
        from shardwise.specs.serving import ServingWorkload

        notes: list[str] = []
        options = self.target.values()
        cluster_options = {**options, "tp": 1, "pp": 1, "dp": None, "vpp": 1, "micro_batch": 1, "global_batch": None}
        cal = load_calibration(options.get("calibration"))
        cluster = build_cluster(cluster_options, notes, cal)
        with hf_notes.serving_notes():  # a config.json's training cap does not apply (`hf_notes`)
            model = build_model(options, self._tp_max(cluster))  # --hidden: the heads every plan's tp splits
        notes[:0] = model_notes(options)
        if model.is_hybrid:  # as `engines.serving.serving_scenario` says, once instead of per plan
            raise SpecError(f"model {model.name!r}: serving a hybrid Mamba-2 model is not priced yet (training is)")
        if cal is not None:
            from shardwise.calibration.explain import untested_for_serving

            notes += untested_for_serving(cal)
            if cal.serving_runs and self.batching != "static":  # calibration.runs prices them as static batches
                notes.append(
                    f"{cal.path}'s {cal.serving_runs} serving run(s) were fitted as static batches (as "
                    "--batching static prices them); these estimates keep the requests in flight"
                )
        from shardwise.engines.engine_formats import check_engine_gpu

        check_engine_gpu(self.framework, cluster.gpu)  # TensorRT-LLM on V100 or an AMD GPU, ...
        if self.framework in FRAMEWORK_NVLS_OFF and options.get("nvls") is None:
            cluster = cluster.with_(nvls=False)
        if options.get("system"):  # the system's PCIe switches and sockets, if its preset has them
            from shardwise.presets import system

            cluster = cluster.with_(pcie=system(options["system"]).pcie)
        from shardwise.requests.serve_plans import checked_specs

        specs, found = checked_specs(self.plans, cluster, model, self.framework, notes)
        stages = stage_kwargs(options, int(model.layers))
        if stages and all(spec.pp == 1 for spec in specs):  # were ignored without a word (predict refuses them)
            flags = " and ".join(f"--{key.replace('_', '-')}" for key in stages)
            raise SpecError(f"{flags}: no --plan has a pipeline to split; give a plan with pp > 1 (e.g. tp=4,pp=2)")
        runtime = self.runtime or SERVING_FRAMEWORKS[self.framework]
        budget = self.max_batched_tokens
        if budget is not None and not 256 <= budget <= 1 << 20:
            raise SpecError(f"--max-batched-tokens: {budget} is not allowed; give a whole number from 256 to {1 << 20}")
        if not 0 <= self.seed <= 2**32 - 1:
            raise SpecError(f"--seed: {self.seed} is not allowed; give a whole number from 0 to {2**32 - 1}")
        if budget is None:  # the framework's chunked-prefill budget on this GPU
            from shardwise.engines.engine_presets import max_batched_tokens as engine_budget

            budget = engine_budget(self.framework, float(cluster.gpu.memory_bytes), cluster.gpu.name)
        from shardwise.requests.precision import resolved

        stored = self._checkpoint_weights(notes)
        try:
            kernel = FRAMEWORK_ALL_REDUCE.get(self.framework, "none") if self.custom_all_reduce else "none"
            workload = ServingWorkload(
                DEFAULT_INPUT_LEN if self.input_len is None else self.input_len,
                DEFAULT_OUTPUT_LEN if self.output_len is None else self.output_len,
                DEFAULT_CONCURRENCY if self.concurrency is None else self.concurrency,
                stored or resolved(self.weight_precision, cluster.gpu, "--weight-precision", notes),
                resolved(self.kv_precision, cluster.gpu, "--kv-precision", None),  # one note, the weights'
                runtime,
                kernel,
                engine=self.framework,
                attention_kernel=self.attention_kernel,
            )
        except SpecError as exc:  # name the flag: "serving: input_len: ..." -> "--input-len: ..."
            text = str(exc).removeprefix("serving: ")
            name, _, rest = text.partition(": ")
            flags = {"input_len": "--input-len", "output_len": "--output-len", "batch": "--concurrency"}
            raise SpecError(f"{flags[name]}: {rest}" if name in flags and rest else str(exc)) from None
        from shardwise.engines.engine_attention import check_serving_kernel, serving_attention_note
        from shardwise.engines.engine_formats import check_kv_format, check_weight_format

        if stored is None:
            check_weight_format(self.framework, cluster.gpu, workload.weight_precision, "--weight-precision")
        else:  # the checkpoint's, which the user did not name
            try:
                check_weight_format(self.framework, cluster.gpu, stored, self._stored_field())
            except SpecError as exc:
                raise SpecError(f"{exc} with --weight-precision (a checkpoint stored so)") from None
        check_kv_format(self.framework, cluster.gpu, workload.kv_precision, "--kv-precision", model)
        check_serving_kernel(self.framework, cluster.gpu, self.attention_kernel, self.emit)  # `engine_attention`
        if (attention := serving_attention_note(self.framework, cluster.gpu, self.attention_kernel)) is not None:
            notes.append(attention)
        from shardwise.engines.engine_describe import llama_server_note

        loaded = self.max_throughput or self.request_rate is not None
        if slots := llama_server_note(
            self.framework, self.concurrency, loaded, workload.input_len + workload.output_len
        ):
            notes.append(slots)
        if self.targets and self.weight_precision is None and stored is None:  # the formats searched
            from shardwise.analyses.serving_targets import formats_note

            notes.append(formats_note(cluster, self.framework, model))
        mix = request_mix(self.lengths)
        if mix is None and (total := workload.input_len + workload.output_len) > model.serving_context:
            notes.append(  # priced all the same: a model file may state its pre-training length only
                f"{total:,} tokens per request is more than {model.name}'s {model.context_words}: "
                "priced as asked, beyond the context the model states (--seq-len to change it)"
            )
        given = self.input_len is not None or self.output_len is not None
        check_mix_flags(mix, self.burstiness, self.request_rate, self.batching, self.targets, self.emit, given)
        from shardwise.requests.serve_flags import check_load_flags

        traffic = check_load_flags(self, budget, mix)
        from shardwise.requests.cluster_build import domain_cut

        cut = domain_cut(cluster_options, cluster)  # a rack's NVLink domains cut by --num-gpus
        return ServeSetting(
            model, cluster, tuple(specs), stages, workload, budget, mix, traffic, tuple(notes), found, cut, stored
        )

    def _checkpoint_weights(self, notes: list[str]) -> str | None:
        """The weights' storage the checkpoint --model loads states, where no --weight-precision is
        given (`requests.checkpoint_weights`, as crossover/sweep take it); None: 16 bits, the GPU's."""
        from shardwise.requests.checkpoint_weights import checkpoint_weights

        if self.weight_precision is None and self.hf_weights not in (None, "bf16", "fp16"):  # the --hf-id's
            notes.append(f"weights {self.hf_weights}: the checkpoint's, as --hf-weights states them")
            return self.hf_weights
        return None if self.weight_precision is not None else checkpoint_weights(self.target.model, notes)

    def _stored_field(self) -> str:
        """Where the checkpoint's precision was read, as a refusal names it."""
        from shardwise.presets import is_hf_config

        name = self.target.model
        if self.hf_weights is not None:
            return f"--hf-weights {self.hf_weights}:"
        return (
            f"{name}'s quantization_config:" if is_hf_config(name) else f"{name}'s published checkpoint (hf_weights):"
        )

    def run(self, progress: Any = None) -> ServeResult | TargetsResult:
        """Each plan priced (`ServeResult`), or with --ttft-max/--tpot-max the search
        (`TargetsResult`; `progress(n)` is called as plans x precisions are done)."""
        s = self.setting()
        if self.targets:
            return self.search(s, progress)
        from shardwise.requests.serve_result import priced

        return priced(self, s)

    def search(self, s: ServeSetting, progress: Any = None) -> TargetsResult:
        """The latency-target search on a resolved setting (`progress(n)` as plans x precisions are done)."""
        from shardwise.analyses.serving_targets import search
        from shardwise.requests.serve_flags import seconds_of
        from shardwise.requests.serve_plans import scenario_of

        ttft, tpot = seconds_of(self.ttft_max, "--ttft-max"), seconds_of(self.tpot_max, "--tpot-max")
        pct = f"p{self.slo_percentile or '90'}"
        fixed = self.weight_precision is not None or s.checkpoint is not None  # given, or the checkpoint's
        choices = [(s.workload.weight_precision, s.workload.kv_precision)] if fixed else None
        candidates = None
        if self.plans:
            candidates = [scenario_of(s.model, s.cluster, spec, s.stages, s.workload.engine) for spec in s.specs]
        elif s.layouts is not None and (s.layouts.experts or s.stages):  # the expert layouts; --*-stage-layers
            candidates = []
            for spec in self._searched_specs(s):
                try:
                    candidates.append(scenario_of(s.model, s.cluster, spec, s.stages, s.workload.engine))
                except SpecError as exc:  # priced as refused, as a --plan is
                    candidates.append((spec.label, exc))
        options = search(
            s.model, s.cluster, s.workload, ttft, tpot, pct, candidates, choices, s.max_batched_tokens, progress,
            (self.requests, self.seed),
        )  # fmt: skip
        dropped: tuple[tuple[str, str], ...] = ()
        if not self.plans and s.layouts is not None and s.layouts.twins:
            from shardwise.analyses.serving_targets import without_twins

            options, dropped = without_twins(options, s.layouts.twins)
        return TargetsResult(self, s, options, ttft, tpot, pct, dropped)

    def _searched_specs(self, s: ServeSetting) -> list[Any]:
        """Without --plan on a mixture of experts under an engine with expert parallelism, the
        layouts `serve` compares (`requests.serve_plans.layouts`: ep 1, ep = tp and data-parallel
        attention) that the search can price (`analyses.serving_targets.searchable`)."""
        from shardwise.analyses.serving_targets import searchable

        return [spec for spec in s.specs if searchable(s.model, self.framework, int(spec.tp), int(spec.pp))]

    def search_size(self, s: ServeSetting) -> int:
        """How many plans x precisions the target search prices (for a progress bar)."""
        from shardwise.analyses.serving_targets import plans, precisions

        if self.plans:
            n_plans = len(s.specs)
        elif s.layouts is not None and (s.layouts.experts or s.stages):
            n_plans = len(self._searched_specs(s))
        else:
            n_plans = len(plans(int(s.cluster.num_gpus), s.cluster.gpus_per_node))
        fixed = self.weight_precision is not None or s.checkpoint is not None
        n_precisions = 1 if fixed else len(precisions(s.cluster, self.framework, s.model))
        return n_plans * n_precisions


@dataclass(frozen=True)
class ServeSetting:
    """What a serving request resolves to before any plan is priced."""

    model: Any
    cluster: Any
    specs: tuple[Any, ...]  # specs.experiment.PlanSpec, one per --plan
    stages: dict[str, Any]
    workload: Any  # specs.serving.ServingWorkload
    max_batched_tokens: int
    mix: Any  # specs.request_mix.RequestMix, or None: fixed lengths
    traffic: dict[str, Any] | None  # the in-flight simulation's settings; None: static batching
    notes: tuple[str, ...]
    layouts: Any = None  # requests.serve_plans.Layouts: the plans given, or the machine's compared without --plan
    domain_cut: tuple[int, int] | None = None  # (GPUs per NVLink domain, as cut): `cluster_build.domain_cut`
    checkpoint: str | None = None  # the weights' storage a config.json's quantization_config states, if taken
