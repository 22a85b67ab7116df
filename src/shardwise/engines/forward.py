"""Latency of one forward pass (no backward, no optimizer): a batch of sequences through the
model, as in inference prefill (time to first token) or decoding one token with a KV cache.

The global batch is split into m = B / (dp * b) micro-batches that flow through the p stages;
each stage j spends c_j = f_j + t_p2p per micro-batch (its layers' forward with exposed TP
collectives, one send to the next stage), so, as for training,

    T = m max_j c_j + sum_j c_j - max_j c_j        ( = (m + p - 1) c for equal stages )

With one micro-batch every stage waits for the previous one: PP adds hops but no speed-up.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from shardwise.engines.context_parallel import context_parallel, cp_step_s
from shardwise.engines.costs import layer_cost
from shardwise.engines.dp_dense import with_dense_parts
from shardwise.engines.moe import moe_layers, stage_params
from shardwise.engines.pipeline import pipeline_makespan_s
from shardwise.engines.stage_assembly import Stages, stages
from shardwise.engines.stage_ends import embedding_cost, head_cost
from shardwise.engines.stage_sends import slowest_stage_send_s
from shardwise.engines.tp_overlap import tp_comm
from shardwise.physics.collectives import Fabric
from shardwise.physics.flops import kv_cache_elements_per_token, kv_cache_tokens
from shardwise.physics.topology import placement
from shardwise.specs import Scenario
from shardwise.specs._checks import Number
from shardwise.specs.stages import plan_split


@dataclass(frozen=True)
class ForwardEstimate:
    """Seconds of one forward pass and where they go (parts add up to `latency_s`)."""

    scenario: Scenario
    latency_s: Number
    compute_s: Number
    tp_comm_s: Number
    pp_p2p_s: Number
    pp_bubble_s: Number
    weights_bytes: Number  # 16-bit weights on the fullest GPU
    kv_cache_bytes: Number  # keys and values the pass leaves behind, per GPU

    def as_dict(self) -> dict[str, Number]:
        return {
            "compute": self.compute_s,
            "tp_comm": self.tp_comm_s,
            "pp_p2p": self.pp_p2p_s,
            "pp_bubble": self.pp_bubble_s,
        }

    @property
    def tokens_per_s(self) -> Number:
        return self.scenario.plan.global_batch / self.latency_s


@dataclass(frozen=True)
class ForwardStages:
    """One micro-batch's forward on the first, a middle and the last stage (seconds; each part
    broadcasts with the scenario), and one send between stages."""

    compute: tuple[Number, Number, Number]
    tp_comm: tuple[Number, Number, Number]
    send_s: Number
    middle_sum: Number = None  # all middle stages' compute + TP communication (None: equal stages)

    @classmethod
    def of(cls, st: Stages, send_s: Number) -> ForwardStages:
        """The forward halves of `engines.stage_assembly.stages`' costs; the collectives (TP, and the expert
        all-to-alls of mixture-of-experts layers) together."""
        parts = (st.first, st.middle, st.last)
        return cls(
            tuple(s.compute_forward_s for s in parts),  # type: ignore[arg-type]
            tuple(s.tp_forward_s + s.ep_forward_s for s in parts),  # type: ignore[arg-type]
            send_s,
            st.middle_sum.forward_s,
        )

    @property
    def per_stage(self) -> tuple[Number, Number, Number]:
        """c_j = compute + exposed TP communication + the send to the next stage."""
        return tuple(c + t + self.send_s for c, t in zip(self.compute, self.tp_comm, strict=True))  # type: ignore[return-value]

    def middle_sum_s(self, pp: Number) -> Number:
        """sum of c_j over the middle stages (sends included)."""
        p = np.asarray(pp, dtype=float)
        n_mid = np.maximum(p - 2, 0.0)
        if self.middle_sum is None:
            return n_mid * self.per_stage[1]
        return self.middle_sum + n_mid * self.send_s

    def slowest(self, pp: Number) -> tuple[Number, Number, Number]:
        """(c_max, its compute, its TP communication) over the stages that exist."""
        p = np.asarray(pp)
        c = self.per_stage
        mid = np.where(p > 2, c[1], -np.inf)
        pick = np.where(c[0] >= np.maximum(mid, c[2]), 0, np.where(c[2] >= mid, 2, 1))
        return (np.choose(pick, list(c)), np.choose(pick, list(self.compute)), np.choose(pick, list(self.tp_comm)))


def forward_stages(
    scn: Scenario,
    q_len: Number | None = None,
    kv_len: Number | None = None,
    logits_for_all: bool = False,
    weight_bytes: Number | None = None,
    kv_bytes: Number | None = None,
) -> ForwardStages:
    """Per-stage forward costs of one micro-batch of `q_len` new tokens per sequence attending to
    `kv_len` tokens (weights and KV cache optionally stored narrower than activations)."""
    model, cluster, plan = scn.model, scn.cluster, scn.plan
    fabric = Fabric.of(cluster)
    place = placement(plan, cluster.gpus_per_node, experts=model.is_moe)
    cp, cp_step, gather = plan.cp, 0.0, 0.0
    if q_len is None and kv_len is None and np.any(np.asarray(cp) > 1):
        # a whole-sequence pass split over CP ranks as training splits it (`engines.training`): each
        # rank runs seq_len / cp tokens and their attention over the whole sequence by ring
        cp_step = cp_step_s(scn, fabric, place)
        kv_len, scn = model.seq_len, context_parallel(scn)
    elif np.any(np.asarray(cp) > 1):
        q_len, kv_len, cp, gather = serving_context_parallel(scn, fabric, place, q_len, kv_len, kv_bytes)
    s_q = scn.model.seq_len if q_len is None else q_len
    s_kv = s_q if kv_len is None else kv_len
    comm = tp_comm(scn, fabric, place["tp"], s_q)
    layer, _ = layer_cost(scn, comm, s_q, s_kv, weight_bytes, kv_bytes, cp, cp_step, training=False)
    emb = embedding_cost(scn, comm, s_q)
    # the output layer stays 16-bit in quantised serving (TensorRT-LLM and vLLM leave lm_head alone)
    head = head_cost(scn, comm, s_q if logits_for_all else 1, loss=False)
    split = plan_split(model.layers, plan)
    moe = moe_layers(scn, comm, fabric, place, split, s_kv, cp, cp_step, s_q, weight_bytes, kv_bytes)
    # SGLang's dense MLPs, shared experts and lm_head over tp x dp under data-parallel attention
    tokens = plan.micro_batch * s_q
    shared = 0.0 if moe is None or not model.shared_experts else moe[0].tp_forward_s / 2
    logits = plan.micro_batch * (s_q if logits_for_all else 1)
    layer, emb, head, moe = with_dense_parts(  # type: ignore[assignment]
        scn, fabric, place, tokens, np.asarray(s_q) > 1, logits, weight_bytes, (layer, emb, head, moe), shared
    )
    if np.any(np.asarray(gather) > 0):  # every layer's context-parallel all-gather
        layer = replace(layer, tp_forward_s=layer.tp_forward_s + gather)
        moe = None if moe is None else (replace(moe[0], tp_forward_s=moe[0].tp_forward_s + gather), moe[1])
    # one send of activations per micro-batch and stage boundary (training pays two per chunk)
    return ForwardStages.of(stages(split, layer, emb, head, moe), slowest_stage_send_s(scn, fabric, place, comm))


def serving_context_parallel(
    scn: Scenario,
    fabric: Fabric,
    place: dict[str, Number],
    q_len: Number,
    kv_len: Number | None,
    kv_bytes: Number | None = None,
) -> tuple[Number, Number, Number, Number]:
    """One CP rank's share of a serving pass, as vLLM's prefill context parallelism runs it (RFC
    vllm-project/vllm#25749): (new tokens per sequence, keys attended, cp for the causal split,
    seconds of the all-gather each layer adds).

    A prompt (q_len = kv_len) is split over the cp ranks: each runs 1/cp of its tokens through
    every layer (balanced halves of the causal square) after an all-gather of the whole prompt's
    keys and values, and keeps its tokens' share of the cache. Decoding (q_len < kv_len) runs the
    new tokens on every rank (the linear layers redundantly), each rank attending to its 1/cp of
    the cache; the partial outputs and their log-sum-exp are all-gathered and combined."""
    plan = scn.plan
    c = np.asarray(plan.cp, dtype=float)
    s_kv = q_len if kv_len is None else kv_len
    prompt = np.asarray(q_len) >= np.asarray(s_kv)
    kvb = plan.bytes_per_element if kv_bytes is None else kv_bytes
    b = plan.micro_batch
    decoding, prompt_tokens = np.where(prompt, 0.0, b * q_len), np.where(prompt, b * s_kv, 0.0)
    gather = np.where(c > 1, context_gather_s(scn, fabric, place, decoding, prompt_tokens, kvb), 0.0)
    local_q = np.where(prompt & (c > 1), np.ceil(np.asarray(q_len) / c), q_len)
    local_kv = np.where(prompt | (c <= 1), s_kv, np.ceil(np.asarray(s_kv) / c))
    return local_q, local_kv, np.where(prompt, plan.cp, 1), gather


def context_gather_s(
    scn: Scenario, fabric: Fabric, place: dict[str, Number], decoding: Number, prompt_tokens: Number, kvb: Number
) -> Number:
    """Per layer under serving's context parallelism: the all-gather of `decoding` new tokens'
    partial attention outputs (and their log-sum-exp, cp of them), and that of `prompt_tokens`
    prompt tokens' keys and values (`serving_context_parallel`)."""
    model, plan = scn.model, scn.plan
    c = np.asarray(plan.cp, dtype=float)
    group = fabric.group(plan.cp, place["cp"], plan.tp)
    partial = c * decoding * model.heads / np.asarray(plan.tp) * (model.head_dim + 1) * plan.bytes_per_element
    keys = prompt_tokens * kv_cache_elements_per_token(model, plan.tp) * kvb
    return np.where(decoding > 0, group.all_gather(partial), 0.0) + np.where(
        prompt_tokens > 0, group.all_gather(keys), 0.0
    )


def estimate_forward(
    scn: Scenario, q_len: Number | None = None, kv_len: Number | None = None, logits_for_all: bool = False
) -> ForwardEstimate:
    """One forward pass of `plan.global_batch` sequences of `q_len` new tokens each (default the
    model's sequence length) attending to `kv_len` tokens (default q_len). Only the last token of
    each sequence gets logits unless `logits_for_all` (training-style forward)."""
    model, plan = scn.model, scn.plan
    s_kv = (model.seq_len if q_len is None else q_len) if kv_len is None else kv_len
    p, m = np.asarray(plan.pp, dtype=float), np.asarray(plan.num_micro_batches, dtype=float)
    fs = forward_stages(scn, q_len, kv_len, logits_for_all)
    c = fs.per_stage
    latency = pipeline_makespan_s(c[0], c[1], c[2], p, m, 1, fs.middle_sum_s(p))
    c_max, compute, tp = fs.slowest(p)
    e = plan.bytes_per_element
    tokens = kv_cache_tokens(model, s_kv)  # a sliding window keeps its last w tokens
    kv_cache = e * most_layers(scn) * plan.micro_batch * m * tokens * kv_cache_elements_per_token(model, plan.tp)
    kv_cache = kv_cache / np.asarray(plan.cp)  # each CP rank keeps its own tokens' keys and values
    return ForwardEstimate(
        scenario=scn,
        latency_s=latency,
        compute_s=m * compute,
        tp_comm_s=m * tp,
        pp_p2p_s=m * fs.send_s,
        pp_bubble_s=latency - m * c_max,
        weights_bytes=max_params(scn) * e,
        kv_cache_bytes=kv_cache,
    )


def max_params(scn: Scenario) -> Number:
    """Parameters on the fullest GPU (first, fullest middle or last stage)."""
    first, middle, last = stage_params(scn.model, scn.plan, plan_split(scn.model.layers, scn.plan))
    return np.maximum(np.maximum(first, middle), last)


def most_layers(scn: Scenario) -> Number:
    """Layers on the stage that holds the most of them."""
    split = plan_split(scn.model.layers, scn.plan)
    return np.maximum(np.maximum(split.first, split.middle_max), split.last)
