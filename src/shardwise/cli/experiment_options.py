"""Flags shared by `crossover`, `sweep` and `sensitivity`, and the Experiment they build.

Defaults are the brief's experiment (Section 8 of the Russian article): its model (hidden 4096,
96 layers), 8 GPUs of 312 TFLOP/s (A100), TP=8 against PP=8, NVLink against PCIe. What the brief
leaves open is chosen and documented here: sequences of 2048 tokens, micro-batch 1 (so PP gets
as many micro-batches as the batch has sequences), a training step (forward + backward +
optimizer), bf16, FlashAttention, no recomputation.
"""

from __future__ import annotations

from typing import Any

import click

from shardwise.cli.options import LINK_NAME, NAME_OR_FILE, _stack, alias_option, non_empty
from shardwise.precisions import TRAINING_PRECISIONS

experiment_options = _stack(
    click.option(
        "--model",
        "model_name",
        metavar="NAME|FILE",
        default="gpt-96l-4096h",
        show_default=True,
        callback=non_empty(NAME_OR_FILE),
        help="Model preset or YAML file.",
    ),
    click.option("--layers", type=int, help="Override the model's layers."),
    click.option("--hidden", type=int, help="Override the hidden size (heads follow: head dim 128, unless --heads)."),
    click.option("--heads", type=int, help="Override the attention heads."),
    click.option("--kv-heads", type=int, help="Override the key/value heads (grouped-query attention)."),
    click.option("--ffn-hidden", type=int, help="Override the MLP hidden size."),
    click.option("--vocab", type=int, help="Override the vocabulary."),
    click.option("--family", type=click.Choice(["gpt", "llama"]), help="Architecture defaults of the model."),
    click.option("--seq-len", type=int, help="Override the sequence length (tokens)."),
    click.option(
        "--gpu",
        "gpu_name",
        metavar="NAME|FILE",
        default="a100-sxm4-80gb",
        show_default=True,
        callback=non_empty(NAME_OR_FILE),
        help="GPU preset (the brief's 312 TFLOP/s is an A100).",
    ),
    alias_option(
        "--num-gpus",
        "gpus",
        old=("--gpus",),
        type=int,
        default=8,
        show_default=True,
        help="GPUs (a plan's dp fills what tp x pp leave).",
    ),
    click.option("--gpus-per-node", type=int, default=8, show_default=True, help="GPUs per server."),
    click.option(
        "--calibration",
        metavar="FILE",
        callback=non_empty("give the YAML file `shardwise calibrate` wrote"),
        help="A calibration from `shardwise calibrate`: fitted GEMM efficiency, bandwidths and overheads, and "
        "the width of the 80% bands.",
    ),
    click.option(
        "--inter-link",
        default="ib-hdr",
        show_default=True,
        metavar="NAME|RATE",
        callback=non_empty(LINK_NAME),
        help="The network across servers (used when --num-gpus exceeds a server).",
    ),
    click.option(
        "--nics-per-node",
        type=float,
        help="Network cards per server, shared by its GPUs across servers [default: one per GPU].",
    ),
    alias_option(
        "--intra-link",
        "links",
        old=("--link",),
        multiple=True,
        metavar="[LABEL=]NAME|RATE[,latency=..]",
        callback=non_empty(LINK_NAME),
        help="A link inside the server to compare (repeat). [default: NVLink=nvlink3 PCIe=pcie4]",
    ),
    click.option(
        "--plan",
        "plans",
        multiple=True,
        metavar="tp=N[,pp=N,...]",
        help="A plan to compare (repeat): tp, pp (a number or 'all'), vpp, mb, schedule, recompute, sp, zero, "
        "ep, etp (mixture of experts). [default: tp=8 pp=8]",
    ),
    alias_option(
        "--global-batch",
        "batch",
        old=("--batch",),
        type=int,
        default=8,
        show_default=True,
        help="Sequences per step (or per forward pass / serving batch) when not varied.",
    ),
    click.option("--micro-batch", type=int, default=1, show_default=True, help="Sequences per micro-batch."),
    click.option(
        "--workload",
        type=click.Choice(["train", "forward", "prefill", "decode"]),
        default="train",
        show_default=True,
        help="train: a training step; forward: one forward pass of the batch; prefill: serving's time to first "
        "token for a batch of prompts; decode: serving's time per output token at that batch.",
    ),
    click.option(
        "--cost-model",
        type=click.Choice(["physical", "textbook"]),
        default="physical",
        show_default=True,
        help="physical: shardwise's model; textbook: the brief's Section 7 formulas, verbatim.",
    ),
    click.option("--recompute", type=click.Choice(["none", "selective", "full"]), default="none", show_default=True),
    click.option("--flash-attention/--no-flash-attention", default=True, show_default=True),
    click.option(
        "--precision",
        type=click.Choice(TRAINING_PRECISIONS),
        default="bf16",
        show_default=True,
        help="fp8: per-tensor scaling (Hopper and later); mxfp8: block scaling (Blackwell).",
    ),
    click.option(
        "--framework",
        default="megatron-core",
        show_default=True,
        metavar="NAME",
        callback=non_empty(NAME_OR_FILE),
        help="Software stack whose execution flags the plans use (see `shardwise presets frameworks`).",
    ),
    click.option(
        "--first-stage-layers", type=int, help="Layers on the first pipeline stage of every plan [default: even]."
    ),
    click.option(
        "--last-stage-layers", type=int, help="Layers on the last pipeline stage of every plan [default: even]."
    ),
    click.option(
        "--ignore-memory",
        is_flag=True,
        help="Compare times even where a plan does not fit in GPU memory (by default it cannot win).",
    ),
)


def _framework_defaults(o: dict[str, Any]) -> dict[str, Any]:
    """The framework's execution flags; its default ZeRO stage applies to plans that shard
    (a plan's zero= key overrides it)."""
    from shardwise.cli.options import execution_kwargs

    flags = execution_kwargs({"framework": o.get("framework")})
    flags.pop("zero_stage", None)
    return flags


def build_experiment(o: dict[str, Any]) -> Any:
    from shardwise import presets
    from shardwise.analyses.evaluate import heads_for_hidden
    from shardwise.analyses.experiment import BRIEF_LINKS, brief_experiment
    from shardwise.cli.options import stage_kwargs
    from shardwise.errors import SpecError
    from shardwise.loaders import parse_plan_spec
    from shardwise.presets import parse_link_spec
    from shardwise.specs._checks import MAX_WHOLE
    from shardwise.specs.experiment import Experiment

    base = brief_experiment()
    overrides = {
        k: o[k] for k in ("layers", "seq_len", "heads", "kv_heads", "ffn_hidden", "vocab") if o.get(k) is not None
    }
    if o.get("family"):
        overrides["family"] = o["family"]
    names = {"gpus": "num-gpus", "batch": "global-batch"}
    for flag in ("gpus", "gpus_per_node", "batch", "micro_batch", "hidden"):
        if o.get(flag) is not None and not 1 <= o[flag] <= MAX_WHOLE:
            raise SpecError(
                f"--{names.get(flag, flag.replace('_', '-'))}: {o[flag]} is not allowed; it must be a whole number "
                f"from 1 to {MAX_WHOLE:,}"
            )
    plans = tuple(parse_plan_spec(t) for t in o["plans"]) or base.plans
    if o.get("hidden") is not None:
        h = o["hidden"]
        tp_max = max(o["gpus"] if p.tp == "all" else p.tp for p in plans)
        heads = o.get("heads") or int(heads_for_hidden(h, tp_max))
        overrides = {"hidden": h, "heads": heads, "kv_heads": heads, "ffn_hidden": 4 * h, **overrides}
    model = presets.model(o["model_name"], **overrides)
    links = tuple(parse_link_spec(t) for t in o["links"])
    if not links:  # the textbook model takes the brief's figures literally
        links = BRIEF_LINKS if o["cost_model"] == "textbook" else base.links
    if o["cost_model"] == "textbook" and o["workload"] != "train":
        raise SpecError("--cost-model textbook prices only the brief's step (--workload train)")
    if o["workload"] in ("prefill", "decode") and o["micro_batch"] != 1:
        raise SpecError(
            f"--micro-batch does not apply to --workload {o['workload']}: serving splits the batch into "
            "min(batch, pp) micro-batches itself"
        )
    if len({p.label for p in plans}) != len(plans) or len({lk.label for lk in links}) != len(links):
        raise SpecError("each --plan and each --intra-link label must be different")
    calibration: dict[str, Any] = {}
    if o.get("calibration") and o["cost_model"] == "textbook":
        raise SpecError("--calibration fits the physical model; the textbook model takes the brief's figures as given")
    if o.get("calibration"):
        import click

        from shardwise.calibration import store

        cal = store.load(o["calibration"])
        calibration = {
            "calibration": tuple(sorted(cal.fit.values.items())),
            "prediction_log_sd": cal.fit.noise_log_sd,
            "calibration_fit": cal.fit,
            "spread_basis": f"calibration {cal.path} ({cal.runs} run(s))",
        }
        gpu_name = presets.gpu(o["gpu_name"]).name
        other = ""
        if cal.gpus and gpu_name not in cal.gpus:
            other = f"; it was fitted on {', '.join(cal.gpus)}, not {gpu_name}"
        click.echo(f"note: calibrated by {cal.path} ({cal.runs} run(s){other})", err=True)
    return Experiment(
        **calibration,
        model=model,
        gpu=presets.gpu(o["gpu_name"]),
        gpus=o["gpus"],
        gpus_per_node=o["gpus_per_node"],
        inter_node_link=_inter_link(o),
        links=links,
        plans=plans,
        batch=o["batch"],
        micro_batch=o["micro_batch"],
        workload=o["workload"],
        cost_model=o["cost_model"],
        plan_defaults={
            "recompute": o["recompute"],
            "flash_attention": o["flash_attention"],
            "precision": o["precision"],
            **_framework_defaults(o),
            **stage_kwargs(o),
        },
    )


def check_plans_valid(exp: Any, variable: str, values: Any, times: dict[str, Any] | None = None) -> None:
    """A plan that is invalid at every value is a user error: name the rule it breaks. `times`:
    each plan's seconds on the first link where already priced (else priced here)."""
    import numpy as np

    from shardwise.analyses.evaluate import times_s, why_invalid
    from shardwise.errors import SpecError

    for plan in exp.plans:
        t = times[plan.label] if times is not None else times_s(exp, plan, exp.links[0].link, variable, values)[0]
        if np.all(np.isnan(t)):
            rule = why_invalid(exp, plan, exp.links[0].link, {variable: np.asarray(values)[:1]})
            raise SpecError(
                f"--plan {plan.label}: invalid at every {variable} in the range ({rule or 'see the rules'})"
            )


def describe_experiment(exp: Any, variable: str | None = None) -> str:
    """One paragraph: what was held fixed (the swept variable is named as such)."""
    m = exp.model

    def fixed(name: str, text: str) -> str:
        return f"{name} swept" if variable == name else text

    links = ", ".join(
        f"{lk.label} = {lk.link.name} ("
        + fixed("bandwidth", f"{lk.link.bandwidth_bytes_per_s / 1e9:g} GB/s per direction")
        + ")"
        for lk in exp.links
    )
    if exp.cost_model == "textbook":
        links = ", ".join(f"{lk.label} {lk.link.bandwidth_bytes_per_s / 1e9:g} GB/s" for lk in exp.links)
        return (
            f"the brief's Section 7 formulas, verbatim: {fixed('layers', f'{m.layers} layers')}, "
            f"{fixed('hidden', f'hidden {m.hidden}')}, {exp.gpu.peak_flops_per_s_16bit / 1e12:g} TFLOP/s per GPU; "
            f"batch = rows of X (tokens); PP micro-batch min(batch, 4); links as the brief states them: {links}"
        )
    work = {
        "train": "training step (forward + backward + optimizer)",
        "forward": "forward pass latency",
        "prefill": "serving: time to first token of the batch",
        "decode": "serving: time per output token",
    }[exp.workload]
    shape = ", ".join(
        [
            fixed("layers", f"{m.layers} layers"),
            fixed("hidden", f"hidden {m.hidden}, {m.heads} heads"),
            fixed("seq_len", f"sequence {m.seq_len}"),
        ]
    )
    batching = "" if exp.workload in ("prefill", "decode") else f"; micro-batch {exp.micro_batch}"
    across = ""
    if (variable == "gpus" or exp.gpus > exp.gpus_per_node) and exp.inter_node_link is not None:
        nic = exp.inter_node_link
        rate = f"{nic.bandwidth_bytes_per_s / 1e9:.3g} GB/s per GPU"
        across = f"; across servers of {exp.gpus_per_node}: {nic.name} ({rate})"
    return (
        f"shardwise's physical model; {m.name}: {shape}; {fixed('gpus', f'{exp.gpus} x')} {exp.gpu.name}; "
        f"{work}{batching}; links: {links}{across}"
    )


def _inter_link(o: dict[str, Any]) -> Any:
    """Each GPU's share of the network across servers (--inter-link, --nics-per-node)."""
    from shardwise import loaders
    from shardwise.cli.options import _link

    nic = _link(o["inter_link"], "inter-link")
    nics = o.get("nics_per_node")
    if nics is None:
        return nic
    nics = loaders.check_nics_per_node(nics, "--nics-per-node")
    return loaders.per_gpu_nic(nic, nics, o["gpus_per_node"])
