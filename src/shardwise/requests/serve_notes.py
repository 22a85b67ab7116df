"""What `serve`'s report says beside its table, as data: the engine and all-reduce kernels the
header names (`header_dict`) and the notes it prints under the table (`report_notes`), so that
`serve --json` and `-o` carry them as the text shows them (`requests.serve_result.ServeResult.as_dict`,
`cli.serve_report`)."""

from __future__ import annotations

from typing import Any

ENGINE_NAMES = {"trtllm": "TensorRT-LLM", "vllm": "vLLM", "sglang": "SGLang"}


def all_reduce_use(kernel: str, cluster: Any) -> tuple[str, str]:
    """Which all-reduce the engine uses on this box (physics/custom_allreduce.py's rules): (kernel
    name or "", where: "never", "2 GPUs", "small messages")."""
    import numpy as np

    from shardwise.physics.custom_allreduce import custom_all_reduce_s, is_nvlink_class

    link = cluster.intra_node_link
    nvlink = is_nvlink_class(link)

    def used(ranks: int) -> bool:  # the engine's rules, on a small message
        return bool(np.isfinite(custom_all_reduce_s(1024.0, ranks, link, kernel, nvlink, cluster.p2p)))

    if not used(2):
        return "", "never"
    return ENGINE_NAMES[kernel], "2 GPUs" if not used(4) else "small messages"


def all_reduce_text(kernel: str, cluster: Any) -> str:
    """The header's words for `all_reduce_use`."""
    name, where = all_reduce_use(kernel, cluster)
    if where == "never":
        return "all-reduce: NCCL"
    if where == "2 GPUs":
        return f"all-reduce: {name}'s own kernel for 2 GPUs, NCCL otherwise"
    return f"all-reduce: {name}'s own kernel on small messages, NCCL above"


def header_dict(model: Any, cluster: Any, workload: Any, system: str | None) -> dict[str, Any]:
    """The report header's names as JSON fields: model, system, GPUs, engine, all-reduce kernels. The
    model is an object, its `name` and architecture, as plan's `model` and predict's `scenario.model`
    (review 40 #9: a string here, an object there)."""
    from shardwise.engines.engine_presets import engine
    from shardwise.export import model_dict

    preset = engine(workload.engine)
    name, where = all_reduce_use(workload.custom_all_reduce, cluster)
    return {
        "model": model_dict(model),
        "system": system,
        "gpus": int(cluster.num_gpus),
        "gpu": cluster.gpu.name,
        "intra_node_link": cluster.intra_node_link.name,
        "engine": {"name": preset.name, "version": preset.version},
        "all_reduce": {
            # the engine's own kernel (null: NCCL only), and where it is used instead of NCCL
            "custom_kernel": name or None,
            "custom_used_for": None if where == "never" else where,
            "otherwise": "nccl",
        },
    }


def replicated_kv(rows: list[tuple[str, Any]]) -> str:
    """The plans whose tp is above the KV heads, each head on tp / kv_heads ranks (`rules.kv_replica_rule`)."""
    kv = [(label, int(e.scenario.plan.tp), int(e.scenario.model.kv_heads)) for label, e in rows]
    named = [f"{label}: {k} KV heads, each on {t // k} GPUs" for label, t, k in kv if t > k]
    return f"KV heads replicated (tp above them): {'; '.join(named)}" if named else ""


def derived_etp(rows: list[tuple[str, Any]]) -> str:
    """A line naming the expert tensor-parallel size of each plan that leaves it to be derived
    (`tp=1,ep=4` on 8 GPUs is etp=2: each GPU holds half of 2 experts, not 2 whole ones), or ""."""
    derived = [
        f"{label}: etp={int(est.scenario.plan.etp)}"
        for label, est in rows
        if int(est.scenario.plan.ep) > 1 and int(est.scenario.plan.etp) > 1 and "etp=" not in label
    ]
    if not derived:
        return ""
    return (
        f"expert tensor parallelism derived (ep x etp = tp, or tp x dp with data-parallel attention): "
        f"{'; '.join(derived)} (each expert split over etp GPUs; etp=N in --plan to choose)"
    )


def table_notes(rows: list[tuple[str, Any]]) -> list[str]:
    """The notes printed under the table (derived expert tp, replicated KV heads), those that apply."""
    return [note for note in (derived_etp(rows), replicated_kv(rows)) if note]


# a missed percentile more than this many times its value one load below: a step, not a slope
CLIFF_RATIO = 3.0


def lockstep_cliff(option: Any, ttft_max_s: float | None, tpot_max_s: float | None, pct: str) -> str:
    """The latency search's best (`analyses.serving_targets.Option`) where the next load misses a
    target that its own load met with room to spare (its percentile at most 1 / CLIFF_RATIO of the
    target): requests of one fixed length arrive, prefill and finish in lock-step waves, so one
    more request per replica can push a whole wave's prompts behind another's and the percentile
    jumps (review 35: p90 TTFT 53.7 ms at 88 users, 540 ms at 96). The search prices fixed lengths
    only; a mix spreads the waves. "" where there is no such step."""
    if option is None or option.estimate is None or not option.meets:
        return ""
    p = option.estimate.percentiles_s or {}
    from shardwise.units import format_seconds

    for name, key, limit in (("TTFT", "ttft_s", ttft_max_s), ("TPOT", "tpot_s", tpot_max_s)):
        if limit is None or f"{name} " not in option.why:
            continue
        value = float(p[key][pct])
        if value * CLIFF_RATIO <= limit:
            return (
                f"{option.label}: its {pct} {name} is {format_seconds(value)} at {option.users_per_replica:,} per "
                f"replica, well inside the target, and the next load tried misses it ({option.why}): a step of fixed "
                "lengths, the requests prefilling and finishing in lock-step waves; with a mix of lengths the step "
                "smooths out: check the best with --lengths sharegpt (or your own --lengths FILE.csv) at its "
                "--concurrency"
            )
    return ""


def search_notes(found: Any) -> list[str]:
    """The latency search's notes (`requests.serve_targets.TargetsResult`): what was assumed, and a lock-step
    step behind the best load (`lockstep_cliff`)."""
    best = found.options[0] if found.options else None
    cliff = lockstep_cliff(best, found.ttft_max_s, found.tpot_max_s, found.percentile)
    return [*found.setting.notes, *([cliff] if cliff else [])]


# the --plan keys a serving plan takes (`requests.serve.ServeRequest.setting` refuses the others)
SERVING_PLAN_KEYS = ("tp", "pp", "cp", "first", "last", "ep", "etp")


def serving_terms(message: str, spec: Any = None, gpus: int = 0) -> str:
    """A plan's refusal, written for training plans, in serving's terms: the --plan keys serving
    takes, no virtual stages ("pp=2, vpp=1"), first=/last= for the end stages' layers; an ep above
    what data-parallel attention spreads over under a pipeline said as such (the experts go over
    one stage's GPUs, tp x dp = GPUs / pp)."""
    import re

    from shardwise.specs.experiment import PlanSpec

    keys = ", ".join(PlanSpec.KEYS)
    message = message.replace(f"KEY one of {keys}", f"KEY one of {', '.join(SERVING_PLAN_KEYS)} (serving)")
    message = re.sub(r"(\(pp=\d+), vpp=1\)", r"\1)", message)
    message = message.replace("change first/last_stage_layers", "change first= / last=")
    message = message.replace(" per model chunk: use", ": use")
    if spec is not None and "data-parallel attention" in message and int(spec.pp) > 1 and gpus:
        pp, tp = int(spec.pp), int(spec.tp)
        message += (
            f"; under pp={pp} data-parallel attention spreads the experts over one pipeline stage's "
            f"{gpus // pp} GPUs, not all {gpus} (engines run it without a pipeline: tp={tp},ep={gpus})"
        )
    return message


def serving_specs(texts: Any) -> list[Any]:
    """The --plan texts parsed (`loaders.parse_plan_spec`), a refusal in serving's terms (`serving_terms`)."""
    from shardwise.errors import SpecError
    from shardwise.loaders import parse_plan_spec

    try:
        return [parse_plan_spec(t) for t in texts]
    except SpecError as exc:
        raise SpecError(serving_terms(str(exc))) from None
