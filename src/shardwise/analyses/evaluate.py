"""Evaluating an `Experiment`: one plan on one link over a grid of variable values, in one
vectorized call of the cost model (or of the brief's formulas), with the validity rules that
make a point NaN instead of an error.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from shardwise import textbook
from shardwise.analyses.experiment import VARIABLES
from shardwise.errors import SpecError
from shardwise.physics.custom_allreduce import is_nvlink_class
from shardwise.specs import Cluster, Link, Plan, Scenario
from shardwise.specs.experiment import Experiment, PlanSpec
from shardwise.specs.hardware import Gpu
from shardwise.specs.stages import stage_split


def _cluster(exp: Experiment, link: Link, gpus: Any) -> Cluster:
    g = np.asarray(gpus)
    per_node = np.minimum(exp.gpus_per_node, g)
    nodes = np.maximum(1, g // per_node)
    inter = exp.inter_node_link if np.any(nodes > 1) else None
    if inter is None and np.any(nodes > 1):
        raise SpecError("more GPUs than one node needs an inter-node link (--inter-link)")
    pcie = None if is_nvlink_class(link) else exp.pcie  # the system's switches and sockets, for a PCIe link
    cluster = Cluster(
        "experiment", exp.gpu, per_node, nodes, link, inter, host_cpu=exp.host_cpu, nvls=exp.nvls, pcie=pcie
    )
    if not exp.calibration:
        return cluster
    from shardwise.calibration.parameters import apply

    return apply(cluster, dict(exp.calibration))


def times_s(exp: Experiment, plan: PlanSpec, link: Link, variable: str, values: Any) -> tuple[np.ndarray, np.ndarray]:
    """(seconds, fits in memory) of `plan` on `link` at each value of `variable` (NaN = invalid)."""
    return evaluate(exp, plan, link, {variable: np.asarray(values, dtype=float)})


def evaluate(
    exp: Experiment, plan: PlanSpec, link: Link, grid: Mapping[str, np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """(seconds, fits in memory) over a grid: variable name -> values, mutually broadcastable
    (`np.meshgrid(..., sparse=True)` keeps a grid cheap: each input keeps its own shape and
    only the results take the full shape). NaN where the plan is invalid."""
    t, fits, _ = evaluate_parts(exp, plan, link, grid, parts=False)
    return t, fits


def evaluate_parts(
    exp: Experiment,
    plan: PlanSpec,
    link: Link,
    grid: Mapping[str, np.ndarray],
    parts: bool = True,
    embedding_apart: bool = False,
) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """`evaluate`, and where the seconds go (term -> grid-shaped seconds, NaN where invalid; empty
    for the textbook cost model, or when `parts` is False). With `embedding_apart`, a dense model's
    `dp_comm` at the points where it runs one replica (dp = cp = 1) is the tied embedding's sync:
    it goes under `embedding_sync` (0 elsewhere, where dp_comm holds it), as predict's JSON
    (`export.seconds_parts`)."""
    shape = np.broadcast_shapes(*(np.shape(v) for v in grid.values()))
    if exp.cost_model == "textbook":
        _check_names(grid)
        return _textbook_times(exp, plan, link, grid, shape), np.ones(shape, dtype=bool), {}
    scn, valid = _scenario(exp, plan, link, grid)
    if scn is None:
        return np.full(shape, np.nan), np.zeros(shape, dtype=bool), {}
    t, fits, terms = _measure(exp, scn, parts)
    seconds = np.where(valid, np.broadcast_to(t, shape), np.nan)
    split = {k: np.where(valid, np.broadcast_to(v, shape), np.nan) for k, v in terms.items()} if parts else {}
    if embedding_apart and not scn.model.is_moe:
        from shardwise.engines.result import embedding_apart as split_sync

        split = split_sync(split, np.broadcast_to(np.asarray(scn.plan.dp) * np.asarray(scn.plan.cp) == 1, shape))
    return seconds, np.asarray(np.broadcast_to(fits, shape) & valid), split


def breakdown_at(exp: Experiment, plan: PlanSpec, link: Link, variable: str, value: float) -> dict[str, float] | None:
    """Where the time of one plan goes at one value of the variable (None if invalid there)."""
    if exp.cost_model == "textbook":
        return None
    scn, valid = _scenario(exp, plan, link, {variable: np.array([value])})
    if scn is None or not valid.all():
        return None
    _, _, parts = _measure(exp, scn)
    return {k: float(np.asarray(v).ravel()[0]) for k, v in parts.items()}


def why_invalid(exp: Experiment, plan: PlanSpec, link: Link, grid: Mapping[str, np.ndarray]) -> str | None:
    """The first rule that the plan breaks at the first point of the grid (None if valid there)."""
    first = {k: np.asarray(v).ravel()[:1] for k, v in grid.items()}
    x = _inputs(exp, plan, link, first)
    kwargs = _plan_kwargs(exp, plan, x)
    for rule, ok in _rules(exp, x, kwargs):
        if not np.all(ok):
            return rule
    return None


def _plan_kwargs(exp: Experiment, plan: PlanSpec, x: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """Plan keyword arguments of the experiment and the plan; serving spreads the experts over the
    TP GPUs, so etp = tp / ep there unless given (`rules.serving_expert_rule`)."""
    kwargs = {"micro_batch": exp.micro_batch, **exp.plan_defaults, **plan.plan_kwargs()}
    for name in {"first_stage_layers", "last_stage_layers"} & set(exp.plan_defaults) - set(plan.plan_kwargs()):
        kwargs[name] = np.where(np.asarray(x["pp"]) == 1, 0, kwargs[name])  # pp > 1 plans only (review 51 #2)
    whole = recomputed_whole(exp, plan, x)
    if not (np.ndim(whole) == 0 and whole == 0):
        kwargs["recompute_layers"] = whole
    if exp.workload in ("decode", "prefill") and kwargs.get("ep", 1) > 1 and not kwargs.get("etp"):
        from shardwise.specs.rules import serving_expert_tp

        kwargs["etp"] = serving_expert_tp(np.asarray(x["tp"]).astype(int), kwargs["ep"], 0)
    return kwargs


def recomputed_whole(exp: Experiment, plan: PlanSpec, x: Mapping[str, Any]) -> Any:
    """The layers of each model chunk a training plan recomputes whole by the stack's default
    (`Experiment.recompute_every`, `specs.stages.every_nth_whole`): 0 where the plan's `recompute=`
    key sets the mode, for a mixture of experts, and outside training."""
    from shardwise.specs.stages import every_nth_whole

    if exp.workload != "train" or exp.recompute_every == 0 or "recompute" in plan.plan_kwargs() or exp.model.is_moe:
        return 0
    vpp = plan.plan_kwargs().get("vpp", exp.plan_defaults.get("vpp", 1))
    return every_nth_whole(np.asarray(x["layers"]), np.asarray(x["pp"]), vpp, exp.recompute_every)


def recompute_label(exp: Experiment, plan: PlanSpec) -> str:
    """What a training plan of the experiment recomputes, as the CSVs of crossover and sweep name it:
    none, selective or full (the plan's `recompute=` key, else the stack's mode), or
    every-N-th-layer (the stack's default of every N-th layer whole, `recomputed_whole`); "" outside training."""
    if exp.workload != "train" or exp.cost_model == "textbook":
        return ""
    own = plan.plan_kwargs().get("recompute")
    if own is not None:
        return str(getattr(own, "label", own))
    if exp.recompute_every and not exp.model.is_moe:
        return f"every-{exp.recompute_every}-layer" if exp.recompute_every != 2 else "every-second-layer"
    mode = exp.plan_defaults.get("recompute", "none")
    return str(getattr(mode, "label", mode))


def layout_as_written(exp: Experiment, plan: PlanSpec) -> dict[str, Any]:
    """The ZeRO stage and sequence parallelism a training plan of crossover, sweep or sensitivity is
    priced with: as its `zero=` and `sp=` keys say, else ZeRO-0 and SP off (the plan as written, not
    the stack's defaults that predict and plan take, review 45 #2); {} outside training."""
    if exp.workload != "train" or exp.cost_model == "textbook":
        return {}
    own = {**exp.plan_defaults, **plan.plan_kwargs()}
    return {"zero_stage": int(own.get("zero_stage", 0)), "sequence_parallel": bool(own.get("sequence_parallel", False))}


def _check_names(grid: Mapping[str, np.ndarray]) -> None:
    for name in grid:
        if name not in VARIABLES:
            raise SpecError(f"unknown variable {name!r}; choose one of {', '.join(VARIABLES)}")


def _scenario(exp: Experiment, plan: PlanSpec, link: Link, grid: Mapping[str, np.ndarray]) -> tuple[Any, np.ndarray]:
    """(Scenario with array fields, validity mask); invalid points run as the first valid one."""
    _check_names(grid)
    shape = np.broadcast_shapes(*(np.shape(v) for v in grid.values()))
    x = _inputs(exp, plan, link, grid)
    kwargs = _plan_kwargs(exp, plan, x)
    oks = [np.asarray(ok) for _, ok in _rules(exp, x, kwargs)]
    if all(ok.all() for ok in oks):  # each rule checked in its own (broadcast) shape
        valid = np.broadcast_to(True, shape)
    else:
        valid = np.ones(shape, dtype=bool)
        for ok in oks:
            valid = valid & ok
    if not valid.any():  # e.g. layers not divisible by pp anywhere in this block
        return None, valid
    if not valid.all():
        first = np.unravel_index(int(np.flatnonzero(valid)[0]), shape)
        x = {k: np.where(valid, np.broadcast_to(a, shape), np.broadcast_to(a, shape)[first]) for k, a in x.items()}
    ints = {k: np.asarray(x[k]).astype(int) for k in ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "seq_len")}
    model = exp.model.with_(**ints)
    link = link.with_(bandwidth_bytes_per_s=x["bandwidth"], latency_s=x["latency"])
    precision = kwargs.get("precision", "bf16")
    # the `peak_flops` variable is the peak of the run's precision (`Gpu.peak_field`); the others stay
    gpu = exp.gpu.with_(
        **{Gpu.peak_field(precision): x["peak_flops"], "memory_bandwidth_bytes_per_s": x["hbm_bandwidth"]}
    )
    cluster = _cluster(exp.with_(gpu=gpu), link, np.asarray(x["gpus"]).astype(int))
    as_int = {k: np.asarray(x[k]).astype(int) for k in ("tp", "pp", "dp", "batch")}
    try:
        plan_ = Plan(tp=as_int["tp"], pp=as_int["pp"], dp=as_int["dp"], global_batch=as_int["batch"], **kwargs)
    except SpecError as exc:  # name the --plan it came from ("plan: ..." alone left the user to guess which)
        raise SpecError(f"--plan {plan.label!r}: {str(exc).removeprefix('plan: ')}") from None
    return Scenario(model, cluster, plan_), valid


scenario_of = _scenario  # (Scenario with array fields, validity mask) of a plan on a link over a grid
SERVING_OUTPUT_LEN = 128  # new tokens per request for --workload decode (context: prompt + half of them)


def _measure(exp: Experiment, scn: Any, parts: bool = True) -> tuple[Any, Any, dict[str, Any]]:
    """(seconds, fits in memory, where the seconds go: empty unless `parts`) of the experiment's workload:
    train: a training step; forward: one forward pass of the batch; prefill: time to first token
    of a batch of prompts of the sequence length; decode: time per output token at that batch."""
    if exp.workload in ("decode", "prefill"):
        from shardwise.engines.serving import estimate_serving
        from shardwise.specs.serving import ServingWorkload

        precision = exp.plan_defaults.get("precision", "bf16")
        weights = exp.serving_weights or precision  # a quantised checkpoint's own storage, as serve
        wl = ServingWorkload(
            scn.model.seq_len, SERVING_OUTPUT_LEN, scn.plan.global_batch, weights, precision, custom_all_reduce="none"
        )
        est = estimate_serving(scn, wl)
        if exp.workload == "decode":
            return est.tpot_s, est.fits_in_memory, est.decode_s
        return est.ttft_s, est.fits_in_memory, est.prefill_s
    if exp.workload == "forward":
        from shardwise.engines.forward import estimate_forward

        est = estimate_forward(scn)
        return est.latency_s, est.weights_bytes + est.kv_cache_bytes <= scn.cluster.gpu.memory_bytes, est.as_dict()
    from shardwise.engines.training import estimate_training_step

    est = estimate_training_step(scn)
    return est.step_time_s, est.fits_in_memory, est.breakdown.as_dict() if parts else {}


HEAD_SEARCH = 64  # multiples of tp_max tried on each side of the head count at the model's head width


def heads_for_hidden(hidden: Any, tp_max: Any, head_width: float = 128, group: int = 1) -> Any:
    """Heads of a model whose width is varied: one head per `head_width` of width (the model's
    hidden / heads: its head dim, held) while TP can still split the heads and the KV heads (a
    multiple of tp_max x `group`, the query heads per KV head). One rule for every plan, so all
    compare the same model. Where that count does not divide the width or TP cannot split it
    (hidden 2560 at tp 8: 20 heads of 128), the multiple of tp_max x group nearest it that divides
    the width (16 heads of 160), so every width tp_max divides is a model every plan can run;
    where none does, the multiple of `group` nearest it that divides the width (a valid model that
    tp_max's plans refuse); where the first rule works it stands."""
    h = np.asarray(hidden)
    step = int(np.max(tp_max)) * int(group)
    heads = np.maximum(np.floor(h / head_width + 1e-9), step).astype(h.dtype if h.dtype.kind == "f" else int)
    bad = (h % heads != 0) | (heads % step != 0)
    if not np.any(bad):
        return heads
    widths, back = np.unique(h[bad] if h.ndim else h.reshape(1), return_inverse=True)
    # heads / step tried for each width (a row): nearest the head-width count first, the lower on a tie
    offsets = np.array([0, *(s * k for k in range(1, HEAD_SEARCH + 1) for s in (-1, 1))])
    m = np.maximum(np.round(widths / (head_width * step)), 1)[:, None] + offsets
    fits = (m >= 1) & (widths[:, None] % np.maximum(m * step, 1) == 0)
    first = m[np.arange(len(widths)), np.argmax(fits, axis=1)] * step  # the first that fits, where one does
    # none that tp_max splits (hidden 5000 at tp 8, a Llama's 4 query heads per KV head): a model that
    # exists all the same, the multiple of `group` nearest the head-width count that divides the width
    # (40 heads of 125, 10 KV heads), which tp_max's plans then refuse in their own line (review 49 #4)
    g = np.maximum(np.round(widths / (head_width * group)), 1)[:, None] + offsets
    fits_g = (g >= 1) & (widths[:, None] % np.maximum(g * group, 1) == 0)
    valid = np.where(fits_g.any(axis=1), g[np.arange(len(widths)), np.argmax(fits_g, axis=1)] * group, widths)
    chosen = np.where(fits.any(axis=1), first, valid).astype(heads.dtype)
    out = heads.copy()
    if h.ndim:
        out[bad] = chosen[back]
        return out
    return chosen[0]


def shape_for_hidden(model: Any, hidden: Any, tp_max: Any) -> dict[str, Any]:
    """hidden, heads, kv_heads and ffn_hidden of `model` made `hidden` wide, keeping its own ratios
    (review 47 #1: every width was an MHA model with a 4h MLP): its head dim (hidden / heads, or the
    head_dim it sets apart: heads grow with the width, `heads_for_hidden`), its query heads per KV
    head, and its ffn_hidden / hidden (rounded to the model's multiple of 128 where its own is one).
    At the model's own width, the model as it is. Expert widths set apart, MLA ranks, the vocabulary
    and a hybrid's Mamba heads stay as the model has them."""
    h = np.asarray(hidden)
    group = int(model.heads) // int(model.kv_heads)
    heads = heads_for_hidden(h, tp_max, float(model.hidden) / float(model.heads), group)
    q = math.gcd(int(model.ffn_hidden), 128)
    ffn = np.maximum(np.round(model.ffn_hidden * h / model.hidden / q), 1) * q
    own = h == model.hidden
    return {
        "hidden": h,
        "heads": np.where(own, model.heads, heads),
        "kv_heads": np.where(own, model.kv_heads, heads // group),
        "ffn_hidden": np.where(own, model.ffn_hidden, ffn),
    }


def max_tp(exp: Experiment, gpus: Any) -> Any:
    return max(np.max(gpus) if p.tp == "all" else p.tp for p in exp.plans) if exp.plans else 1


def _inputs(exp: Experiment, plan: PlanSpec, link: Link, grid: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """Every input that a variable can move (arrays where the grid moves it, scalars elsewhere)."""
    m = exp.model
    x: dict[str, Any] = {
        "layers": m.layers,
        "hidden": m.hidden,
        "heads": m.heads,
        "kv_heads": m.kv_heads,
        "ffn_hidden": m.ffn_hidden,
        "seq_len": m.seq_len,
        "batch": exp.batch,
        "gpus": exp.gpus,
        "bandwidth": link.bandwidth_bytes_per_s,
        "latency": link.latency_s,
        "peak_flops": exp.gpu.peak_flops_per_s(exp.plan_defaults.get("precision") or exp.gpu.sixteen_bit),
        "hbm_bandwidth": exp.gpu.memory_bandwidth_bytes_per_s,
    }
    for name, values in grid.items():
        if name == "hidden":
            x.update(shape_for_hidden(m, values, max_tp(exp, grid.get("gpus", exp.gpus))))
        else:
            x[name] = values
    x["tp"], x["pp"], x["dp"] = plan.degrees(x["gpus"])
    return {k: np.asarray(v, dtype=float) for k, v in x.items()}


def _rules(exp: Experiment, x: dict[str, np.ndarray], kwargs: dict[str, Any]) -> list[tuple[str, np.ndarray]]:
    """The validity rules of the specs (`specs.rules`), each with where it holds."""
    from shardwise.specs import Recompute, rules

    tp, pp, dp, mb = x["tp"], x["pp"], x["dp"], kwargs["micro_batch"]
    vpp = kwargs.get("vpp", 1)
    per_node = np.minimum(exp.gpus_per_node, x["gpus"])
    split = stage_split(x["layers"], pp, kwargs.get("first_stage_layers", 0), kwargs.get("last_stage_layers", 0))
    interleaved = kwargs.get("schedule") == "interleaved"
    whole_batches, interleave_multiple = rules.batch_rules(x["batch"], np.maximum(dp, 1), mb, pp, interleaved)
    cp = kwargs.get("cp", 1)
    checks = [
        rules.gpu_rules(x["gpus"], tp, pp, dp, cp),
        rules.stage_rule(split, x["layers"], pp, vpp),
        *rules.tp_rules(tp, x["heads"], x["kv_heads"], x["ffn_hidden"], exp.workload in ("decode", "prefill")),
        *rules.model_rules(x["hidden"], x["heads"], x["kv_heads"], head_dim_given=_head_dim_apart(exp.model)),
        whole_batches,
        *rules.node_rules(tp, per_node, x["gpus"]),
    ]
    if interleaved:
        checks.append(interleave_multiple)
    serving = exp.workload in ("decode", "prefill")  # prompts split over cp ranks need no 2 cp chunks
    sequence = rules.sequence_rules(x["seq_len"], tp, cp, kwargs.get("sequence_parallel", False), True)
    checks += sequence[2:] if cp <= 1 or serving else sequence[1:]
    m = exp.model
    etp = kwargs.get("etp") or tp
    checks += rules.moe_rules(
        m.experts, m.expert_ffn_hidden, tp, cp, np.maximum(dp, 1), kwargs.get("ep", 1), etp, m.name
    )
    if exp.workload in ("decode", "prefill"):
        checks.append(rules.serving_expert_rule(tp, kwargs.get("ep", 1), etp))
    if exp.workload == "train":
        checks += rules.moe_training_rules(
            m.experts,
            tp,
            kwargs.get("sequence_parallel", False),
            kwargs.get("ep", 1),
            pp,
            interleaved,
            kwargs.get("recompute") in ("full", Recompute.FULL),
            kwargs.get("moe_overlap", False),
            kwargs.get("lora_rank", 0),
            dispatcher=kwargs.get("moe_dispatcher", "alltoall"),
        )
    return [(r.rule, r.ok) for r in checks]


def _head_dim_apart(model: Any) -> bool:
    """Whether the model sets its head dim apart from hidden / heads (Qwen3, GPT-OSS): then the
    width need not divide by the heads (`rules.model_rules`)."""
    return bool(model.head_dim != model.hidden // model.heads)


def _textbook_times(
    exp: Experiment, plan: PlanSpec, link: Link, grid: Mapping[str, np.ndarray], shape: tuple[int, ...]
) -> np.ndarray:
    """The brief's formulas (see `shardwise.textbook`) over the same variables."""
    if not plan.is_pure:
        raise SpecError(f"--cost-model textbook prices pure TP or pure PP plans only, not {plan.label!r}")
    allowed = ("batch", "bandwidth", "layers", "hidden", "gpus", "peak_flops")
    for name in grid:
        if name not in allowed:
            raise SpecError(f"--cost-model textbook cannot vary {name}; choose from {', '.join(allowed)}")
    layers = grid.get("layers", exp.model.layers)
    hidden = grid.get("hidden", exp.model.hidden)
    batch = grid.get("batch", exp.batch)
    gpus = grid.get("gpus", exp.gpus)
    bw = grid.get("bandwidth", link.bandwidth_bytes_per_s)
    flops = grid.get("peak_flops", exp.gpu.peak_flops_per_s_16bit)
    if plan.tp != 1:
        degree = gpus if plan.tp == "all" else plan.tp
        t = textbook.simulate_tp(layers, hidden, batch, degree, flops, bw)
    else:
        degree = gpus if plan.pp == "all" else plan.pp
        t = textbook.brief_pp(layers, degree, flops, bw, hidden, batch)
    return np.broadcast_to(np.asarray(t, dtype=float), shape).copy()
