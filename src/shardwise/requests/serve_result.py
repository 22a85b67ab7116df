"""The plans of a serving request priced (`ServeRequest.run` without latency targets): each
plan's estimate, its 80% interval, what would make a plan that does not fit fit, the launch
commands asked for, and the JSON `serve --json` prints."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from shardwise.errors import SpecError
from shardwise.requests import serve_hints
from shardwise.requests.build import MODEL_SHAPE_KEYS
from shardwise.requests.cluster_build import domain_tp_refusal
from shardwise.requests.serve_plans import scenario


@dataclass(frozen=True)
class ServeResult:
    request: Any  # requests.serve.ServeRequest
    setting: Any  # requests.serve.ServeSetting
    rows: list[tuple[str, Any]]  # (plan label, engines estimate), the plans that could be priced
    invalid: list[tuple[str, str]]  # (plan label, why not)
    spreads: dict[str, tuple[float, str]]  # each plan's 80% interval (log sd) and its basis
    hints: dict[str, str]  # what would make a plan that does not fit fit ("": nothing close)
    launches: dict[str, dict[str, Any] | None]  # --emit: each plan's launch
    # in flight: each pipeline plan's PP(k) / PP(1) at full load and its split (`analyses.pp_scaling`),
    # priced on its first read (`scaling`): the explorer's serving tab never reads it
    scaling_of: Callable[[], dict[str, Any]] | None = None
    # without --plan, the expert layouts left out after pricing (`requests.serve_plans.Layouts.twins`)
    dropped: tuple[str, ...] = ()

    @cached_property
    def scaling(self) -> dict[str, Any] | None:
        return None if self.scaling_of is None else self.scaling_of()

    @property
    def notes(self) -> tuple[str, ...]:
        return tuple(self.setting.notes)

    @property
    def compared_layouts(self) -> bool:
        """No --plan was given: the machine's layouts were compared (`requests.serve_plans.layouts`)."""
        return not self.request.plans

    def best(self) -> dict[str, str | None]:
        """Among the plans that fit: the lowest median end-to-end latency at the load asked, and
        the most generated tokens/s the GPUs sustain at full load (`capacity_tokens_per_s`)."""
        fits = [(label, est) for label, est in self.rows if bool(est.fits_in_memory)]
        if not fits:
            return {"latency": None, "throughput": None}
        latency = min(fits, key=lambda r: float(r[1].e2e_s))[0]
        throughput = max(fits, key=lambda r: self.capacity_tokens_per_s(r[1]))[0]
        return {"latency": latency, "throughput": throughput}

    def capacity_tokens_per_s(self, est: Any) -> float:
        """Generated tokens/s of all replicas at full load: in flight, the request rate they sustain
        times the output tokens of a request; a static batch, the largest batch that fits."""
        if self.setting.traffic is not None:
            return float(est.max_request_rate_per_s) * float(est.mean_output_len)
        from shardwise.analyses.serving import at_max_batch

        return float(at_max_batch(est.scenario, est.workload).throughput_tokens_per_s)

    def _layouts_dict(self) -> dict[str, Any]:
        """Without --plan, what was compared (`requests.serve_plans.Layouts`), as the command line says it."""
        found = self.setting.layouts
        return {
            "compared": len(self.setting.specs),
            "experts": (found.experts or None) if found is not None else None,  # null: none compared
            "not_shown": list(self.dropped),
            "not_compared": list(found.left_out) if found is not None else [],
        }

    def valid_specs(self) -> list[Any]:
        bad = dict(self.invalid)
        return [s for s in self.setting.specs if s.label not in bad]

    def as_dict(self, pipeline_scaling: bool = True) -> dict[str, Any]:
        """The JSON `serve --json` prints (`pipeline_scaling=False`: without each pipeline plan's
        PP(k) / PP(1) split, which prices two more replicas per plan: the explorer's page)."""
        from shardwise.export_serving import serving_dict
        from shardwise.requests.serve_notes import header_dict, table_notes

        s, req = self.setting, self.request
        wl = s.workload

        scaling = self.scaling if pipeline_scaling else None
        whys = [split.why(label) for label, split in (scaling or {}).items() if split.superlinear]
        return {
            **header_dict(s.model, s.cluster, wl, req.target.system),
            "workload": {
                "input_len": wl.input_len if s.mix is None else None,
                "output_len": wl.output_len if s.mix is None else None,
                **_mix_dict(s.mix, self.rows, req.seed, req.burstiness, s.traffic),
                "weight_precision": wl.weight_precision,
                "kv_precision": wl.kv_precision,
                "runtime": wl.runtime,
                "attention_kernel": _kernel_of(self.rows),
            },
            "plans": [
                {
                    **_untimed(serving_dict(label, est, *self.spreads[label])),
                    "would_fit": self.hints.get(label),
                    "launch": self.launches.get(label),
                    **(
                        {"pipeline_scaling": self.scaling[label].as_dict()}
                        if pipeline_scaling and self.scaling and label in self.scaling
                        else {}
                    ),
                    **({"frontier": _frontier(s, label)} if req.with_frontier else {}),
                }
                for label, est in self.rows
            ],
            "invalid_plans": [{"plan": label, "reason": reason} for label, reason in self.invalid],
            "compared_layouts": self.compared_layouts,
            **({"layouts": self._layouts_dict()} if self.compared_layouts else {}),
            "best": {
                **self.best(),
                **{f"{key}_layout": _layout(dict(self.rows), label) for key, label in self.best().items()},
                "capacity_tokens_per_s": {
                    label: self.capacity_tokens_per_s(est) if bool(est.fits_in_memory) else None
                    for label, est in self.rows
                },
            },
            # what was assumed (the command line prints them on stderr), then what the report prints
            # under its table (derived expert tp, replicated KV heads, a pipeline's superlinear scaling)
            "notes": [*self.notes, *table_notes(self.rows), *whys],
            "command": req.command(),
        }


# the times and rates of a plan's row (and their 80% intervals): null where it does not fit, as the
# table's "-" (review 35: a static batch over the KV cache printed the times of a batch that cannot run)
TIMED_KEYS = ("ttft_s", "tpot_s", "e2e_s", "throughput_tokens_per_s", "per_user_tokens_per_s")


def _kernel_of(rows: list[tuple[str, Any]]) -> str | None:
    """The attention kernel the plans are priced with (`engines.engine_attention`), None without a plan."""
    if not rows:
        return None
    plan = rows[0][1].scenario.plan
    return str(plan.attention_kernel) if bool(plan.flash_attention) else "unfused"


def _untimed(row: dict[str, Any]) -> dict[str, Any]:
    """`row` (`export_serving.serving_dict`) with no times, rates or their parts where the plan does not fit."""
    if row["fits_in_memory"]:
        return row
    banded = [f"{k}_{end}" for k in TIMED_KEYS for end in ("low", "high") if f"{k}_{end}" in row]
    return {**row, **dict.fromkeys((*TIMED_KEYS, *banded)), "prefill_s": {}, "decode_s": {}}


def priced(request: Any, s: Any, progress: Callable[..., Any] | None = None) -> ServeResult:
    """Every plan of the setting priced; one invalid plan does not stop the others. `progress()` is
    called after each plan, and after each pipeline plan's scaling split when `scaling` is read
    (`progress_steps` of them in all, for a progress bar)."""
    from shardwise.requests.serve_notes import serving_terms

    rows, invalid = [], []
    built: dict[str, Any] = {}  # in flight, each plan's replica, kept for its pipeline-scaling split
    for spec in s.specs:
        try:
            if s.domain_cut is not None and (
                why := domain_tp_refusal(int(spec.tp), int(s.cluster.num_gpus), *s.domain_cut)
            ):
                raise SpecError(why)  # said as predict and plan say it, not as the cut domain's gpus_per_node
            rows.append(_estimate(s, spec, request.max_throughput, built))
        except SpecError as exc:
            invalid.append((spec.label, serving_terms(str(exc), spec, int(s.cluster.num_gpus))))
        if progress is not None:
            progress()
    rows, dropped = _without_twins(rows, s.layouts.twins if s.layouts is not None else {})
    if not rows:
        raise SpecError(
            "; ".join(f"--plan {label}: {reason.removeprefix(f'--plan {label}: ')}" for label, reason in invalid)
        )
    spreads = serve_hints.spreads(rows, request.target.calibration)
    # what would make a plan the user named fit (the machine's own layouts are all compared already)
    hints = {
        label: serve_hints.fit_hint(s, est) for label, est in rows if not bool(est.fits_in_memory) and request.plans
    }
    launches = {}
    if request.emit:
        from shardwise.emit.checkpoint import named

        reshaped = any(getattr(request.target, k, None) is not None for k in RESHAPING)
        model_id = _model_id(request.target.model, request.hf_id, reshaped)
        stored = named(request.hf_id, request.hf_weights) if request.hf_id else _stored(request.target.model)
        launches = {label: _launch(est, request.emit, model_id, stored) for label, est in rows}
    from functools import partial

    scaling = partial(_scaling, request, s, rows, progress, built)
    return ServeResult(request, s, rows, invalid, spreads, hints, launches, scaling, dropped)


def _without_twins(rows: list[tuple[str, Any]], twins: dict[str, str]) -> tuple[list[tuple[str, Any]], tuple[str, ...]]:
    """`rows` less each layout with the experts whole inside its replica (ep = tp) that holds no
    sequence where its twin with them split by TP holds none either: the same weights and KV cache
    per GPU (E / tp whole experts or 1 / tp of each), so a second red row saying the same."""
    est = dict(rows)

    def empty(label: str) -> bool:
        return label in est and int(est[label].max_batch) < 1

    dropped = tuple(label for label, _ in rows if label in twins and empty(label) and empty(twins[label]))
    return [r for r in rows if r[0] not in dropped], dropped


def progress_steps(s: Any) -> int:
    """The `progress()` calls of `priced` and its `scaling`: each plan, and in flight each pipeline
    plan again (at most: one that does not fit is skipped)."""
    pipelines = sum(spec.pp == "all" or int(spec.pp) > 1 for spec in s.specs) if s.traffic is not None else 0
    return len(s.specs) + pipelines


def _scaling(
    request: Any,
    s: Any,
    rows: list[tuple[str, Any]],
    progress: Callable[..., Any] | None,
    built: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """In flight, each pipeline plan that fits against the same plan without stages
    (`analyses.pp_scaling`), at full load; `built`: the replicas the rows were priced on, by label."""
    if s.traffic is None:
        return {}
    from shardwise.analyses.pp_scaling import pipeline_scaling
    from shardwise.specs.experiment import PlanSpec

    specs = {spec.label: spec for spec in s.specs}
    out = {}
    for label, est in rows:
        k = int(est.scenario.plan.pp)
        if k < 2 or not bool(est.fits_in_memory):
            continue
        spec, tp = specs[label], int(est.scenario.plan.tp)
        options = tuple((key, v) for key, v in spec.options if key not in ("first_stage_layers", "last_stage_layers"))
        extra = "".join(f",{key}={v}" for key, v in options if key in ("cp", "ep", "etp"))
        base = PlanSpec(f"tp={tp}{extra}", tp, 1, options)
        try:
            base_scn = scenario(s.model, s.cluster, base, None)
        except SpecError:
            continue
        scn = scenario(s.model, s.cluster, spec, s.stages, s.workload.engine)
        split = pipeline_scaling(
            scn, base_scn, s.workload, s.traffic["max_batched_tokens"],
            base.label, s.traffic["mix"], request.seed, s.traffic["requests"],
            ((built or {}).get(label), (built or {}).get(base.label)),
        )  # fmt: skip
        if split is not None:
            out[label] = split
        if progress is not None:
            progress()
    return out


def _layout(rows: dict[str, Any], label: str | None) -> dict[str, Any] | None:
    """The degrees of the plan named best (as its row in `plans` has them), None where none fits."""
    if label is None:
        return None
    est = rows[label]
    plan, moe = est.scenario.plan, bool(int(est.scenario.model.experts))
    return {
        "tp": int(plan.tp),
        "pp": int(plan.pp),
        "cp": int(plan.cp),
        "ep": int(plan.ep),
        "etp": int(plan.expert_tp) if moe else None,
        "replicas": int(plan.dp),
    }


def _mix_dict(mix: Any, rows: list[tuple[str, Any]], seed: int, burstiness: float, traffic: Any) -> dict[str, Any]:
    """The request lengths and arrivals of --json's workload."""
    if traffic is None:
        return {"lengths": "fixed"}
    out: dict[str, Any] = {"lengths": "fixed" if mix is None else mix.name, "seed": seed, "burstiness": burstiness}
    if mix is not None:
        mean_in, mean_out = mix_means(mix, rows[0][1])
        out.update(lengths_source=mix.source, mean_input_len=mean_in, mean_output_len=mean_out)
    return out


def mix_means(mix: Any, est: Any) -> tuple[float, float]:
    """The mix's mean prompt and output: the estimate's (drawn within the model's context), or a
    table's own weighted means where no estimate ran (the plan does not fit: NaN)."""
    import math

    means = mix.table_means()
    if math.isfinite(est.mean_input_len) or means is None:
        return est.mean_input_len, est.mean_output_len
    return means


def _frontier(s: Any, label: str) -> dict[str, list[float]]:
    """One plan's static-batch frontier (`analyses.serving.frontier`, as `--plot` draws it)."""
    from shardwise.analyses.serving import frontier

    spec = next(x for x in s.specs if x.label == label)
    per_user, per_gpu, batch = frontier(scenario(s.model, s.cluster, spec, s.stages, s.workload.engine), s.workload)
    return {
        "tokens_per_s_per_user": per_user.tolist(),
        "tokens_per_s_per_gpu": per_gpu.tolist(),
        "batch": batch.tolist(),
    }


def _estimate(s: Any, spec: Any, max_throughput: bool, built: dict[str, Any] | None = None) -> tuple[str, Any]:
    from shardwise.analyses.serving import at_max_batch
    from shardwise.engines.serving import estimate_serving

    scn = scenario(s.model, s.cluster, spec, s.stages, s.workload.engine)
    if s.traffic is not None:
        from shardwise.engines.inflight import Replica, estimate_inflight

        t = s.traffic
        replica = Replica(scn, s.workload, t["max_batched_tokens"], t.get("mix"), t.get("seed", 0)).remembering()
        if built is not None:
            built[spec.label] = replica
        users = None if max_throughput or t["rate_per_s"] is not None else int(s.workload.batch)
        return spec.label, estimate_inflight(scn, s.workload, users, **t, replica=replica)
    return spec.label, at_max_batch(scn, s.workload) if max_throughput else estimate_serving(scn, s.workload)


# model flags that make a preset another model: its checkpoint is no longer what was priced
RESHAPING = (*MODEL_SHAPE_KEYS, "family")


def _model_id(model: str | None, hf_id: str | None, reshaped: bool = False) -> str | None:
    """What vLLM loads: --hf-id, else the directory of a config.json given as --model, else the
    Hugging Face id a model preset's source names (`hf_id` in models.yaml), unless a flag reshaped
    the preset (then none: the emitter asks for --hf-id)."""
    if hf_id:
        return hf_id
    name = model or ""
    from shardwise.presets import is_hf_config, model_hf_id

    if is_hf_config(name):
        import os

        return os.path.dirname(os.path.abspath(name))
    return model_hf_id(name) if name and not reshaped else None


def _stored(model: str | None) -> Any:
    """What the checkpoint `_model_id` finds for --model stores (`emit.checkpoint.Stored`): a
    config.json's quantization_config, a preset's hf_weights, else 16 bits."""
    from shardwise.emit.checkpoint import Stored, names_own_hf_id
    from shardwise.hf_quant import model_checkpoint
    from shardwise.presets import is_hf_config

    try:
        found = model_checkpoint(model)
    except SpecError as exc:  # a quant_method not read: what the server loads is not known here
        raise SpecError(
            f"{str(exc).partition('; give')[0]}, so the launch could load other weights than priced; "
            "give --hf-id ORG/NAME (or a local directory) to launch it as named"
        ) from None
    if model and is_hf_config(model):
        return Stored(found and found.precision, f"{os.path.basename(model)}'s quantization_config")
    if model and found is None and names_own_hf_id(model):  # its storage unstated: not known, as an --hf-id
        return Stored(None, f"{os.path.basename(model)} states no hf_weights", False, f"`hf_weights: {{p}}` in {model}")
    return Stored(found and found.precision, "the preset's hf_id" if found is None else "the preset's hf_weights")


def _launch(est: Any, emit: str | None, model_id: str | None, stored: Any = None) -> dict[str, Any] | None:
    """The `vllm serve` of one priced plan (a dict: `Launch.as_dict`); a plan that does not fit is refused."""
    if emit is None:
        return None
    from shardwise.emit import EmitError, vllm_launch

    if not bool(est.fits_in_memory):
        per_replica = -(-int(est.workload.batch) // int(est.scenario.plan.dp))
        raise EmitError(
            f"--emit {emit}: the plan tp={int(est.scenario.plan.tp)} pp={int(est.scenario.plan.pp)} does not fit in "
            f"memory: a replica holds {int(est.max_batch)} of its {per_replica} sequences; not emitted"
        )
    from shardwise.emit.vllm_kv import kv_pool

    pool = kv_pool(est) if emit == "vllm" else None  # a replica's KV in vLLM's blocks: --max-model-len's fit
    if getattr(est, "batching", "static") != "inflight":
        return vllm_launch(est.scenario, est.workload, model_id, kv_pool=pool, stored=stored, engine=emit).as_dict()
    # in-flight: the chunk budget priced, the sequences a replica ran at once (`InflightEstimate.running_per_replica`;
    # TensorRT-LLM's max_batch_size: the one its buffers and slots were priced with, trtllm-bench's)
    seqs = int(est.max_sequences) if emit == "trtllm" and getattr(est, "max_sequences", 0) else est.running_per_replica
    return vllm_launch(
        est.scenario,
        est.workload,
        model_id,
        max_batched_tokens=int(est.max_batched_tokens),
        max_num_seqs=seqs,
        asked=est.users,
        kv_pool=pool,
        stored=stored,
        engine=emit,
    ).as_dict()
