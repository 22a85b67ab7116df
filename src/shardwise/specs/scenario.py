"""A model on a cluster under a plan: the cross-object rules live here."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardwise.specs import _checks as chk
from shardwise.specs._checks import SpecError
from shardwise.specs.hardware import Cluster
from shardwise.specs.model import Model
from shardwise.specs.plan import Plan


@dataclass(frozen=True)
class Scenario:
    """Checked on construction:

    - tp * pp * dp equals the cluster's GPU count;
    - heads and KV heads divisible by tp (each TP rank owns whole heads), FFN hidden by tp;
    - every pipeline stage holds at least one layer per model chunk, and a given split adds up to
      the model's layers (`specs.stages`; the layers need not divide evenly);
    - a TP group either fits inside a node or spans whole nodes;
    - with sequence parallelism, the sequence length divisible by tp.
    """

    model: Model
    cluster: Cluster
    plan: Plan

    def __post_init__(self) -> None:
        m, c, p = self.model, self.cluster, self.plan
        chk.equal(
            "plan: tp*pp*dp*cp" if np.any(np.asarray(p.cp) > 1) else "plan: tp*pp*dp",
            p.num_gpus,
            "GPUs in the cluster",
            c.num_gpus,
            f"cluster {c.name!r} has {c.nodes} node(s) x {c.gpus_per_node} GPUs",
        )
        chk.divisible("model: heads", m.heads, "tp", p.tp, "each TP rank owns whole heads")
        chk.divisible("model: kv_heads", m.kv_heads, "tp", p.tp, "each TP rank owns whole KV heads")
        chk.divisible("model: ffn_hidden", m.ffn_hidden, "tp", p.tp, "the MLP is split by columns")
        from shardwise.specs.stages import check_split, plan_split

        check_split(plan_split(m.layers, p), m.layers, p.pp, p.vpp)
        tp, g = np.broadcast_arrays(np.asarray(p.tp), np.asarray(c.gpus_per_node))
        bad = (np.mod(g, tp) != 0) & (np.mod(tp, g) != 0)
        if np.any(bad):
            i = np.flatnonzero(bad)[0]
            raise SpecError(
                f"plan: tp={tp.flat[i]} neither divides nor is a multiple of gpus_per_node={g.flat[i]}; "
                "a TP group must fit inside a node or span whole nodes"
            )
        cp = np.asarray(p.cp)
        if np.any((cp > 1) & ~np.asarray(p.flash_attention, dtype=bool)):
            raise SpecError(
                "plan: context parallelism needs fused (flash) attention (Megatron-Core's ring attention is "
                "Transformer Engine's fused kernel); drop --no-flash-attention or use cp=1"
            )
        if np.any(cp > 1):
            s, c = np.broadcast_arrays(np.asarray(m.seq_len), cp)
            bad = (c > 1) & (np.mod(s, 2 * c) != 0)
            if np.any(bad):
                i = np.flatnonzero(bad)[0]
                raise SpecError(
                    f"model: seq_len={s.flat[i]} is not divisible by 2*cp={2 * c.flat[i]} (context parallelism "
                    "splits each sequence into 2 cp chunks, two per rank, to balance the causal mask)"
                )
        sp = np.asarray(p.sequence_parallel, dtype=bool)
        if np.any(sp):
            s, t, sp = np.broadcast_arrays(np.asarray(m.seq_len) // cp, np.asarray(p.tp), sp)
            bad = sp & (np.mod(s, t) != 0)
            if np.any(bad):
                i = np.flatnonzero(bad)[0]
                raise SpecError(
                    f"model: seq_len={s.flat[i]} is not divisible by tp={t.flat[i]} "
                    "(sequence parallelism splits the sequence across the TP group)"
                )
