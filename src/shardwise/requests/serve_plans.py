"""The scenario each `serve --plan` names (shared by the serve command and its report), the
layouts compared without --plan (`layouts`), and the plans an engine runs (`kv_replicas_run`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shardwise.errors import SpecError


def scenario_of(
    model: Any, cluster: Any, spec: Any, stages: dict[str, Any] | None, engine: str = ""
) -> tuple[str, Any]:
    return spec.label, scenario(model, cluster, spec, stages, engine)


def resolved_all(specs: list[Any], gpus: int) -> list[Any]:
    """`specs` with each 'all' the degree it resolves to on `gpus` GPUs (`PlanSpec.degrees`), in its
    label too ("tp=all" on 8 GPUs: "tp=8"; the table, JSON and refusals showed "tp=all"; review 50 #12);
    one that resolves to no whole layout kept as given (refused where priced)."""
    import re
    from dataclasses import replace

    out = []
    for spec in specs:
        if "all" not in (spec.tp, spec.pp):
            out.append(spec)
            continue
        tp, pp, dp = (float(x) for x in spec.degrees(gpus))
        if not dp.is_integer() or dp < 1:
            out.append(spec)
            continue
        degree = {"tp": int(tp), "pp": int(pp)}
        label = re.sub(r"\b(tp|pp)=all\b", lambda m, d=degree: f"{m[1]}={d[m[1]]}", spec.label)
        out.append(replace(spec, label=label, tp=int(tp), pp=int(pp)))
    return out


def scenario(model: Any, cluster: Any, spec: Any, stages: dict[str, Any] | None = None, engine: str = "") -> Any:
    """The Scenario of --plan `spec`; its stages as `stages` or the plan say, else as `engine` splits
    them itself (`specs.stages.engine_split_counts`: TensorRT-LLM's tensor_split)."""
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
    if pp > 1 and not split:
        from shardwise.specs.stages import engine_split_counts

        if (counts := engine_split_counts(engine, int(model.layers), int(pp))) is not None:
            split = {"stage_layers": counts}
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


# Engines that run a mixture of experts' experts whole on expert-parallel ranks, both inside a
# replica's TP group (ep = tp) and with data-parallel attention over every GPU (ep = tp x dp):
# vLLM `--enable-expert-parallel` (with `--data-parallel-size`), SGLang `--ep-size` (with
# `--enable-dp-attention`), TensorRT-LLM `moe_expert_parallel_size` (with `enable_attention_dp`)
# (`specs.expert_rules.serving_expert_rule`, docs/serving.md). llama.cpp splits every expert over
# its GPUs (`-sm row` / `tensor`) or whole layers (`-sm layer`), and the FasterTransformer and
# PyTorch-eager stacks are priced with the experts split by TP: their default stays ep 1.
EXPERT_PARALLEL_ENGINES = ("tensorrt-llm", "vllm", "sglang")


def experts_run(specs: list[Any], framework: str) -> list[str]:
    """The notes on the --plan `specs` with ep > 1 under an engine without expert parallelism:
    llama.cpp's are refused in one line, as its tp above the KV heads is (`kv_replicas_run`);
    FasterTransformer's and PyTorch's priced as if they ran it, with a note."""
    with_ep = [s for s in specs if dict(s.options).get("ep", 1) > 1]
    if not with_ep or framework in EXPERT_PARALLEL_ENGINES:
        return []
    if framework == "llama.cpp":
        raise SpecError(
            f"--plan {with_ep[0].label!r}: llama.cpp runs no expert parallelism (it splits every expert over "
            "its GPUs, -sm row, or places whole layers, -sm layer); give ep=1, or --framework vllm, sglang or "
            "tensorrt-llm"
        )
    return [
        f"{framework} runs no expert parallelism (only tensorrt-llm, vllm and sglang do): its plans with ep > 1 "
        "are priced as if it did"
    ]


# Context parallelism as engines run it for serving, at the versions `engines.engine_presets` names:
# llama.cpp has none; SGLang 0.5.6.post2's one is DeepSeek-V3.2's NSA prefill inside one tp=8 server
# (server_args.py --enable-nsa-prefill-context-parallel), not a cp axis of GPUs; vLLM 0.34's
# --prefill-context-parallel-size runs only where the attention backend sets supports_pcp, which only
# latent attention (MLA) does (v1/attention/backend.py MLAAttentionImpl; FlashAttentionImpl does not,
# and v1/attention/selector.py refuses the backend): the RFC vllm#25749 design `engines.forward` prices.
CONTEXT_REFUSED = {
    "llama.cpp": "llama.cpp runs no context parallelism (its GPUs split layers, -sm layer, or rows, -sm row)",
    "sglang": "SGLang 0.5.6.post2 runs no context parallelism over extra GPUs (its one, "
    "--enable-nsa-prefill-context-parallel, is DeepSeek-V3.2's prefill inside its tp=8 GPUs)",
}


def context_run(specs: list[Any], framework: str, latent_attention: bool) -> None:
    """One line refusing the first --plan with cp > 1 under an engine that does not run it for
    serving (`CONTEXT_REFUSED`; vLLM where the model has no latent attention)."""
    with_cp = [s for s in specs if dict(s.options).get("cp", 1) > 1]
    if not with_cp:
        return
    why = CONTEXT_REFUSED.get(framework)
    if framework == "vllm" and not latent_attention:
        why = (
            "vLLM 0.34 runs prefill context parallelism (--prefill-context-parallel-size) only with latent "
            "attention (MLA) backends, which this model has not"
        )
    if why:
        raise SpecError(f"--plan {with_cp[0].label!r}: {why}; give cp=1 (tp, pp and replicas instead)")


@dataclass(frozen=True)
class Layouts:
    """The layouts `serve` compares without --plan (`layouts`): `specs` in table order; `twins`,
    each layout with the experts whole inside its replica (ep = tp) and the same layout with them
    split by TP (ep 1): the same weights and KV cache per GPU, so one that cannot hold a sequence
    where its twin cannot is left out after pricing (`requests.serve_result.priced`); `left_out`,
    the expert layouts not compared and why (one line each kind)."""

    specs: list[Any]
    twins: dict[str, str] = field(default_factory=dict)
    left_out: tuple[str, ...] = ()
    # which expert layouts were compared beside ep 1 ("": none, a dense model or an engine without them)
    experts: str = ""


def layouts(cluster: Any, model: Any = None, framework: str = "tensorrt-llm") -> Layouts:
    """Without --plan: every layout worth comparing on this machine -- TP inside a server (1, 2, 4,
    ... its GPUs), PP over what is left (tp x pp dividing the GPUs), replicas filling the rest
    (`analyses.serving_targets.plans`, the target search's layouts). For a mixture of experts under
    an engine that runs expert parallelism (`EXPERT_PARALLEL_ENGINES`), beside each (each expert
    split over its tp ranks, ep 1): the experts whole inside the replica (ep = tp, tp > 1) and,
    without a pipeline, data-parallel attention with the experts whole over every GPU (ep = the
    GPUs, etp 1; vLLM `-dp N/tp --enable-expert-parallel`), where the experts divide over the ranks
    and the engine runs the model so (SGLang's Mixtral / Grok files have no data-parallel
    attention: `engines.dp_dense.refuse_unsupported`). A pipeline under data-parallel attention is
    not compared: vLLM runs none (`emit.vllm`), and the ranks' lockstep is priced for one stage
    (`engines.inflight_lockstep`)."""
    from shardwise.analyses.serving_targets import plans
    from shardwise.loaders import parse_plan_spec

    gpus, per_node = int(cluster.num_gpus), int(cluster.gpus_per_node)
    found = plans(gpus, per_node)
    base = [f"tp={tp}" + (f",pp={pp}" if pp > 1 else "") for tp, pp in found]
    if model is None or not model.is_moe or framework not in EXPERT_PARALLEL_ENGINES:
        return Layouts([parse_plan_spec(t) for t in base])
    from shardwise.engines.dp_dense import no_dp_attention_block

    experts = int(model.experts)
    no_dp = framework == "sglang" and no_dp_attention_block(model)
    labels: list[str] = []
    twins: dict[str, str] = {}
    left: list[str] = []
    dp_attention = False
    for (tp, pp), text in zip(found, base, strict=True):
        labels.append(text)
        if tp > 1 and experts % tp == 0:  # experts whole inside the replica
            twins[f"{text},ep={tp}"] = text
            labels.append(f"{text},ep={tp}")
        if pp == 1 and gpus > tp and experts % gpus == 0 and not no_dp:  # data-parallel attention
            labels.append(f"tp={tp},ep={gpus}")
            dp_attention = True
    if experts % gpus and gpus > 1:
        left.append(
            f"data-parallel attention: {model.name}'s {experts} experts do not divide over {gpus} GPUs "
            "(each rank holds whole experts)"
        )
    elif no_dp:
        left.append(
            f"data-parallel attention: SGLang runs {model.name} (architecture {model.architecture}) without it "
            "(models/mixtral.py, grok.py)"
        )
    if any(tp > 1 and experts % tp for tp, _ in found):
        left.append(f"ep = tp where tp does not divide {model.name}'s {experts} experts")
    said = ""
    if twins:
        said = "the experts split over the tp ranks (ep 1), whole inside each replica (ep = tp)"
    if dp_attention:
        said = (said or "the experts split over the tp ranks (ep 1)") + (
            f"{' and,' if twins else ', and'} without a pipeline, whole over all GPUs with data-parallel attention "
            f"(ep = {gpus})"
        )
    return Layouts([parse_plan_spec(t) for t in labels], twins, tuple(left), said)


def checked_specs(plans: Any, cluster: Any, model: Any, framework: str, notes: list[str]) -> tuple[list[Any], Layouts]:
    """The --plan specs (each 'all' resolved) or, none given, every layout of the machine, checked
    for what `framework` serves (experts, context parallelism, KV-head replicas, the keys a serving
    plan takes), with the layouts they came from; notes appended to `notes`."""
    from shardwise.requests.serve_notes import serving_specs

    given = Layouts(resolved_all(serving_specs(plans), int(cluster.num_gpus)))
    found = given if plans else layouts(cluster, model, framework)
    specs = found.specs
    if not plans and model.is_moe and framework not in EXPERT_PARALLEL_ENGINES and len(specs) > 1:
        notes.append(
            f"{model.name} is a mixture of experts: the layouts compared split every expert over its tp "
            f"ranks (ep 1), as {framework} runs it (expert-parallel layouts are compared under "
            "--framework tensorrt-llm, vllm or sglang)"
        )
    notes += experts_run(specs, framework) if plans else []
    context_run(specs, framework, bool(model.kv_lora_rank))  # engines without cp: refused
    allowed = {"first_stage_layers", "last_stage_layers", "cp", "ep", "etp"}
    for spec in specs:
        extra = [k for k, _ in spec.options if k not in allowed]
        if extra:
            raise SpecError(
                f"--plan {spec.label!r}: serving plans take only tp, pp, cp, first, last, ep and etp "
                f"(not {', '.join(extra)}); replicas fill the GPUs"
            )
    if len({s.label for s in specs}) != len(specs):
        raise SpecError("each --plan must be different")

    specs = kv_replicas_run(specs, framework, int(model.kv_heads), bool(plans))
    return specs, found
