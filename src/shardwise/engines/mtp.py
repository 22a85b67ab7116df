"""Multi-token prediction in training (DeepSeek-V3, Liu et al. 2024 Sec. 2.2; Megatron-Core
`--mtp-num-layers`, megatron/core/transformer/multi_token_prediction.py, core_v0.14+).

`Plan.mtp_layers` = D sequential modules run on the last pipeline stage after the decoder, module
k predicting the token k + 1 ahead. Per micro-batch, module k costs what these cost in the main
model (`MultiTokenPredictionLayer.forward`):

- the embedding of the input shifted by k (the shared embedding: its lookup and TP reduction);
- two RMSNorms (enorm, hnorm) of the embeddings and of the previous hidden states, b s h / t each
  under sequence parallelism, read and written once;
- eh_proj: their concatenation projected from 2h to h, a column-parallel linear (T x 2h by
  2h x h/t), in the plan's precision (a Transformer Engine linear);
- one transformer layer built from the decoder's layer spec (`get_gpt_mtp_block_spec`): an MoE
  layer for a mixture of experts (DeepSeek-V3's MTP module), else a dense one;
- the shared output layer and its loss (`engines.stage_ends.head_cost`), scaled in the loss by
  mtp_loss_scaling_factor (no time).

The stage that holds them is the slowest one where they outweigh its fewer layers, which is why
Megatron-Bridge's DeepSeek-V3 layouts give the last stage fewer decoder layers
(recipes/deepseek/deepseek_v3.py `set_deepseek_v3_pipeline_model_parallel_layout`).
Their weights (one more layer and eh_proj on the last stage) are not added to its memory.
"""

from __future__ import annotations

import numpy as np

from shardwise.engines.costs import FIELDS, StageCost
from shardwise.engines.stage_ends import embedding_cost, head_cost
from shardwise.engines.tp_overlap import TpComm
from shardwise.physics.compute import linear_times, memory_s
from shardwise.physics.flops import gemm
from shardwise.physics.microbatch import plan_accumulate_bytes
from shardwise.specs import Scenario

# enorm and hnorm (multi_token_prediction.py `MultiTokenPredictionLayer`): one kernel each.
MTP_NORMS = 2


def mtp_module_cost(scn: Scenario, comm: TpComm, layer: StageCost) -> StageCost:
    """One multi-token-prediction module per micro-batch on `scn` as one CP rank sees it, `layer`
    the cost of its transformer layer (module docstring)."""
    model, plan, gpu = scn.model, scn.plan, scn.cluster.gpu
    e, h, t = plan.bytes_per_element, model.hidden, plan.tp
    tokens = plan.micro_batch * model.seq_len
    sp = np.asarray(plan.sequence_parallel, dtype=bool)
    rank_tokens = tokens / np.where(sp, np.asarray(t, dtype=float), 1.0)
    norms = memory_s(MTP_NORMS * 2 * e * rank_tokens * h, gpu, kernels=MTP_NORMS)
    add = plan_accumulate_bytes(plan)
    proj = linear_times(gemm(tokens, h / t, 2 * h, e), gpu, plan.precision, plan.grad_accumulation_fusion, add)
    own = StageCost(
        compute_forward_s=norms + proj.forward_s,
        compute_backward_s=2 * norms + proj.input_grad_s + proj.weight_grad_s,
        tp_forward_s=np.where(sp, comm.all_gather, 0.0),  # the gather before the column-parallel eh_proj
        tp_backward_s=np.where(sp, comm.reduce_scatter, comm.all_reduce),
        weight_grad_s=proj.weight_grad_s,
    )
    parts = (own, layer, embedding_cost(scn, comm), head_cost(scn, comm))
    return StageCost(*(sum(getattr(c, f) for c in parts) for f in FIELDS))


def with_mtp(head: StageCost, scn: Scenario, comm: TpComm, layer: StageCost) -> StageCost:
    """The last stage's output layer with `Plan.mtp_layers` modules after it (`head` where there
    are none); `layer` the cost of one of the decoder's layers of the kind the modules hold."""
    d = np.asarray(scn.plan.mtp_layers, dtype=float)
    if not np.any(d > 0):
        return head
    module = mtp_module_cost(scn, comm, layer)
    return StageCost(*(getattr(head, f) + d * getattr(module, f) for f in FIELDS))
