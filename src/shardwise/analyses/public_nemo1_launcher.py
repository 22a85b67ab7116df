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

Which file a row ran, one rule for every row: a launcher config whose layout (GPUs, MBS, GBS, TP, PP,
VP) matches the row's exactly is what ran (`MATCHED`; their precision too); else the tag's YAML and
script, each key kept unless the row overrides the layout it belongs to. The userbuffers TP overlap
(`ub_tp_comm_overlap`, its `tp_overlap` config named by TP, MBS and sequence length) belongs to (TP,
MBS, sequence length); the interleaved schedule's `overlap_p2p_comm`/`batch_p2p_comm` to the schedule
(VP > 1); the optimizer's dtypes and the recomputation to no layout (kept). GPT-3 175B on 512 GPUs (64
nodes, MBS 2, GBS 2048, TP 4, PP 8, VP 6, FP8) matches launcher main's gpt3/175b_mlperf.yaml at
121c975d (2024-07-18; not in the tag): `ub_tp_comm_overlap` True, `grad_sync_dtype` bf16,
`overlap_p2p_comm` True, dropout 0.0 (7316a8d9, 2024-09-10, after the summary's 2024-09-09, added
`fp8_params`). GPT-3 175B on 128 GPUs (16 nodes, MBS 1, GBS 256, VP 6) matches no file: the script at
the tag and on main through 2024-09 sets VP 12, main's 175b.yaml (VP 6 from 77b69bba) 128 nodes; the
tag's 175b.yaml keeps `ub_tp_comm_overlap` False (its ub_cfg_h100_h12288_tp4_mbs1_seqlen2048 is the
row's TP, MBS and length; 121c975d retuned that config, which hints someone ran it with the overlap,
but no file of the row's layout turns it on). Nemotron-4 340B (TP 8, PP 8, VP 12, MBS 1 on 128 GPUs)
matches no file; nemotron_340b.yaml (TP 8, MBS 1, 4096: the row's) keeps its `ub_tp_comm_overlap` False
and, the row's VP > 1 like the YAML's, `overlap_p2p_comm` False.

Which launcher ran the summary is not settled. Its Llama 2 70B pre-training VP 20 is the tag's, but its
Llama 3 70B VP 5 and GPT-3 175B VP 6 are main's, not the tag's, and its final numbers came with PR
#10253 (2024-09-09), after main's 04b8d098 (2024-08-29) removed `NVTE_FUSED_ATTN: 0`; its first 24.07
version (4c73f77670, 2024-08-14) is within 4.5% of the final one row by row with no pattern in the
attention-heavy rows, so either both ran FlashAttention-2 or the FlashAttention-2/cuDNN gap is smaller
than priced: that check cannot tell which launcher ran the summary (`public_attention.TE_FLASH2_FACTS`
keeps FlashAttention-2 for all but GPT-3 175B).
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
    `virtual_pipeline_model_parallel_size` (0: the row states it), `cross_entropy_loss_fusion` and
    `packed_sequence` (the PEFT scripts' `peft.model.data.train_ds.packed_sequence=true`)."""

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
    packed_sequence: bool = False


_T = "launcher_scripts/conf/training/"
_X = "examples/training/"
_P = "examples/peft/llama/h100/"
_SFT = "launcher_scripts/conf/peft/llama/sft.yaml"
_BF16_GRADS = {"grad_sync_dtype": "bf16"}  # the script's `+training.model.optim.grad_sync_dtype=bf16`
_SHORT = {"amax_history": (1, "most_recent")}  # llama2_13b.yaml, llama2_70b.yaml
# sft.yaml: distributed_fused_adam, dtype bf16, grad_sync_dtype bf16, fp8_amax_history_len 512, vp null,
# sequence_parallel and ub_tp_comm_overlap False; every PEFT script sets `++peft.model.fp8_params=true`
# and `peft.model.data.train_ds.packed_sequence=true` (NeMo r2.0.0rc1 megatron_gpt_model.py:1246-1270:
# PackedSeqParams, qkv_format "thd": attention within each document)
_SFT_KEYS = {
    "optim_dtype": "bf16",
    "grad_sync_dtype": "bf16",
    "fp8_params": True,
    "amax_history": (512, "max"),
    "packed_sequence": True,
}
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
    # 175b.yaml: ub_tp_comm_overlap False (its tp_overlap default names a userbuffers config it does not
    # turn on); the 128-GPU row (module docstring's rule; the 512-GPU one: `MATCHED`)
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
    # batch_p2p_comm True, activations_checkpoint_granularity selective, ub_tp_comm_overlap False. The
    # row overrides the YAML's pipeline layout (pp 12, vp 8, GBS 2304 -> pp 8, vp 12, GBS 32) and
    # precision (bf16: "fp8 training is currently not supported"), not its TP, MBS or length: by the
    # module docstring's rule every key here is the YAML's. (NVIDIA's FP8 benchmark of the row's layout
    # a container later, dgxc-benchmarking nemotron/ at 35a9aecc8d, nemo:24.09, turns the overlap on:
    # another run, not this one.)
    ("nemotron4-340b", "pretrain"): LauncherRecipe(
        _T + "nemotron/nemotron_340b.yaml",
        "",
        optim_dtype="bf16",
        grad_sync_dtype="bf16",
        sequence_parallel=True,
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

# Launcher configs whose layout matches a row's exactly (module docstring's rule): (model, GPUs, MBS,
# GBS, TP, PP, VP) -> the recipe. launcher main's gpt3/175b_mlperf.yaml at 121c975d (2024-07-18):
# distributed_fused_adam with grad_sync_dtype bf16, sequence_parallel, ub_tp_comm_overlap True
# (ub_cfg_h100_h12288_tp4_mbs2_seqlen2048), overlap_p2p_comm True, no recomputation. Its
# `env_vars: NVTE_FUSED_ATTN: 1` sits in the training group, which stages.py `get_env_vars` (the
# top-level `env_vars` alone) does not export: the preset's cuDNN attention that GPT-3 175B keeps
# (`public_attention`) rests on the 16-node script's `+env_vars.NVTE_FUSED_ATTN=1` alone, uncertain.
MATCHED: dict[tuple[str, int, int, int, int, int, int], LauncherRecipe] = {
    ("gpt3-175b", 512, 2, 2048, 4, 8, 6): LauncherRecipe(
        _T + "gpt3/175b_mlperf.yaml (launcher main 121c975d)",
        "",
        **_BF16_GRADS,
        ub_tp_comm_overlap=True,
        sequence_parallel=True,
        overlap_p2p=True,
    ),
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
# (no ZeRO: the adapters' few million parameters' state and gradients, negligible beside the step),
# the GPT-3 YAMLs' `attention_dropout` and `hidden_dropout` 0.1 (5b, 20b, 175b at the tag; 0.0 in
# 175b_mlperf.yaml): the model prices dropout's masks in memory (`ModelSpec.dropout`, on for GPT-3),
# not its kernels' time, and PEFT's packs padded to 4096 tokens (NeMo's packing fills each pack up to
# `packed_sequence_size` and pads the rest; whether the summary's tokens/s counts the pads is not
# stated: priced as 4096 tokens of documents).
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
    "attention_dropout",
    "hidden_dropout",
    "packed_sequence padding",
)


def recipe(row: dict[str, str]) -> LauncherRecipe | None:
    """The launcher recipe a NeMo 24.07 performance-summary row ran (`RECIPES`), else None."""
    if not NEMO_2407.covers(row):
        return None
    model = row.get("model") or ""
    layout = tuple(int(row.get(k) or 0) for k in ("num_gpus", "mbs", "gbs", "tp", "pp", "vp"))
    matched = MATCHED.get((model, *layout))  # type: ignore[arg-type]
    return matched or RECIPES.get((model, row.get("workload") or ""))


def optimizer_state(found: LauncherRecipe) -> str:
    """`Plan.optimizer_state` of a recipe's Apex DistributedFusedAdam (module docstring); "" (the
    stack's fp32) for `fused_adam`, which steps the LoRA adapters alone."""
    if found.optimizer != "distributed_fused_adam":
        return ""
    if found.optim_dtype == "bf16":  # no master (with fp8_params a bf16 one: `NOT_PRICED`)
        return "bf16"
    return "fp32" if found.fp8_params else "fp32-remainders"


def packed_document_len(row: dict[str, str]) -> int:
    """`Plan.packed_document_len` of a row whose recipe packs its data (0: not packed, or no recipe):
    SQuAD's documents in Llama 2's tokens (`public_lora.SQUAD_DOCUMENT_TOKENS_LLAMA2`)."""
    from shardwise.analyses.public_lora import SQUAD_DOCUMENT_TOKENS_LLAMA2

    found = recipe(row)
    return SQUAD_DOCUMENT_TOKENS_LLAMA2 if found and found.packed_sequence else 0


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
