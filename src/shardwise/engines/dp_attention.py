"""Serving a mixture of experts with data-parallel attention and expert parallelism, as vLLM
(`--data-parallel-size D --enable-expert-parallel`), SGLang (`--enable-dp-attention --dp D
--ep-size N`) and TensorRT-LLM (`enable_attention_dp`) run DeepSeek and Mixtral.

Two layouts of a replica's experts, one rule (`specs.expert_rules.serving_expert_rule`):

- **TP attention** (ep x etp = tp): every GPU of a replica holds every token after attention; each
  runs its own experts on the copies routed to them and the outputs are all-reduced over the TP
  group (`engines.moe.experts_cost`, unsharded).
- **DP attention** (ep x etp = tp x dp, ep > tp): attention and the shared experts run on dp
  groups of tp GPUs, each group with its own sequences and KV cache (a GPU's cache holds only
  its group's sequences) -- SGLang splits its dense MLPs, shared experts and output layer over all
  tp x dp GPUs instead (not in its Mixtral / Grok files: refused), and vLLM at tp > 1 keeps its shared
  experts whole where the model file runs its sequence-parallel MoE (`engines.dp_dense`); the
  routed experts are spread over all the dp x tp GPUs of a pipeline
  stage (E / ep experts per GPU, 1 / etp of each). Per MoE layer, each GPU of a group takes 1 / tp
  of the group's tokens (the attention output is reduce-scattered over the group instead of
  all-reduced), sends each token copy to the GPU holding its expert (all-to-all dispatch over
  the EP group), runs its experts, returns the outputs (all-to-all combine) and the group
  all-gathers them before the next attention: SGLang's `dp_scatter` / `dp_gather` around the MoE
  with attention TP > 1. That is what Megatron-Core's sequence parallelism does around a
  mixture of experts, so the layer is priced as one with sequence parallelism
  (`engines.costs.layer_cost`, `engines.moe.experts_cost`, sharded): no new physics, only the
  layout. With tp = 1 (DeepSeek's usual layout) there is no TP collective at all. How the tokens
  reach the experts is the engine's (`EnginePreset.moe_dispatcher`): TensorRT-LLM's all-to-all,
  vLLM's allgather_reducescatter, SGLang's dp_gather and reduce-scatter (`physics.moe_dispatch`).

The dp groups step in lockstep through the MoE layers (a group with no work runs a dummy batch;
vLLM's `DPEngineCoreProc`, SGLang's `prepare_mlp_sync_batch_raw`): the slowest group sets every
pass, and under SGLang one group's prompt tokens put every group on the all-reduce path without CUDA
graphs. The in-flight simulator runs the groups together so (`engines.inflight_lockstep`, vLLM and
SGLang); elsewhere (the static estimate, TensorRT-LLM) the groups are alike and in phase.
"""

from __future__ import annotations

import numpy as np

from shardwise.specs import Plan
from shardwise.specs._checks import Number
from shardwise.specs.rules import raise_first, serving_expert_rule, serving_expert_tp


def dp_attention(plan: Plan) -> Number:
    """Where the experts spread beyond a replica's TP group (ep x etp > tp): data-parallel attention."""
    return np.asarray(plan.ep) * np.asarray(plan.expert_tp) > np.asarray(plan.tp)


def launch_tp(plan: Plan) -> Number:
    """The tensor-parallel size the engine is launched with: the plan's tp, or under data-parallel
    attention the whole expert group's, ep x etp (TensorRT-LLM runs attention DP as `--tp 8 --ep 8`
    with `enable_attention_dp`, its world's tp_size 8 where each attention rank holds tp = 1 of the
    plan). trtllm-bench sizes its engine (`max_batch_size`, `max_num_tokens`) with that size
    (tensorrt_llm/bench/benchmark/utils/general.py `get_settings` passes `params.get("tp")` to
    `get_benchmark_engine_settings`, NVIDIA/TensorRT-LLM@0171265e; `engines.trtllm_buffers`)."""
    return np.where(dp_attention(plan), np.asarray(plan.ep) * np.asarray(plan.expert_tp), np.asarray(plan.tp))


def serving_expert_layout(plan: Plan) -> Plan:
    """`plan` with its serving expert layout: etp derived where unset (`serving_expert_tp`), the rule
    checked, and sequence parallelism on where attention is data-parallel (module docstring)."""
    ep = np.asarray(plan.ep)
    if not np.any(ep > 1):
        return plan.with_(sequence_parallel=False)
    etp = serving_expert_tp(plan.tp, ep, plan.etp, plan.dp)
    raise_first([serving_expert_rule(plan.tp, ep, etp, plan.dp)])
    plan = plan.with_(etp=etp)
    return plan.with_(sequence_parallel=dp_attention(plan))
