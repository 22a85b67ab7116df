"""A training plan of `crossover` (or `sweep`, `sensitivity`) as `predict` asks for it (review 51
#5, #7): crossover takes a plan as written (sequence parallelism off, ZeRO-0 unless its `sp=` or
`zero=` key says otherwise; `analyses.evaluate.layout_as_written`), where predict takes the
stack's defaults (Megatron-Core: SP on wherever tp > 1, the distributed optimizer), so
`predict --tp 8` is not crossover's `tp=8` unless told `--no-sequence-parallel --zero 0`. And
`sp=on` brings the stack's Transformer Engine TP overlap with it (`Plan.tp_comm_overlap`, priced
only with SP: `engines.costs`), which predict turns on the same way: the header says so
(`requests.experiment.overlap_words`).

`predict_request`: the `PredictRequest` of one plan on one link at one value of the swept
variable (batch, layers, hidden, seq_len or gpus), priced as crossover prices it.
"""

from __future__ import annotations

from typing import Any

# the swept variables a predict flag sets (the others move a link's or a GPU's figures)
PREDICT_VARIABLES = {"batch": "global_batch", "layers": "layers", "hidden": "hidden", "seq_len": "seq_len"}

# a plan's keys (`specs.experiment.PlanSpec.plan_kwargs`) under predict's field names
_PLAN_KEYS = {
    "vpp": "vpp",
    "schedule": "schedule",
    "micro_batch": "micro_batch",
    "zero_stage": "zero",
    "shard_group": "shard_group",
    "first_stage_layers": "first_stage_layers",
    "last_stage_layers": "last_stage_layers",
    "cp": "cp",
    "ep": "ep",
    "etp": "etp",
    "recompute": "recompute",
    "sequence_parallel": "sequence_parallel",
}


def predict_request(request: Any, exp: Any, plan: Any, link_label: str, variable: str, value: float) -> Any:
    """The `PredictRequest` that prices `plan` on the link labelled `link_label` at `value` of
    `variable` as crossover does; None where predict has no flag for the variable or the
    experiment is not a training step of the physical model. `request`: the `ExperimentRequest`."""
    from shardwise.requests.experiment import stack_layout
    from shardwise.requests.training import PredictRequest, TrainingRequest

    if exp.workload != "train" or exp.cost_model == "textbook" or variable not in (*PREDICT_VARIABLES, "gpus"):
        return None
    given = request.given()
    fields = {
        k: given[k]
        for k in (
            *("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "family", "seq_len"),
            *("gpu", "system", "num_gpus", "nodes", "gpus_per_node", "calibration"),
            *("inter_link", "nics_per_node", "link_latency", "micro_batch", "recompute", "flash_attention"),
            "precision",
        )
        if k in given
    }
    fields["model"] = request.model
    if not request.gpu and not request.system:  # the brief's A100 (`requests.experiment.BRIEF_GPU`)
        fields["gpu"] = exp.gpu.name
    if not request.nodes:
        fields["num_gpus"] = exp.gpus
    fields["framework"] = request.framework
    link = _link_fields(request, exp, link_label)
    if link is None:
        return None
    fields.update(link)
    gpus = exp.gpus
    if variable == "gpus":
        gpus = int(value)
        fields.pop("nodes", None)
        fields["num_gpus"] = gpus
    else:
        fields[PREDICT_VARIABLES[variable]] = int(value)
    fields.setdefault("global_batch", exp.batch)
    if gpus > exp.gpus_per_node and not request.system and not request.inter_link:  # the brief's network
        from shardwise.requests.experiment import BRIEF_INTER_LINK

        fields.update(inter_link=BRIEF_INTER_LINK, nics_per_node=request.nics_per_node or exp.gpus_per_node)
    tp, pp = (gpus if d == "all" else int(d) for d in (plan.tp, plan.pp))
    fields.update(tp=tp, pp=pp)
    own = plan.plan_kwargs()
    fields.update({_PLAN_KEYS[k]: v for k, v in own.items() if k in _PLAN_KEYS})
    if pp > 1:  # --first/--last-stage-layers apply to pp > 1 plans (`analyses.evaluate`)
        for k in ("first_stage_layers", "last_stage_layers"):
            if getattr(request, k) is not None and k not in own:
                fields[k] = getattr(request, k)
    stack = stack_layout(request.framework)
    if tp > 1 and "sequence_parallel" not in own and stack["sequence_parallel"]:
        fields["sequence_parallel"] = False  # as written: SP off
    if "zero_stage" not in own and stack["zero_stage"] != 0:
        fields["zero"] = 0  # as written: ZeRO-0
    return PredictRequest(TrainingRequest(**{k: _text(k, v) for k, v in fields.items()}))


def _text(name: str, value: Any) -> Any:
    """A plan key's value as predict's field takes it (a recompute mode as its name)."""
    if name == "recompute" and not isinstance(value, str):
        return str(getattr(value, "label", getattr(value, "value", value)))
    if name == "schedule" and not isinstance(value, str):
        return str(getattr(value, "value", value))
    return value


def _link_fields(request: Any, exp: Any, label: str) -> dict[str, Any] | None:
    """The --intra-link (and --link-latency) of the link labelled `label`, its `LABEL=` left off;
    {} for a system's own link, which --system gives; None where predict has no flag for a key of
    it (`efficiency=`)."""
    i = [lk.label for lk in exp.links].index(label)
    if not request.intra_links:
        return {} if request.system else {"intra_link": exp.links[i].link.name}
    head, *keys = request.intra_links[i].replace(" ", "").split(",")
    out: dict[str, Any] = {"intra_link": head.partition("=")[2] if "=" in head else head}
    for key in keys:
        name, _, value = key.partition("=")
        if name != "latency":
            return None
        out["link_latency"] = value
    return out
