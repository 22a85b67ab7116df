"""What NeMo 24.07's performance summary really ran: the NeMo 1 launcher's configuration of every row
(NVIDIA/NeMo docs/source/performance/performance_summary.md at 9c5c5e9709, NeMo 24.07 container),
read in NVIDIA/NeMo-Framework-Launcher at tag 24.07 (8325688d, the launcher the container ships at
/opt/NeMo-Framework-Launcher). Nothing here is fitted.

The launcher's examples/README.md at that tag prints the same two tables (the pre-training one without
Nemotron-4 340B, figures of an earlier container) and says the scripts beside it "run a recommended
config" for them: examples/training/{gpt,llama,nemotron}/h100/*fp8*.sh for pre-training and
examples/peft/llama/h100/{7b,13b}_1node[_lora].sh, 70b_2node.sh, 70b_1node_lora.sh for fine-tuning.
Each script names a model YAML (launcher_scripts/conf/training/<family>/<model>.yaml,
conf/peft/llama/sft.yaml) and overrides some of its keys; what the summary prints (GPUs, GBS, MBS,
TP, PP, CP, VP) overrides both. Nemotron-4 340B has no script: its YAML alone
(conf/training/nemotron/nemotron_340b.yaml). Everything else below is the YAML's key unless a
script is named.

How NeMo r2.0.0rc1 (the 24.07 container's NeMo) turns the optimizer keys into state:
nemo/collections/nlp/models/language_modeling/megatron_base_model.py `setup_optimization` hands Apex's
DistributedFusedAdam `dtype` (default fp32) and `param_sync_dtype` = the model's bf16 (megatron_amp_O2
True everywhere here); with fp32 state and bf16 weights `store_param_remainders` (the master's 16 low
bits: `Plan.optimizer_state` "fp32-remainders", 10 B), with a bf16 state no master ("bf16", 4 B),
and with `fp8_params` `store_params` (a master shard in the optimizer's dtype beside fp8 weights).
Apex keeps the contiguous gradient buffer in `grad_sync_dtype` (default: `dtype`) and reduces it in
that dtype (`Plan.grad_reduce_bf16` where bf16). megatron_base_model.py (line 998) turns
`ub_tp_comm_overlap` off where `sequence_parallel` is off.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardwise.analyses.public_memory_recipes import RecipeFact

LAUNCHER_TAG = "NVIDIA/NeMo-Framework-Launcher@24.07 (8325688d)"
NEMO_2407 = RecipeFact("GitHub NVIDIA/NeMo docs/source/performance/performance_summary.md", version="24.07")


@dataclass(frozen=True)
class LauncherRecipe:
    """One row's launcher configuration (module docstring): the files, the optimizer (Apex
    `distributed_fused_adam`, or `fused_adam` on one rank's whole state) with its `dtype` and
    `grad_sync_dtype`, `fp8_params`, the FP8 amax history (`fp8_amax_history_len`,
    `fp8_amax_compute_algo`), `ub_tp_comm_overlap` and `sequence_parallel` (as the YAML and script
    set them; NeMo turns the overlap off without sequence parallelism), `overlap_p2p_comm` (the
    interleaved schedule's), `activations_checkpoint_granularity` ("" none), the script's
    `virtual_pipeline_model_parallel_size` (0: the row states it) and `cross_entropy_loss_fusion`."""

    yaml: str
    script: str
    optimizer: str = "distributed_fused_adam"
    optim_dtype: str = "fp32"
    grad_sync_dtype: str = "fp32"
    fp8_params: bool = False
    amax_history: tuple[int, str] = (1024, "max")
    ub_tp_comm_overlap: bool = False
    sequence_parallel: bool = False
    overlap_p2p: bool = False
    recompute: str = ""
    vp: int = 0
    cross_entropy_fusion: bool = False


_T = "launcher_scripts/conf/training/"
_X = "examples/training/"
_P = "examples/peft/llama/h100/"
_SFT = "launcher_scripts/conf/peft/llama/sft.yaml"
_BF16_GRADS = {"grad_sync_dtype": "bf16"}  # the script's `+training.model.optim.grad_sync_dtype=bf16`
_SHORT = {"amax_history": (1, "most_recent")}  # llama2_13b.yaml, llama2_70b.yaml
# sft.yaml: distributed_fused_adam, dtype bf16, grad_sync_dtype bf16, fp8_amax_history_len 512, vp null,
# sequence_parallel and ub_tp_comm_overlap False; every PEFT script sets `++peft.model.fp8_params=true`
_SFT_KEYS = {"optim_dtype": "bf16", "grad_sync_dtype": "bf16", "fp8_params": True, "amax_history": (512, "max")}
# the LoRA scripts: `peft.model.optim.name=fused_adam` and remove dtype, grad_sync_dtype and the overlaps
_LORA_KEYS = {**_SFT_KEYS, "optimizer": "fused_adam", "optim_dtype": "fp32", "grad_sync_dtype": "fp32"}

# (model, workload) -> the launcher recipe its row ran
RECIPES: dict[tuple[str, str], LauncherRecipe] = {
    ("gpt3-5b", "pretrain"): LauncherRecipe(_T + "gpt3/5b.yaml", _X + "gpt/h100/5b_fp8_8node.sh", **_BF16_GRADS),
    ("gpt3-20b", "pretrain"): LauncherRecipe(
        _T + "gpt3/20b.yaml",
        _X + "gpt/h100/20b_fp8_8node.sh",
        **_BF16_GRADS,
        ub_tp_comm_overlap=True,
        sequence_parallel=True,
    ),
    # 175b.yaml: ub_tp_comm_overlap False (its tp_overlap default names a userbuffers config it does not turn on)
    ("gpt3-175b", "pretrain"): LauncherRecipe(
        _T + "gpt3/175b.yaml",
        _X + "gpt/h100/175b_fp8_16node.sh",
        **_BF16_GRADS,
        sequence_parallel=True,
        overlap_p2p=True,
    ),
    ("llama2-7b", "pretrain"): LauncherRecipe(
        _T + "llama/llama2_7b.yaml", _X + "llama/h100/llama2_7b_fp8.sh", **_BF16_GRADS
    ),
    ("llama2-13b", "pretrain"): LauncherRecipe(
        _T + "llama/llama2_13b.yaml", _X + "llama/h100/llama2_13b_fp8.sh", **_BF16_GRADS, **_SHORT, overlap_p2p=True
    ),
    ("llama2-70b", "pretrain"): LauncherRecipe(
        _T + "llama/llama2_70b.yaml",
        _X + "llama/h100/llama2_70b_fp8.sh",
        **_BF16_GRADS,
        **_SHORT,
        ub_tp_comm_overlap=True,
        sequence_parallel=True,
        overlap_p2p=True,
    ),
    ("llama3-8b", "pretrain"): LauncherRecipe(
        _T + "llama/llama3_8b.yaml", _X + "llama/h100/llama3_8b_fp8.sh", **_BF16_GRADS, cross_entropy_fusion=True
    ),
    ("llama3-70b", "pretrain"): LauncherRecipe(
        _T + "llama/llama3_70b.yaml",
        _X + "llama/h100/llama3_70b_fp8.sh",
        **_BF16_GRADS,
        ub_tp_comm_overlap=True,
        sequence_parallel=True,
        overlap_p2p=True,
        cross_entropy_fusion=True,
    ),
    # nemotron_{8b,22b}.yaml set no grad_sync_dtype and neither do their scripts: fp32
    ("nemotron-8b", "pretrain"): LauncherRecipe(
        _T + "nemotron/nemotron_8b.yaml",
        _X + "nemotron/h100/nemotron_8b_fp8.sh",
        ub_tp_comm_overlap=True,
        sequence_parallel=True,
        cross_entropy_fusion=True,
    ),
    ("nemotron-22b", "pretrain"): LauncherRecipe(
        _T + "nemotron/nemotron_22b.yaml",
        _X + "nemotron/h100/nemotron_22b_fp8.sh",
        ub_tp_comm_overlap=True,
        sequence_parallel=True,
        overlap_p2p=True,
        cross_entropy_fusion=True,
    ),
    # nemotron_340b.yaml (no script): dtype bf16, grad_sync_dtype bf16, overlap_p2p_comm False with
    # batch_p2p_comm True, activations_checkpoint_granularity selective. The row overrides the YAML's
    # layout (pp 12, vp 8, GBS 2304) and precision (bf16: "fp8 training is currently not supported"),
    # so which other keys it overrode is not known. NVIDIA's FP8 benchmark of the same layout (tp 8,
    # pp 8, vp 12) a container later, dgxc-benchmarking nemotron/ at 35a9aecc8d (nemo:24.09), keeps
    # this YAML's selective recomputation and p2p settings (nemotron4-340b-synth.yaml) but turns the
    # YAML's `ub_tp_comm_overlap: False` on (configure.sh `model.ub_tp_comm_overlap=True`): the
    # overlap is left at the stack's (on) as not known.
    ("nemotron4-340b", "pretrain"): LauncherRecipe(
        _T + "nemotron/nemotron_340b.yaml",
        "",
        optim_dtype="bf16",
        grad_sync_dtype="bf16",
        sequence_parallel=True,
        ub_tp_comm_overlap=True,
        recompute="selective",
    ),
    ("llama2-7b", "sft"): LauncherRecipe(_SFT, _P + "7b_1node.sh", **_SFT_KEYS),
    # 13b_1node.sh: pp 4, virtual_pipeline_model_parallel_size 10, overlap_p2p_comm true, batch_p2p_comm false
    ("llama2-13b", "sft"): LauncherRecipe(_SFT, _P + "13b_1node.sh", **_SFT_KEYS, overlap_p2p=True, vp=10),
    # 70b_2node.sh: tp 4, pp 4, vp 20, sequence_parallel true, ub_tp_comm_overlap true, overlap_p2p_comm true
    ("llama2-70b", "sft"): LauncherRecipe(
        _SFT,
        _P + "70b_2node.sh",
        **_SFT_KEYS,
        ub_tp_comm_overlap=True,
        sequence_parallel=True,
        overlap_p2p=True,
        vp=20,
    ),
    ("llama2-7b", "lora"): LauncherRecipe(_SFT, _P + "7b_1node_lora.sh", **_LORA_KEYS),
    ("llama2-13b", "lora"): LauncherRecipe(_SFT, _P + "13b_1node_lora.sh", **_LORA_KEYS),
    # 70b_1node_lora.sh: tp 2, pp 4, no vp (sft.yaml's null: 1), ub_tp_comm_overlap true without
    # sequence_parallel (sft.yaml False), which NeMo turns off
    ("llama2-70b", "lora"): LauncherRecipe(_SFT, _P + "70b_1node_lora.sh", **_LORA_KEYS, ub_tp_comm_overlap=True, vp=1),
}

# What the model cannot price of these recipes (they stay at the stack's): `fp8_params` (the PEFT
# scripts' fp8 weights: 1 B a weight, and parameter all-gathers of 1 B; priced as bf16 weights, the
# optimizer state as "bf16": 2 + 4 / dp bytes a parameter against the run's 1 + 6 / dp), the FP8 amax
# history (1024 "max", Llama 2 13B / 70B 1 "most_recent", PEFT 512 "max") and the launcher's
# env_vars NVTE_DP_AMAX_REDUCE_INTERVAL=0 and NVTE_ASYNC_AMAX_REDUCTION=1 (launcher_scripts/conf/
# config.yaml), `cross_entropy_loss_fusion` (Megatron-Core's jit-fused vocab-parallel loss, which saves
# the same fp32 softmax as the unfused one: megatron/core/fusions/fused_cross_entropy.py at the
# container's MCORE_TAG 338af51452, NeMo r2.0.0rc1 Dockerfile), Nemotron's unfused bias/activation
# (`bias_activation_fusion: false`, squared-ReLU), `gc_interval`, and the LoRA scripts' `fused_adam`
# (no ZeRO: the adapters' few million parameters' state and gradients, negligible beside the step).
NOT_PRICED = (
    "fp8_params",
    "fp8_amax_history_len",
    "fp8_amax_compute_algo",
    "NVTE_DP_AMAX_REDUCE_INTERVAL",
    "NVTE_ASYNC_AMAX_REDUCTION",
    "cross_entropy_loss_fusion",
    "bias_activation_fusion",
    "gc_interval",
    "optim.name fused_adam (LoRA)",
)


def recipe(row: dict[str, str]) -> LauncherRecipe | None:
    """The launcher recipe a NeMo 24.07 performance-summary row ran (`RECIPES`), else None."""
    if not NEMO_2407.covers(row):
        return None
    return RECIPES.get((row.get("model") or "", row.get("workload") or ""))


def optimizer_state(found: LauncherRecipe) -> str:
    """`Plan.optimizer_state` of a recipe's Apex DistributedFusedAdam (module docstring); "" (the
    stack's fp32) for `fused_adam`, which steps the LoRA adapters alone."""
    if found.optimizer != "distributed_fused_adam":
        return ""
    if found.optim_dtype == "bf16":  # no master (with fp8_params a bf16 one: `NOT_PRICED`)
        return "bf16"
    return "fp32" if found.fp8_params else "fp32-remainders"


def virtual_stages(row: dict[str, str]) -> int:
    """The virtual pipeline stages the row's script sets where the summary leaves them out (0: none)."""
    found = recipe(row)
    return found.vp if found else 0


def plan_settings(row: dict[str, str]) -> dict[str, object]:
    """The request settings the row's launcher recipe sets (empty for other rows): NVLS off, the
    optimizer's state and gradient dtype, sequence parallelism and the userbuffers TP overlap where tp > 1, the
    interleaved schedule's p2p overlap, and the YAML's recomputation."""
    found = recipe(row)
    if found is None:
        return {}
    # launcher_scripts/conf/config.yaml env_vars `NCCL_NVLS_ENABLE: 0` ("for memory saving", 8f2acedd,
    # 2023-09-12; at the tag and on main through 2024): NCCL reduces on the GPUs, not in the NVSwitch
    out: dict[str, object] = {"nvls": "off"}
    state = optimizer_state(found)
    if state:
        out["optimizer_state"] = state
    if found.optimizer == "distributed_fused_adam":
        out["grad_reduce_bf16"] = found.grad_sync_dtype == "bf16"
    if int(row.get("tp") or 1) > 1:
        out["sequence_parallel"] = found.sequence_parallel
        out["tp_comm_overlap"] = found.ub_tp_comm_overlap and found.sequence_parallel
    vp = int(row.get("vp") or 0) or found.vp
    if int(row.get("pp") or 1) > 1 and vp > 1:
        out["overlap_p2p"] = found.overlap_p2p
    if found.recompute:
        out["recompute"] = found.recompute
    return out
