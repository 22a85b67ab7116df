"""One place for the layout rules: the value types, the sweeps' masks and the planner agree."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from shardwise import presets
from shardwise.analyses.evaluate import why_invalid
from shardwise.analyses.experiment import brief_experiment
from shardwise.loaders import parse_plan_spec
from shardwise.specs import Cluster, Model, Plan, Scenario, SpecError, rules
from shardwise.specs.experiment import PlanSpec


def _scenario_error(exp, spec: PlanSpec, batch: int) -> str | None:
    """What the value types say about the plan at this batch (None: valid)."""
    tp, pp, dp = (np.asarray(d).item() for d in spec.degrees(exp.gpus))
    if dp != int(dp):
        return "tp*pp*dp"
    kwargs = {"micro_batch": exp.micro_batch, **spec.plan_kwargs()}
    try:
        plan = Plan(tp=tp, pp=pp, dp=int(dp), global_batch=batch, **kwargs)
        cluster = Cluster("x", exp.gpu, exp.gpus_per_node, 1, exp.links[0].link, None)
        Scenario(exp.model, cluster, plan)
    except SpecError as exc:
        return str(exc)
    return None


@pytest.mark.parametrize("layers", [6, 10, 96])
def test_sweep_masks_and_value_types_agree(layers):
    base = brief_experiment()
    exp = base.with_(model=base.model.with_(layers=layers, heads=24, kv_heads=8, hidden=3072, ffn_hidden=12288))
    specs = [
        parse_plan_spec(t)
        for t in ("tp=8", "pp=8", "tp=3", "tp=2,pp=4", "pp=4,vpp=2", "tp=4,pp=2,mb=2", "tp=8,sp=on", "pp=2,vpp=3")
    ]
    seen_invalid = seen_valid = 0
    for spec, batch in itertools.product(specs, (1, 4, 6, 8, 16)):
        mask_says = why_invalid(exp, spec, exp.links[0].link, {"batch": np.array([float(batch)])})
        specs_say = _scenario_error(exp, spec, batch)
        assert (mask_says is None) == (specs_say is None), (spec.label, batch, mask_says, specs_say)
        seen_invalid += mask_says is not None
        seen_valid += mask_says is None
    assert seen_invalid and seen_valid  # both sides of every comparison were exercised


def test_each_rule_reports_the_first_broken_point():
    r = rules.divides("heads by tp", "model: heads", 32, "tp", np.array([1, 2, 3, 4, 6]))
    assert r.ok.tolist() == [True, True, False, True, False]
    assert r.error() == "model: heads: 32 is not divisible by tp=3"
    with pytest.raises(SpecError, match="tp=3"):
        rules.raise_first([r])
    assert rules.holds(rules.tp_rules(np.array([1, 2, 4, 8]), 32, 8, 11008)).tolist() == [True, True, True, True]
    assert rules.holds(rules.tp_rules(np.array([16]), 32, 8, 11008)).tolist() == [False]  # 8 KV heads


def test_node_and_sequence_rules():
    ok = rules.holds(rules.node_rules(np.array([1, 2, 3, 8, 12, 16]), 8))
    assert ok.tolist() == [True, True, False, True, False, True]
    seq = rules.sequence_rules(4096, 8, np.array([1, 2, 3]), True, True)
    assert seq[1].ok.tolist() == [True, True, False]  # 4096 not divisible by 2 x 3
    assert "2*cp=6" in seq[1].error()
    with pytest.raises(SpecError, match="fused"):
        rules.raise_first(rules.sequence_rules(4096, 8, 2, False, False))


def test_the_planner_only_offers_plans_the_value_types_accept():
    from shardwise.analyses.planner import SearchSpace, candidates

    model = Model("m", layers=10, hidden=3072, heads=24, kv_heads=8, vocab=32000, seq_len=2048)
    cluster = presets.system("dgx-a100", nodes=2)
    cols = candidates(model, cluster, 48, SearchSpace())
    assert len(cols["tp"]) > 100
    assert set(cols["tp"].tolist()) <= {1, 2, 4, 8}  # 24 heads, 8 KV heads
    plan = Plan(
        tp=cols["tp"],
        pp=cols["pp"],
        dp=cols["dp"],
        global_batch=48,
        micro_batch=cols["micro_batch"],
        vpp=cols["vpp"],
        schedule=cols["schedule"],
        sequence_parallel=cols["sequence_parallel"].astype(bool),
        first_stage_layers=cols["first_stage_layers"],
        last_stage_layers=cols["last_stage_layers"],
    )
    from shardwise.analyses.planner import cluster_for

    Scenario(model, cluster_for(cluster, cols["gpus"]), plan)  # raises if any candidate breaks a rule


def test_the_serving_runtimes_the_specs_accept_are_the_ones_the_engine_prices():
    from shardwise.engines.serving import RUNTIMES
    from shardwise.specs.serving import RUNTIME_NAMES, ServingWorkload

    assert set(RUNTIMES) == set(RUNTIME_NAMES)
    with pytest.raises(SpecError, match="runtime 'jit' is not allowed; choose graphs, cpp-eager, pytorch-eager"):
        ServingWorkload(input_len=8, output_len=8, runtime="jit")
