"""The planner's candidates, built as a vectorized join (`analyses.plan_space`), are the plans
of the nested loops they replaced, in the same order (the order breaks ties in the ranking)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from shardwise import presets
from shardwise.analyses.plan_space import (
    COLUMNS,
    CP_FROM_SEQ_LEN,
    MAX_STAGE_IMBALANCE,
    SCHEDULE_NAMES,
    SearchSpace,
    _imbalance,
    candidates,
    divisors,
    gpu_counts,
    stage_splits,
)
from shardwise.specs import Recompute, Schedule, rules


def _allowed(values, fixed):
    return values if fixed is None else values[np.isin(values, fixed)]


def _tp_values(model, cluster, gpus, space):
    g = min(int(cluster.gpus_per_node), gpus)
    t = divisors(gpus)
    ok = rules.holds(rules.tp_rules(t, model.heads, model.kv_heads, model.ffn_hidden))
    ok &= (g % t == 0) if space.tp_within_node else rules.holds(rules.node_rules(t, g))
    if space.max_tp is not None:
        ok &= t <= space.max_tp
    return _allowed(t[ok], space.tp)


def _cp_values(model, ranks, space):
    if space.cp is None and model.seq_len < CP_FROM_SEQ_LEN:
        return [1]
    if not space.execution.get("flash_attention", True):
        return [c for c in (1,) if space.cp is None or c in space.cp]
    cps = [c for c in divisors(ranks).tolist() if model.seq_len % (2 * c) == 0 or c == 1]
    return [c for c in cps if space.cp is None or c in space.cp]


def _ep_values(model, ranks, space):
    if not model.is_moe:
        return [1]
    eps = [e for e in divisors(model.experts).tolist() if ranks % e == 0]
    return [e for e in eps if space.ep is None or e in space.ep]


def _zero_shards(zero, server_ranks, ranks, cp, space):
    """(ZeRO stage, shard group) pairs, in order: full sharding (0), then a server's dp x cp ranks
    where the stack runs hybrid sharding at that stage (or the fixed sizes)."""
    hybrid = presets.framework_plan_search(space.execution.get("framework") or "megatron-core")[1]
    if space.hybrid_zero is not None:
        hybrid = space.hybrid_zero

    def group(g):
        return 2 <= g < ranks and ranks % g == 0 and g % cp == 0

    out = []
    for z in zero:
        if z == 0 or ranks == 1:
            out.append((z, 0))
        elif space.shard_group is None:
            out += [(z, 0)] + ([(z, server_ranks)] if z in hybrid and group(server_ranks) else [])
        else:
            for g in space.shard_group:
                v = 0 if g == 0 or (g == ranks and 0 not in space.shard_group) else g
                if v == 0 or group(v):
                    out.append((z, v))
    return out


def _block(model, cluster, global_batch, gpus, tp, pp, space, cp):
    """Every valid plan with these (gpus, tp, pp, cp): the planner's loop form before the join."""
    dp = gpus // (tp * pp * cp)
    if not rules.fills_gpus(gpus, tp, pp, dp, cp) or (space.dp is not None and dp not in space.dp):
        return None
    if global_batch % dp:
        return None
    if model.layers % pp and (not space.uneven_stages or _imbalance(model.layers, pp) > MAX_STAGE_IMBALANCE):
        return None
    mbs = divisors(global_batch // dp)
    mbs = mbs[np.isin(mbs, space.micro_batch)] if space.micro_batch is not None else mbs[mbs <= space.max_micro_batch]
    if pp == 1:
        sched = [(int(Schedule.ONE_F_ONE_B), 1)]
        if space.vpp is not None and 1 not in space.vpp:
            return None
    else:
        units = [u for _, _, u in stage_splits(model.layers, pp) if u > 0]
        vpps = np.unique(np.concatenate([divisors(u) for u in units])) if units else np.array([1])
        vpps = vpps[vpps >= 2]
        if space.vpp is not None:
            vpps = np.array(sorted(v for v in set(space.vpp) if 2 <= v <= max(units, default=0)), dtype=np.int64)
        else:
            vpps = vpps[vpps <= space.max_vpp]
        sched = [(int(s), 1) for s in (Schedule.GPIPE, Schedule.ONE_F_ONE_B, Schedule.ZB_H1)]
        if space.vpp is not None and 1 not in space.vpp:
            sched = []
        sched += [(int(Schedule.INTERLEAVED), int(v)) for v in vpps]
        if space.schedule is not None:
            sched = [(s, v) for s, v in sched if SCHEDULE_NAMES[s] in space.schedule]
    flash = space.execution.get("flash_attention", True)
    rc = [
        int(r)
        for r in Recompute
        if (r.label in space.recompute if space.recompute is not None else not (flash and r == Recompute.SELECTIVE))
    ]
    sp_rule = rules.sequence_rules(model.seq_len, tp, cp, True, True)[2]
    sp = [False, True] if tp > 1 and sp_rule.ok else [False]
    if tp > 1:
        sp = [q for q in sp if space.sequence_parallel is None or q in space.sequence_parallel]
        if model.is_moe:
            sp = [q for q in sp if q]
    eps = _ep_values(model, tp * cp * dp, space)
    zero = [0, 1, 2, 3] if dp > 1 else [0]
    if pp > 1 and not space.zero_with_pipeline:
        zero = [z for z in zero if z <= 1]
    if dp > 1:
        zero = [z for z in zero if space.zero_stage is None or z in space.zero_stage]
    if not (len(mbs) and sched and rc and sp and zero and eps):
        return None
    splits = stage_splits(model.layers, pp) if space.uneven_stages else [(0, 0, model.layers // pp)]
    pairs = _zero_shards(zero, min(int(cluster.gpus_per_node), gpus) // tp, dp * cp, cp, space)
    grid = np.array(
        list(itertools.product(mbs.tolist(), range(len(sched)), rc, sp, range(len(pairs)), range(len(splits)), eps)),
        dtype=np.int64,
    )
    zero_of = np.array([z for z, _ in pairs], dtype=np.int64)[grid[:, 4]]
    shard = np.array([g for _, g in pairs], dtype=np.int64)[grid[:, 4]]
    mb, si = grid[:, 0], grid[:, 1]
    s_code = np.array([s for s, _ in sched])[si]
    v = np.array([v for _, v in sched])[si]
    first = np.array([f for f, _, _ in splits])[grid[:, 5]]
    last = np.array([lst for _, lst, _ in splits])[grid[:, 5]]
    unit = np.array([u for _, _, u in splits])[grid[:, 5]]
    # searched: v divides every full stage; a fixed vpp: chunks of whole layers, not necessarily equal
    whole = (unit >= v) if space.vpp is not None else (np.mod(unit, v) == 0)
    chunks_whole = (v == 1) | ((unit > 0) & whole)
    interleave_multiple = rules.batch_rules(global_batch, dp, mb, pp, s_code == int(Schedule.INTERLEAVED))[1]
    ok = interleave_multiple.ok & chunks_whole
    if model.is_moe:  # the expert-data-parallel ranks split into as many replicas as the dense ones
        replicas = dp * cp // np.maximum(shard, 1)
        ok &= (shard == 0) | ((tp * cp * dp // grid[:, 6]) % replicas == 0)
    n = int(ok.sum())
    if n == 0:
        return None
    const = np.array([[gpus, tp, pp, dp]] * n, dtype=np.int64)
    layers_whole = np.full(len(ok), space.recompute_layers or 0)
    chosen = (v, mb, s_code, grid[:, 2], grid[:, 3], zero_of, first, last, grid[:, 6], np.full(len(ok), cp))
    chosen = (*chosen, layers_whole, shard)
    return np.hstack([const, np.column_stack([c[ok] for c in chosen])])


def loop_candidates(model, cluster, global_batch, space):
    blocks = []
    for gpus in gpu_counts(cluster, space):
        pps = _allowed(np.arange(1, model.layers + 1), space.pp)
        for tp in _tp_values(model, cluster, gpus, space).tolist():
            for pp in pps.tolist():
                if gpus % (tp * pp):
                    continue
                for cp in _cp_values(model, gpus // (tp * pp), space):
                    b = _block(model, cluster, global_batch, gpus, tp, pp, space, cp)
                    if b is not None:
                        blocks.append(b)
    if not blocks:
        return {}
    rows = np.vstack(blocks)
    return {name: rows[:, i] for i, name in enumerate(COLUMNS)}


CASES = [
    ("gpt-1t", "dgx-a100", 8, 3072, {}),
    ("gpt-1t", "dgx-a100", 6, 3072, {"objective": "throughput-per-gpu"}),
    ("gpt-1t", "dgx-a100", 16, 3072, {"tp_within_node": False, "max_micro_batch": 64, "max_vpp": 16}),
    ("gpt-1t", "dgx-a100", 16, 3072, {"tp_within_node": False, "zero_with_pipeline": True}),
    ("gpt-1.7b", "dgx-a100", 1, 64, {"objective": "throughput-per-gpu"}),
    ("gpt-1.7b", "dgx-a100", 2, 96, {"micro_batch": (1, 3, 5), "schedule": ("interleaved", "1f1b")}),
    ("gpt-1.7b", "dgx-a100", 2, 96, {"vpp": (2, 3), "zero_stage": (1, 3), "sequence_parallel": (True,)}),
    ("gpt-1.7b", "dgx-a100", 2, 96, {"uneven_stages": False, "recompute": ("selective", "full")}),
    ("gpt-1.7b", "dgx-a100", 2, 96, {"execution": {"flash_attention": False}, "tp": (2, 4), "dp": (2, 4, 8)}),
    ("llama3-405b", "dgx-h100", 64, 512, {"max_tp": 4}),
    ("llama3-8b", "dgx-h100", 4, 64, {"cp": (1, 2, 4)}),
    ("mixtral-8x7b", "dgx-h100", 4, 256, {}),
    ("mixtral-8x7b", "dgx-h100", 4, 256, {"ep": (2, 8), "sequence_parallel": (False, True)}),
    ("mixtral-8x7b", "dgx-h100", 8, 256, {"execution": {"framework": "torchtitan"}, "max_tp": 2}),
    ("llama3-70b", "dgx-h100", 8, 256, {"execution": {"framework": "torchtitan"}, "cp": (1, 2)}),
    ("llama3-8b", "dgx-h100", 4, 64, {"shard_group": (8, 16), "recompute_layers": 2}),
    ("llama3-8b", "dgx-h100", 4, 64, {"shard_group": (0, 32), "hybrid_zero": (3,)}),
    ("llama3-8b", "dgx-h100", 4, 64, {"execution": {"framework": "megatron-lm-2022"}}),
]


@pytest.mark.parametrize(("model", "system", "nodes", "batch", "space"), CASES)
def test_the_join_gives_the_loops_plans_in_their_order(model, system, nodes, batch, space):
    m, cluster = presets.model(model), presets.system(system, nodes=nodes)
    want = loop_candidates(m, cluster, batch, SearchSpace(**space))
    got = candidates(m, cluster, batch, SearchSpace(**space))
    assert list(got) == list(want)
    assert got, "a case with no plan tests nothing"
    for name in COLUMNS:
        assert got[name].dtype == np.int64, name
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_no_plan_is_an_empty_dict():
    m, cluster = presets.model("gpt-1.7b"), presets.system("dgx-a100", nodes=1)
    assert candidates(m, cluster, 64, SearchSpace(micro_batch=(7,))) == {}
    assert loop_candidates(m, cluster, 64, SearchSpace(micro_batch=(7,))) == {}


@pytest.mark.parametrize(("layers", "pp"), [(96, 8), (32, 8), (126, 16), (80, 4), (30, 4), (24, 3)])
def test_plan_and_a_scenario_accept_the_same_fixed_virtual_stages(layers: int, pp: int):
    """Issue 30: `predict --pp 8 --vpp 5` priced a layout that `plan --pp 8 --vpp 5` refused. A
    fixed vpp is offered by the planner exactly when a Scenario accepts it (chunks of whole
    layers, not necessarily equal); the search without one keeps Megatron's classic rule (v divides
    every full stage)."""
    from shardwise.errors import SpecError
    from shardwise.specs import Plan, Scenario

    model = presets.model("gpt3-175b").with_(layers=layers)
    cluster = presets.system("dgx-h100").with_(nodes=pp)
    batch = 8 * pp
    for v in range(2, layers // pp + 3):
        plan = Plan(pp=pp, dp=8, vpp=v, schedule=Schedule.INTERLEAVED, micro_batch=1, global_batch=batch)
        try:
            Scenario(model, cluster, plan)
            accepted = True
        except SpecError:
            accepted = False
        space = SearchSpace(tp=(1,), pp=(pp,), dp=(8,), vpp=(v,), micro_batch=(1,))
        rows = candidates(model, cluster, batch, space)
        offered = bool(np.any(rows.get("vpp", np.zeros(0)) == v))
        assert offered == accepted, f"vpp={v}: scenario {'accepts' if accepted else 'refuses'}, plan disagrees"
    searched = candidates(model, cluster, batch, SearchSpace(tp=(1,), pp=(pp,), dp=(8,), micro_batch=(1,)))
    units = [u for _, _, u in stage_splits(layers, pp) if u]
    assert all(any(u % int(v) == 0 for u in units) for v in searched["vpp"] if v > 1)
