"""What the performance recipes of Megatron-Bridge's published dense runs (Llama 3 8B / 70B, Llama
3.1 405B) set beyond the layout that their tables do not print and the framework preset does not
assume: CUDA graphs (`Plan.cuda_graph_scope`), the TP communication overlap and the overlapped
parameter all-gather they leave off (`Plan.tp_comm_overlap`, `Plan.overlap_param_gather`), and the
whole-layer recomputation of a recipe (`Plan.recompute_layers`), each read in
scripts/performance/configs/llama{,3,31}/ at the Bridge tag of the row's NeMo container (docs/
versions1.json: 25.11 = v0.2.0, 26.02 = v0.3.0, 26.02.01 = v0.3.1, 26.04 = v0.4.0, 26.04.01 =
v0.4.2, 26.06 = v0.5.0, 26.06.01 = v0.5.1; 25.09 = v0.1.0rc3 kept its recipes in YAML and is not
read), for the WorkloadBaseConfig whose layout (tp, pp, vp, cp, mbs, gbs) is the row's; and NeMo
AutoModel's one dense pretrain benchmark config that turns its deferred gradient sync off.
Nothing here is fitted.

What the same recipes set that the model already reads elsewhere, or that does not change its
prediction, for the record: `apply_rope_fusion` and `cross_entropy_fusion_impl="te"` for every
recipe (utils/helpers.py, later utils/overrides.py `set_common_perf_overrides`; the preset's fused
kernels, `public_memory_recipes.loss_kernel`), `first_last_layers_bf16=False` under FP8 current
scaling (`public_precision`), grad_reduce_in_fp32=False (`public_precision.bf16_gradients`),
Megatron-FSDP and CPU offloading (the rows' `fsdp` column, `public_memory_recipes.offloaded_layers`),
`manual_gc` every 100 steps (the base recipes; a collection every 100 steps, not priced),
account_for_embedding/loss_in_pipeline_split for 405B (the automatic split of `specs.stages`
already puts one layer less on the end stages), PYTORCH_CUDA_ALLOC_CONF (`public_memory_recipes`).
"""

from __future__ import annotations

from dataclasses import dataclass

from shardwise.analyses.public_memory_recipes import MEGATRON_BRIDGE, RecipeFact

BLACKWELL = ("dgx-b200", "gb200-nvl72", "gb300-nvl72")
AUTOMODEL = "GitHub NVIDIA-NeMo/Automodel docs/performance-summary"


@dataclass(frozen=True)
class DenseFact:
    """Plan settings (`settings`, (name, value) pairs) that a recipe states for the rows `fact`
    covers whose `workload` column is one of `workloads`."""

    fact: RecipeFact
    settings: tuple[tuple[str, object], ...]
    workloads: tuple[str, ...] = ("pretrain",)

    def covers(self, row: dict[str, str]) -> bool:
        return row.get("workload", "pretrain") in self.workloads and self.fact.covers(row)


FACTS = (
    # v0.2.0 scripts/performance/configs/llama3/workload_base_configs.py: LLAMA3_8B_{B200,GB200,GB300}
    # _FP8_CS_BASE_CONFIG (FP8_MX = FP8_CS) cuda_graph_impl="local", cuda_graph_scope="full_iteration"
    # (utils/helpers.py set_cuda_graph_overrides): the whole step replays from one graph. GB300's
    # config has micro-batch 4 where its rows state 2: not the rows' layout, not listed
    DenseFact(
        RecipeFact(MEGATRON_BRIDGE, "llama3-8b", ("dgx-b200", "gb200-nvl72"), ("fp8", "mxfp8"), "25.11"),
        (("cuda_graph_scope", "full_iteration"),),
    ),
    # v0.2.0 LLAMA3_8B_H100_FP8_CS_BASE_CONFIG recompute_num_layers=5, which set_recompute_overrides
    # makes recompute_granularity="full", recompute_method="block": the first 5 layers whole
    DenseFact(
        RecipeFact(MEGATRON_BRIDGE, "llama3-8b", ("dgx-h100",), ("fp8",), "25.11"),
        (("recompute", "none"), ("recompute_layers", 5)),
    ),
    # v0.2.0 llama3/llama3_llm_pretrain.py and llama31/llama31_llm_pretrain.py, the 70B and 405B
    # B200 / GB200 / GB300 configs: `if precision == "fp8_mx": ... overlap_param_gather = False`
    # ("keeping this enabled causes NaN grad norm"); gone at v0.3.0
    DenseFact(
        RecipeFact(MEGATRON_BRIDGE, "llama3-405b", BLACKWELL, ("mxfp8",), "25.11"), (("overlap_param_gather", False),)
    ),
    DenseFact(
        RecipeFact(MEGATRON_BRIDGE, "llama3-70b", BLACKWELL, ("mxfp8",), "25.11"), (("overlap_param_gather", False),)
    ),
    # every tag v0.2.0 - v0.5.1, every 70B and 405B config: `cfg.comm_overlap.tp_comm_overlap = False
    # if precision == "nvfp4"` (no userbuffers TP overlap under NVFP4)
    DenseFact(RecipeFact(MEGATRON_BRIDGE, "llama3-70b", precisions=("nvfp4",)), (("tp_comm_overlap", False),)),
    DenseFact(RecipeFact(MEGATRON_BRIDGE, "llama3-405b", precisions=("nvfp4",)), (("tp_comm_overlap", False),)),
    # v0.4.2 and v0.5.x llama31_llm_pretrain.py llama31_405b_pretrain_config_gb200: NVFP4 config
    # variant v2 (the 256-GPU, GBS 1536 layout of the rows) calls disable_param_gather_overlap
    # (Bridge issue #3714, peak memory); not at v0.4.0
    *(
        DenseFact(
            RecipeFact(MEGATRON_BRIDGE, "llama3-405b", ("gb200-nvl72",), ("nvfp4",), v),
            (("overlap_param_gather", False),),
        )
        for v in ("26.04.01", "26.06", "26.06.01")
    ),
    # v0.5.0 llama/llama3_workload_base_configs.py LLAMA3_70B_SFT_CONFIG_{GB300,GB200,H100}_{FP8_CS,
    # FP8_MX}_V1: cuda_graph_impl="transformer_engine", cuda_graph_scope="mlp" (the rows' layouts)
    DenseFact(RecipeFact(MEGATRON_BRIDGE, "llama3-70b", version="26.06"), (("cuda_graph_scope", "mlp"),), ("sft",)),
    # NeMo AutoModel's Llama 3.1 70B pretrain benchmark on 64 H100 (tp1 cp2 pp1 dp32, gbs 128: four
    # micro-batches), examples/llm_pretrain/llama3_1_70b_pretrain_benchmark_8nodes_tp1cp2pp1{,_0410}.yaml
    # (@4663592c, @1079dfdd): `defer_fsdp_grad_sync: False   # Must be False with GA>1: True -> delayed
    # resharding -> OOM`, against the preset's last-micro-batch (the whole fp32 gradients, 280 GB a GPU)
    DenseFact(RecipeFact(AUTOMODEL, "llama3-70b", ("dgx-h100",)), (("fsdp2_grad_sync", "every-micro-batch"),)),
)


def plan_settings(row: dict[str, str]) -> dict[str, object]:
    """The Plan keyword arguments the row's dense recipe states (`FACTS`); empty for the others."""
    out: dict[str, object] = {}
    for fact in FACTS:
        if fact.covers(row):
            out.update(fact.settings)
    return out
