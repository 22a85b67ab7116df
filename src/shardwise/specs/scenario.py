"""A model on a cluster under a plan: the cross-object rules live here."""

from __future__ import annotations

import operator
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from shardwise.specs._checks import SpecError
from shardwise.specs.hardware import Cluster
from shardwise.specs.memo import Memo, hash_once
from shardwise.specs.model import Model
from shardwise.specs.plan import Plan

if TYPE_CHECKING:
    from shardwise.specs.stages import StageSplit

_CHECKED = Memo("scenario checks")
# The plan fields the rules of `Scenario._check_each` read (tests/test_scalar_path.py checks the
# list against the reads): a configuration's verdict is kept under these alone.
RULE_FIELDS = (
    "tp",
    "pp",
    "dp",
    "cp",
    "vpp",
    "first_stage_layers",
    "last_stage_layers",
    "stage_layers",
    "sequence_parallel",
    "flash_attention",
    "cp_comm",
    "ep",
    "etp",
)
_RULE_GETTER = operator.attrgetter(*RULE_FIELDS)


@hash_once
@dataclass(frozen=True)
class Scenario:
    """Checked on construction:

    - tp * pp * dp equals the cluster's GPU count;
    - heads and KV heads divisible by tp (each TP rank owns whole heads), FFN hidden by tp; or,
      with tp above the KV heads, tp a multiple of them (serving replicates a KV head on each rank:
      `rules.kv_replica_rule`; training refuses it, `rules.kv_training_rule`, checked by the
      training engines);
    - every pipeline stage holds at least one layer per model chunk, and a given split adds up to
      the model's layers (`specs.stages`; the layers need not divide evenly);
    - a TP group either fits inside a node or spans whole nodes;
    - with sequence parallelism, the sequence length divisible by tp;
    - expert parallelism only for a mixture of experts, whole experts per EP rank, ep x etp
      dividing tp x cp x dp (training also needs sequence parallelism when a mixture of experts
      uses TP: `rules.moe_training_rule`, checked by the training engines).
    """

    model: Model
    cluster: Cluster
    plan: Plan

    def __post_init__(self) -> None:
        for name, kind in (("model", Model), ("cluster", Cluster), ("plan", Plan)):
            value = getattr(self, name)
            if not isinstance(value, kind):
                shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
                raise SpecError(f"scenario: {name}: {shown} ({type(value).__name__}) is not a {kind.__name__}")
        from shardwise.specs.distinct import _leaves, broadcast_shape, find_distinct

        plan = self.plan
        if plan.__dict__.get("_distinct", 0) is None and not _leaves(self.model) and not _leaves(self.cluster):
            self.__dict__["_distinct"] = None  # one configuration (or plans not worth coding): what find_distinct says
        else:
            broadcast_shape("scenario", _leaves(self))  # arrays that do not broadcast: one SpecError naming two
            try:  # many configurations that repeat: each distinct one is checked (building them checks them)
                if find_distinct(self) is not None:
                    return
            except SpecError:
                pass  # the checks below name the first broken configuration in the given order
        # one configuration (plain numbers): checked once per process for what the rules read
        # (`specs.memo`): plans that differ in the batch, recomputation or ZeRO share the verdict
        key = (self.model, self.cluster, _RULE_GETTER(plan))
        _CHECKED.get_or_compute(key, self._check_grouped_or_each)

    def _check_grouped_or_each(self) -> bool:
        """`_check_each`, over one configuration per group where the plan's arrays group."""
        return self._checked_by_groups() or self._check_each()

    def _checked_by_groups(self) -> bool:
        """Whether the rules hold, checked at one configuration per distinct combination of the
        plan fields they read (RULE_FIELDS; `specs.grouped`): a distinct plan's third of a million
        configurations hold a few hundred. False where they do not group (a broken one among
        them: the full check names the first in the order given)."""
        from shardwise.specs.distinct import _leaves, _rebuild
        from shardwise.specs.grouped import groups_of

        leaves = _leaves(self.plan)
        if not leaves or _leaves(self.model) or _leaves(self.cluster):
            return False
        groups = groups_of([a for path, a in leaves if path[0] in RULE_FIELDS])
        if groups is None:
            return False
        rows = groups[0]
        reduced = _rebuild(self.plan, {path: a.take(rows) for path, a in leaves})
        try:
            Scenario(self.model, self.cluster, reduced)
        except SpecError:
            return False
        return True

    def on_rates(self, cluster: Cluster) -> Scenario:
        """This scenario on `cluster`, a copy of its own cluster with other rates, efficiencies,
        latencies or overheads (`calibration.parameters.apply`): no rule reads those (only the
        GPU count, the GPUs per node and the name), so the checks that passed are not run again,
        and the stage split is shared. Any other cluster is checked as usual."""
        mine = self.cluster
        if cluster.nodes is not mine.nodes or cluster.gpus_per_node != mine.gpus_per_node or cluster.name != mine.name:
            return Scenario(self.model, cluster, self.plan)
        out = object.__new__(Scenario)
        object.__setattr__(out, "model", self.model)
        object.__setattr__(out, "cluster", cluster)
        object.__setattr__(out, "plan", self.plan)
        if "split" in self.__dict__:
            out.__dict__["split"] = self.__dict__["split"]
        return out

    @cached_property
    def split(self) -> StageSplit:
        """How the model's layers are split over the pipeline stages (`specs.stages.plan_split`),
        computed once per scenario."""
        from shardwise.specs.stages import plan_split

        return plan_split(self.model.layers, self.plan)

    def _check_each(self) -> bool:
        """The rules of the class docstring, over every configuration (True: they hold)."""
        m, c, p = self.model, self.cluster, self.plan
        from shardwise.specs import rules

        def context() -> str:  # written only for the error (formatting a planner's arrays is slow)
            return f"cluster {c.name!r} has {c.nodes} node(s) x {c.gpus_per_node} GPUs"

        rules.raise_first(
            [
                rules.gpu_rules(c.num_gpus, p.tp, p.pp, p.dp, p.cp, context),
                *rules.tp_rules(p.tp, m.heads, m.kv_heads, m.ffn_hidden, replicate_kv=True),
                rules.stage_rule(self.split, m.layers, p.pp, p.vpp),
                *rules.node_rules(p.tp, c.gpus_per_node),
                *rules.sequence_rules(m.seq_len, p.tp, p.cp, p.sequence_parallel, p.flash_attention),
                rules.ulysses_rule(m.heads, m.kv_heads, p.tp, p.cp, p.cp_comm),
                *rules.moe_rules(m.experts, m.expert_ffn_hidden, p.tp, p.cp, p.dp, p.ep, p.expert_tp, m.name),
            ]
        )
        return True
