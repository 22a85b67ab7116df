"""The cases a calibration prices, and the evaluator that prices them at many parameter sets.

A case is a training scenario (its step time), a serving measurement (`ServingCase`) or a
`shardwise measure` layer stack (`LayerStackCase`). Training runs are stacked into one
array-valued Scenario per (model kind, hardware, precision) group and serving cases per scenario
and workload kind, and the parameter sets into a second axis, so one evaluation of the cost model
prices every case at every set (`Evaluator.step_s`). The finite differences `fit` and
`intervals` take of ln t are here too (`log_step_and_gradient`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from shardwise.calibration.parameters import BY_NAME, apply
from shardwise.errors import SpecError
from shardwise.specs import Model, Plan, Scenario

_STEP = 0.01  # finite-difference step, in units of each parameter's prior sd

_MODEL_NUMBERS = ("layers", "hidden", "heads", "vocab", "seq_len", "kv_heads", "ffn_hidden", "head_dim")
# everything else about a model (gated MLP, norms, experts, latent attention, windows, a hybrid's
# pattern and Mamba-2 sizes, ...) puts runs in separate stacks: a stacked Scenario takes its first
# run's model with only the numbers above replaced (a dense run stacked behind a mixture of experts
# was priced with its experts)
# (the rotary bases and the MLP's activation, `Model.rope_theta`, `rope_local_theta`, `activation`,
# price nothing: runs that differ in them alone stack together)
_PRICED_NOTHING = ("name", "notes", "rope_theta", "rope_local_theta", "activation")
_MODEL_KIND = tuple(f.name for f in fields(Model) if f.name not in (*_MODEL_NUMBERS, *_PRICED_NOTHING))
# defaulted from a number above (ffn_hidden, head_dim) and read only by experts or latent attention
_UNUSED_UNLESS = {"expert_ffn_hidden": "experts", "v_head_dim": "kv_lora_rank"}


def _model_kind(m: Model) -> tuple[Any, ...]:
    return tuple(
        None if f in _UNUSED_UNLESS and not getattr(m, _UNUSED_UNLESS[f]) else getattr(m, f) for f in _MODEL_KIND
    )


def _group_key(scn: Scenario) -> tuple[Any, ...]:
    """Runs that can share one array-valued Scenario: the same model kind (numbers may differ),
    hardware and precision."""
    c, p, m = scn.cluster, scn.plan, scn.model
    kind = _model_kind(m)
    return (
        kind, c.gpu, c.intra_node_link, c.inter_node_link, c.gpus_per_node, p.precision, p.stage_layers,
        p.cp_comm, p.moe_dispatcher, p.attention_kernel, p.selective_policy, p.fp8_recipe,
        p.recompute_modules, p.cuda_graph_scope, p.lora_targets, p.loss_kernel,
        p.optimizer_state, p.memory_stack, p.zero3_buckets, p.fsdp2_grad_sync,
    )  # fmt: skip


_PLAN_FIELDS = [
    f.name
    for f in fields(Plan)
    # strings: in the key
    if f.name
    not in (
        "precision",
        "stage_layers",
        "framework",
        "memory_stack",
        "moe_dispatcher",
        "cp_comm",
        "attention_kernel",
        "selective_policy",
        "fp8_recipe",
        "recompute_modules",
        "cuda_graph_scope",
        "lora_targets",
        "loss_kernel",
        "optimizer_state",
        "zero3_buckets",
        "fsdp2_grad_sync",
    )
]


def _stack(scns: list[Scenario]) -> Scenario:
    """One Scenario whose model sizes, plan fields and node counts are arrays of shape (1, n)."""
    first = scns[0]
    kw: dict[str, Any] = {}
    for name in _PLAN_FIELDS:
        values = [getattr(s.plan, name) for s in scns]
        if name == "overlap_p2p":  # None: on for the interleaved schedule only
            values = [
                bool(v) if v is not None else int(s.plan.schedule) == 2 for v, s in zip(values, scns, strict=True)
            ]
        kw[name] = np.array([int(v) if name in ("schedule", "recompute") else v for v in values])[None, :]
    if first.plan.stage_layers:  # one explicit split (in the group key) fixes one pp: kept a number, as the split needs
        kw["pp"] = first.plan.pp
    model = replace(
        first.model,
        name="runs",
        **{f: np.array([getattr(s.model, f) for s in scns], dtype=float)[None, :] for f in _MODEL_NUMBERS},
    )
    nodes = np.array([s.cluster.nodes for s in scns])[None, :]
    return Scenario(model, first.cluster.with_(nodes=nodes), replace(first.plan, **kw))


SERVING_METRICS = ("ttft_s", "tpot_s", "e2e_s", "throughput_tokens_per_s")


@dataclass(frozen=True)
class ServingCase:
    """A serving measurement: the scenario served, the workload, and which figure was measured
    (time to first token, time per output token, end-to-end latency or output tokens/s)."""

    scenario: Scenario
    workload: Any  # specs.serving.ServingWorkload
    metric: str

    def __post_init__(self) -> None:
        if self.metric not in SERVING_METRICS:
            raise SpecError(f"serving metric {self.metric!r}: choose one of {', '.join(SERVING_METRICS)}")


@dataclass(frozen=True)
class LayerStackCase:
    """A step of `shardwise measure tp|pp|dp`: the scenario's layers only (no embedding, output
    layer or optimizer), `micro_batches` micro-batches, priced as `measure.predict` composes it."""

    scenario: Scenario
    kind: str  # "tp", "pp" or "dp"
    micro_batches: int

    def step_s(self, cluster: Any) -> Any:
        from shardwise.measure.predict import predict

        p = self.scenario.plan
        ranks = int({"tp": p.tp, "pp": p.pp, "dp": p.dp}[self.kind])
        sp, v = bool(np.asarray(p.sequence_parallel)), int(p.vpp)
        model = self.scenario.model
        return predict(
            self.kind, model, cluster, ranks, int(p.micro_batch), self.micro_batches, p.precision, sp, v
        ).step_s


Case = Scenario | ServingCase | LayerStackCase


def _serving_key(case: ServingCase) -> tuple[Any, ...]:
    """Serving cases that can share one estimate: the same scenario (the object, or an equal one)
    and workload but for its lengths and batch, which are stacked (`_stack_serving`)."""
    w = case.workload
    try:
        scenario: Any = (hash(case.scenario), case.scenario)
    except TypeError:  # an array-valued scenario: only itself
        scenario = id(case.scenario)
    return (scenario, w.weight_precision, w.kv_precision, w.runtime, w.custom_all_reduce, w.engine)


def _stack_serving(idx: list[int], cases: list[ServingCase]) -> tuple[np.ndarray, Scenario, Any, list[str]]:
    """(the cases' indices, their scenario, one workload whose lengths and batch are arrays of shape
    (1, n), each case's metric): n measurements priced by one estimate."""
    stacked = replace(
        cases[0].workload,
        **{f: np.array([getattr(c.workload, f) for c in cases])[None, :] for f in ("input_len", "output_len", "batch")},
    )
    return np.array(idx), cases[0].scenario, stacked, [c.metric for c in cases]


def _check_one_configuration_each(cases: list[Case]) -> None:
    """A run or a prediction is one configuration: an array-valued scenario is refused, naming it."""
    from shardwise.specs.distinct import _leaves

    for i, case in enumerate(cases):
        leaves = _leaves(case) if isinstance(case, Scenario) else []
        if leaves:
            n = int(np.prod(np.broadcast_shapes(*(a.shape for _, a in leaves))))
            named = ", ".join(".".join(path) for path, _ in leaves[:3])
            raise SpecError(
                f"calibration: case {i}: a scenario of {n} configurations (arrays in {named}); give one "
                "Scenario per run or prediction, a list of them"
            )


class Evaluator:
    """Prices a fixed list of cases at many parameter sets at once: training scenarios (the step
    time, stacked per group) and serving cases (their measured figure, stacked per scenario and
    workload kind: one estimate for a runtime's rows of one model and layout)."""

    def __init__(self, cases: list[Case]):
        groups: dict[tuple[Any, ...], list[int]] = defaultdict(list)
        served: dict[tuple[Any, ...], list[int]] = defaultdict(list)
        self.stacks = [(i, c) for i, c in enumerate(cases) if isinstance(c, LayerStackCase)]
        _check_one_configuration_each(cases)
        for i, case in enumerate(cases):
            if isinstance(case, Scenario):
                groups[_group_key(case)].append(i)
            elif isinstance(case, ServingCase):
                served[_serving_key(case)].append(i)
        self.n = len(cases)
        self.groups = [(np.array(idx), _stack([cases[i] for i in idx])) for idx in groups.values()]  # type: ignore[misc]
        self.serving = [_stack_serving(idx, [cases[i] for i in idx]) for idx in served.values()]  # type: ignore[misc]

    def step_s(self, sets: dict[str, np.ndarray], at: dict[str, np.ndarray] | None = None) -> np.ndarray:
        """Predictions, shape (number of sets, number of cases): the step time of a training
        scenario, the measured figure of a serving case; `sets` maps parameter names to arrays of
        one value per set (missing names: the neutral value). `at`: calibrated values, one per set
        (arrays as `sets`), applied first: set i priced on the cases calibrated by `at`'s values i,
        as `with_values` calibrates them (several calibrations priced in one call)."""
        from shardwise.engines.training import estimate_training_step

        size = max((len(np.atleast_1d(v)) for v in (*sets.values(), *(at or {}).values())), default=1)
        values = {k: np.atleast_1d(np.asarray(v, dtype=float))[:, None] for k, v in sets.items()}
        first = None if at is None else {k: np.atleast_1d(np.asarray(v, dtype=float))[:, None] for k, v in at.items()}

        def on(cluster: Any, values: dict[str, np.ndarray], first: dict[str, np.ndarray] | None) -> Any:
            return apply(cluster if first is None else apply(cluster, first), values)

        out = np.empty((size, self.n))
        for idx, stacked in self.groups:
            scn = stacked.on_rates(on(stacked.cluster, values, first))
            out[:, idx] = np.broadcast_to(estimate_training_step(scn).step_time_s, (size, len(idx)))
        flat = {k: v[:, 0] for k, v in values.items()}
        flat_first = None if first is None else {k: v[:, 0] for k, v in first.items()}
        for i, stack in self.stacks:
            rates = on(stack.scenario.cluster, flat, flat_first)
            out[:, i] = np.broadcast_to(np.asarray(stack.step_s(rates), float), (size,))
        if self.serving:
            from shardwise.engines.serving import estimate_serving

            for idx, s, workload, metrics in self.serving:
                est = estimate_serving(s.on_rates(on(s.cluster, values, first)), workload)
                for metric in dict.fromkeys(metrics):
                    mine = np.array([m == metric for m in metrics])
                    got = np.broadcast_to(np.asarray(getattr(est, metric), dtype=float), (size, len(idx)))
                    out[:, idx[mine]] = got[:, mine]
        return out


def fd_step(name: str) -> float:
    """The finite-difference step of a parameter in u space: scales step down (the GEMM efficiency
    is capped at 100% of peak), overheads up (they are bounded below by 0)."""
    p = BY_NAME[name]
    return (-1.0 if p.log_scale else 1.0) * _STEP * p.prior_sd


def parameter_sets(
    names: tuple[str, ...], u: np.ndarray, fixed: dict[str, float]
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Parameter sets: the point u, then u with parameter j moved by one step (for the Jacobian).
    Log scales step down (the GEMM efficiency is capped at 100% of peak), overheads step up."""
    k = len(names)
    steps = np.array([fd_step(n) for n in names])
    us = np.repeat(u[None, :], k + 1, axis=0)
    us[1:] += np.diag(steps)
    sets = {n: np.full(k + 1, v) for n, v in fixed.items()}
    for j, n in enumerate(names):
        sets[n] = BY_NAME[n].value(us[:, j])
    return sets, steps


def log_step_and_gradient(
    ev: Evaluator, names: tuple[str, ...], u: np.ndarray, fixed: dict[str, float]
) -> tuple[np.ndarray, np.ndarray]:
    """(ln t at u, d ln t / d u of shape (n, k))."""
    sets, steps = parameter_sets(names, u, fixed)
    logt = np.log(ev.step_s(sets))
    return logt[0], ((logt[1:] - logt[0]) / steps[:, None]).T


def with_values(case: Case, values: dict[str, float]) -> Case:
    """The case on its cluster with calibrated values (`parameters.apply`)."""
    s = case if isinstance(case, Scenario) else case.scenario
    calibrated = Scenario(s.model, apply(s.cluster, values), s.plan)
    return calibrated if isinstance(case, Scenario) else replace(case, scenario=calibrated)
