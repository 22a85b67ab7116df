"""The scenario each `serve --plan` names (shared by the serve command and its report), and the
plans an engine runs (`kv_replicas_run`)."""

from __future__ import annotations

from typing import Any

from shardwise.errors import SpecError


def scenario_of(model: Any, cluster: Any, spec: Any, stages: dict[str, Any] | None) -> tuple[str, Any]:
    return spec.label, scenario(model, cluster, spec, stages)


def scenario(model: Any, cluster: Any, spec: Any, stages: dict[str, Any] | None = None) -> Any:
    from shardwise.engines.serving import plan_for_serving
    from shardwise.errors import SpecError
    from shardwise.specs import Scenario
    from shardwise.specs.rules import raise_first, serving_expert_rule, serving_expert_tp

    gpus = int(cluster.num_gpus)
    tp, pp, dp = (float(x) for x in spec.degrees(gpus))
    if not dp.is_integer() or dp < 1:
        cp = dict(spec.options).get("cp", 1)
        what = "tp x pp" + (" x cp" if cp > 1 else "")
        raise SpecError(f"--plan {spec.label}: {what} = {tp * pp * cp:g} does not divide the {gpus} GPUs")
    options = dict(spec.options)
    experts = {k: options.pop(k) for k in ("cp", "ep", "etp") if k in options}
    if experts.get("ep", 1) > 1:  # over the TP GPUs (etp = tp / ep) or all of them (tp dp / ep) unless given
        experts["etp"] = serving_expert_tp(int(tp), experts["ep"], experts.get("etp", 0), int(dp))
        raise_first([serving_expert_rule(int(tp), experts["ep"], experts["etp"], int(dp))])
    split = {**(stages or {}), **options} if pp > 1 else {}
    return Scenario(model, cluster, plan_for_serving(int(tp), int(pp), int(dp)).with_(**split, **experts))


def kv_replicas_run(specs: list[Any], framework: str, kv_heads: int, given: bool) -> list[Any]:
    """`specs` as `framework` runs them: an engine that does not replicate KV heads takes no tp above
    them (a --plan given is refused in one line; the layouts compared without one leave it out)."""
    from shardwise.specs.rules import KV_REPLICATING

    if framework in KV_REPLICATING:
        return specs
    above = [s for s in specs if isinstance(s.tp, int) and s.tp > kv_heads]
    if above and given:
        raise SpecError(
            f"--plan {above[0].label!r}: tp={above[0].tp} is above the model's {kv_heads} KV heads, which "
            f"{framework} does not replicate (vLLM, SGLang and TensorRT-LLM do: --framework vllm)"
        )
    return [s for s in specs if s not in above]
