"""What recompute="selective" recomputes, one list for the Plan and the command line (no imports:
the CLI's option modules read it at import time and must stay light).

"attention": Megatron-LM's attention core (Korthikanti et al. 2022); "op": torchtitan's op-level
policy; the rest JAX remat policies, MaxText's and Praxis's names (`physics/remat.py`)."""

SELECTIVE_POLICIES = (
    "attention",
    "op",
    "minimal_flash",
    "minimal",
    "save_dot_with_context_except_mlp",
    "save_dot_except_mlpwi",
    "save_dot_except_mlp",
    "save_qkv_proj",
    "save_out_proj",
    "save_nothing",
)

# Megatron-Core's `--recompute-modules` (megatron/core/transformer/transformer_config.py,
# `recompute_modules`, core_v0.15+: "choices: core_attn, moe_act, layernorm, mla_up_proj, mlp, moe,
# shared_experts; default core_attn"): what recompute="selective" redoes under the Megatron stack
# when given (`engines.recompute_costs.module_recompute_s`, `engines.moe.experts_cost`).
RECOMPUTE_MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts")

# Megatron-Core's CUDA graph scopes (megatron/core/transformer/enums.py `CudaGraphScope`, core_v0.15+;
# `Plan.cuda_graph_scope`, priced by `physics.stack.graphed_layer_kernels`): full_iteration (--cuda-graph-impl local)
# replays the whole forward and backward of a step from one graph; the others (--cuda-graph-impl transformer_engine,
# TE's make_graphed_callables) one block of every layer: attn the attention block, mlp a dense layer's MLP, moe_router
# the router, moe_preprocess the dispatcher's preprocessing (with moe_router). "moe" (whole drop-and-pad MoE layers)
# is not offered: token dropping is not modelled.
CUDA_GRAPH_SCOPES = ("full_iteration", "attn", "mlp", "moe_router", "moe_preprocess")
