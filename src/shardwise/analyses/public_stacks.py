"""The public runs of stacks other than Megatron-Core: which framework preset runs each, what its
notes say about the kernels (torch.compile, the attention kernel, the checkpointing policy) and the
network between its servers.

Each rule reads what the source states (the importer's `parse_notes`, `key=value;` pairs: see
data/PUBLIC_RUNS.md); a row whose source does not state what the model needs is skipped with the
reason, never guessed. Nothing here is fitted.
"""

from __future__ import annotations

from typing import Any

from shardwise.analyses import public_dense_recipes as dense_recipes
from shardwise.analyses import public_memory_recipes as memory_recipes
from shardwise.analyses import public_nemo1_launcher as nemo1_launcher
from shardwise.analyses import public_overlap_recipes as overlap_recipes
from shardwise.analyses.public_attention import attention_settings
from shardwise.analyses.public_precision import bf16_gradients, fp8_recipe
from shardwise.analyses.public_row import PRESETS, notes
from shardwise.physics import remat

# torch.compile fuses the element-wise chains (TorchInductor): the stack's compiled variant
COMPILED = {"torchtitan": "torchtitan-compile"}
# the network between servers as the source states it: (link preset, NICs per server); each
# per-server figure is the sum over its NICs
NETWORKS = {
    "400gbps-per-node": ("roce-400g", 1.0),  # IBM's A100 cluster (fms-fsdp README): 400 Gb/s per node
    "800gbps-per-node": ("roce-400g", 2.0),  # IBM's H100 cluster: 800 Gb/s per node
    "4x100g-roce-per-node": ("eth-100g", 4.0),  # InternEvo's A100 cluster: 4 x 100 Gb/s RoCE
}
# What the JAX runs' own launch configuration states beside their tables, where the row's notes do
# not carry it (the source's repository at the row's commits): (source contains, model, precision
# or "" for any) -> (remat policy as physics.remat names it, or its stack's name; note)
JAX_LAUNCH_FACTS = (
    # NVIDIA/dgxc-benchmarking maxtext/configure.sh at 35a9aecc8d and e6afea3aea (v24.11.1, v25.01.1,
    # the Llama 2 70B tables): remat_policy=custom keeping query/key/value/qkv/out_proj (and mlpwo in
    # BF16) on the device, i.e. save_dot_except_mlpwi (BF16) and save_dot_except_mlp (FP8);
    # attention=cudnn_flash_te; ici_fsdp = 8 GPUs, dcn_fsdp = nodes up to 16, dcn_data beyond
    ("NVIDIA/dgxc-benchmarking maxtext/", "llama2-70b", "bf16", "save_dot_except_mlpwi"),
    ("NVIDIA/dgxc-benchmarking maxtext/", "llama2-70b", "fp8", "save_dot_except_mlp"),
    # maxtext/configure.sh at 8f5cbb3799 .. 85380ffe02 (v25.02 - v25.04.01, the Llama 3 70B tables):
    # POLICY="save_qkv_proj" for both precisions, max_target_length=8192
    ("NVIDIA/dgxc-benchmarking maxtext/", "llama3-70b", "", "save_qkv_proj"),
    # paxml/paxml_mod_configs.py and paxml/configure.sh at 35a9aecc8d and e6afea3aea: Synthetic5BCkpt
    # CHECKPOINT_POLICY = SAVE_DOT_ONLY, Synthetic175BCkpt SAVE_QKV_OUT_PROJ; NVTE_FUSED_ATTN=1 and
    # ENABLE_TE=1 (Transformer Engine's cuDNN fused attention); DCN mesh [dp, 1, 1] (5B) and
    # [dp, 16, 1] (175B) over the ICI mesh [1, 8, 1]: FSDP over 8 and 128 GPUs
    ("NVIDIA/dgxc-benchmarking paxml/README_5b", "gpt3-5b", "", "save_dot_only"),
    ("NVIDIA/dgxc-benchmarking paxml/README_175b", "gpt3-175b", "", "save_qkv_out_proj"),
    # google/paxml paxml/contrib/gpu/scripts_gpu/configs.py (04516ac8, 2023-10-20; 686d574, 2024-04):
    # GPT175B sets no CHECKPOINT_POLICY and inherits TransformerLmSpmdAdafactor's SAVE_NOTHING
    # (paxml/tasks/lm/model_params.py), with USE_REPEATED_LAYER = True (a StackedTransformerRepeated
    # always rematerialises: JAX-Toolbox's praxis patch, te_helper.check_checkpoint_policy)
    ("NVIDIA/JAX-Toolbox rosetta/rosetta/projects/pax/", "gpt3-175b", "", "save_nothing"),
)
# Paxml launches that turn XLA's collective pipeliner on (`Plan.scan_unpipelined` off, where the
# paxml preset has it on): dgxc-benchmarking paxml/configure.sh at 143b90dd and 35a9aecc8d sets
# --xla_gpu_enable_pipelined_all_gather=true --xla_gpu_enable_pipelined_reduce_scatter=true
PIPELINED_SCAN_SOURCES = ("NVIDIA/dgxc-benchmarking paxml/",)
# DeepSpeed configs whose ZeRO-3 buckets are not DeepSpeed's defaults (`Plan.zero3_buckets`), by source:
# FlagOpen/FlagPerf @1b5a0303 training/benchmarks/llama2_7b/deepspeed/ds_config.json (every
# llama2_7b-deepspeed case): stage3_prefetch_bucket_size 1e7, reduce_bucket_size 1e7, stage3_max_live_parameters
# and stage3_max_reuse_distance 1e9, the persistence threshold left at its default
ZERO3_CONFIGS = {
    "FlagOpen/FlagPerf training/nvidia/llama2_7b-deepspeed/": "prefetch=1e7,reduce=1e7,live=1e9,reuse=1e9",
}
# Rows of the fsdp stack priced with a preset of their own (the trainer's model code on FSDP1), by
# source: Modalities' GPT2 model at the scaling tables' commit copies q, k and v head-major for
# attention (gpt2_model.py @8a9b6617 lines 462-464, 552-573; `Plan.head_copies`). They stay rows of
# the fsdp stack (`STACK_OF_PRESET`: the leave-one-source-out tables and the spreads group them so)
OWN_PRESET_SOURCES = {"Modalities/modalities": "modalities"}
STACK_OF_PRESET = {"modalities": "fsdp"}
CHECKPOINTING_NOT_MODELLED = {
    "selective-blocks": "activation checkpointing of a fraction of whole blocks (fms-fsdp), the fraction not stated",
    "on-mode-not-stated": "activation checkpointing on, its mode not stated",
}


# (text in the source, why): sources whose published figure is not a training-step measure, or measures a
# step whose work the model cannot state
NOT_A_STEP = (
    (
        "dgxc-benchmarking hf-",
        "train_samples_per_second of a short run whose train_runtime includes the end-of-epoch evaluation and "
        "save (launch.sh: --max_steps 30/100, --evaluation_strategy epoch, --save_strategy epoch)",
    ),
    (
        "modelscope/ms-swift docs/source_en/Megatron-SWIFT/Quick-start.md",
        "packed samples of documents of unstated length (each 8,192-token sample attends within its documents; "
        "priced, it would be one causal 8,192-token sequence)",
    ),
)


def skip_reason(row: dict[str, str]) -> str:
    """Why the model cannot price this row's stack as stated (empty: it can)."""
    fw = row["framework"]
    if fw not in PRESETS:
        return f"framework {fw!r} has no --framework preset"
    why = next((why for needle, why in NOT_A_STEP if needle in row["source"]), "")
    if why:
        return why
    n = notes(row)
    if n.get("ac") in CHECKPOINTING_NOT_MODELLED and block_fraction(row) is None:
        return CHECKPOINTING_NOT_MODELLED[n["ac"]]
    if n.get("offload") == "not-stated":
        return "offload to the host possible, not stated for this run"
    if n.get("offload") == "optimizer":  # `Plan.offload_optimizer` needs the host CPU's Adam rate
        return "optimizer offload to the host (the host CPU's Adam rate is not known)"
    if n.get("offload"):
        return f"offload to the host ({n['offload']}) is not modelled"
    if n.get("network") and n["network"] not in NETWORKS:
        return f"network {n['network']!r} has no link preset"
    if n.get("zero") == "not-stated" and fw == "deepspeed":
        return "ZeRO stage not stated"
    return ""


def execution(row: dict[str, str]) -> tuple[str, dict[str, Any]]:
    """(framework preset, Plan keyword arguments that the row's notes change)."""
    fw, n = row["framework"], notes(row)
    preset = PRESETS[fw]
    own = [name for source, name in OWN_PRESET_SOURCES.items() if fw == "fsdp" and source in row["source"]]
    preset = own[0] if own else preset
    compiled = n.get("compile") == "on"
    if compiled and fw in COMPILED:
        preset = COMPILED[fw]
    out: dict[str, Any] = {}
    if compiled:
        out["eager_kernels"] = False
    if n.get("kernels") == "hf-eager":  # stated: Hugging Face layers (eager norms, rotary) on another stack's engine
        out["eager_kernels"] = True
    attention = n.get("attention", "")
    if attention == "no-flash":
        out["flash_attention"] = False
    elif attention == "cudnn-flash-te" or n.get("te") == "on":
        out["attention_kernel"] = "fused"
    elif attention in ("flash-attn-3", "flash-attn-4"):
        # FlashAttention-3 (Hopper) and FlashAttention-4 (CuTe DSL, flash-attn-4 4.0 betas), each at its own
        # published speed and ramp (`physics.attention_flash34`), not FlashAttention-2's nor cuDNN's
        out["attention_kernel"] = "flash3" if attention == "flash-attn-3" else "flash4"
        out["flash_attention"] = True
    elif attention in ("sdpa-flash2", "flash-attn", "flash-attn-1", "flash-attn-2"):
        out["attention_kernel"] = "sdpa-flash2" if attention == "sdpa-flash2" else "flash2"
        out["flash_attention"] = True  # stated: on even where the stack's default is off (megatron-deepspeed)
    if fw == "megatron-deepspeed" and n.get("zero") == "3":
        # ZeRO-3 runs on DeepSpeed's own engine, not the PipelineEngine whose gradient reduction
        # waits for the flush: stage 3 reduce-scatters during the backward pass (overlap_comm
        # defaults to true for stage 3, deepspeed/runtime/zero/config.py `overlap_comm_valid`)
        out["overlap_grad_reduce"] = True
    if n.get("partition_activations") == "on":  # stated: DeepSpeed's partitioned checkpoints (GLM-130B)
        out["partition_activations"] = True
    if n.get("ac") == "selective-op":
        out["selective_policy"] = "op"
    if n.get("sequence_parallel") == "off":  # stated: TP without sequence parallelism
        out["sequence_parallel"] = False
    elif n.get("sequence_parallel") == "on":  # stated: on where the stack's default is off (megatron-deepspeed)
        out["sequence_parallel"] = True
        if fw == "megatron-deepspeed":
            # Megatron's linears under sequence parallelism re-gather the input and reduce-scatter its
            # gradient asynchronously beside the backward GEMMs, whatever async_tensor_model_parallel_
            # allreduce (which DeepSpeed turns off) says: Megatron-DeepSpeed megatron/core/tensor_parallel/
            # layers.py LinearWithGradAccumulationAndAsyncCommunication.backward (async_op=True), @cc3a94c6
            out["async_tp_grad"] = True
    recipe = fp8_recipe(row)
    if recipe:
        out["fp8_recipe"] = recipe
    if memory_recipes.full_recompute(row):  # the recipe's activation checkpointing, every layer
        out["recompute"] = "full"
    fraction = block_fraction(row)
    if fraction is not None:  # those blocks whole, the others keep everything
        out["recompute"] = "none"
        out["recompute_layers"] = fms_checkpointed_blocks(int(row["layers"]), fraction)
    out.update(attention_settings(row, preset))  # NVTE_FUSED_ATTN=0, Paxml 23.10's no flash
    policy = jax_remat_policy(row)
    if policy:
        out["selective_policy"] = policy
    if fw == "paxml" and any(source in row["source"] for source in PIPELINED_SCAN_SOURCES):
        out["scan_unpipelined"] = False
    modules = megatron_modules(row)
    if modules:  # "selective:mla_up_proj,mlp": Megatron-Core's --recompute-modules
        out["recompute"] = "selective"
        out["recompute_modules"] = modules
    # the recipe's (Megatron's grad_reduce_in_fp32 False), or the row's own: PyTorch FSDP's MixedPrecision
    # reduce_dtype bf16 reduce-scatters the bf16 gradients in bf16 (Modalities' BF_16, running_env/env_utils.py)
    if bf16_gradients(row) or n.get("reduce_dtype") == "bf16":
        out["grad_reduce_bf16"] = True
    out.update(memory_recipes.plan_settings(row))  # the loss kernel, expandable segments
    out.update(overlap_recipes.plan_settings(row))  # the TP and parameter-gather overlaps it leaves off
    out.update(dense_recipes.plan_settings(row))  # Bridge dense recipes: CUDA graphs, overlaps, layers recomputed
    out.update(nemo1_launcher.plan_settings(row))  # NeMo 24.07's launcher: optimizer, overlaps, recomputation
    config = next((c for needle, c in ZERO3_CONFIGS.items() if needle in row["source"]), None)
    if config is not None:
        out["zero3_buckets"] = config
    layers = memory_recipes.offloaded_layers(row)
    if layers:  # the recipe's cpu_offloading_num_layers (`Plan.offload_activation_layers`)
        out["offload_activations"] = layers
    return preset, out


def megatron_modules(row: dict[str, str]) -> str:
    """The Megatron-Core recompute modules a row's `recompute` column names ("selective:moe_act,
    layernorm" -> "moe_act,layernorm"), for a Megatron stack; empty otherwise."""
    kind, _, names = (row.get("recompute") or "").partition(":")
    if kind != "selective" or not names or PRESETS.get(row.get("framework", "")) != "megatron-core":
        return ""
    return names


def block_fraction(row: dict[str, str]) -> float | None:
    """The fraction of whole blocks a row checkpoints (`ac=selective-blocks; ac_fraction=P`, P a
    number or a ratio such as 1/3), where its source states it; None otherwise."""
    n = notes(row)
    if n.get("ac") != "selective-blocks":
        return None
    text = n.get("ac_fraction", "")
    num, _, den = text.partition("/")
    try:
        value = float(num) / (float(den) if den else 1.0)
    except ValueError:
        return None
    return value if 0.0 <= value <= 1.0 else None


def fms_checkpointed_blocks(layers: int, fraction: float) -> int:
    """How many of `layers` blocks IBM fms-fsdp checkpoints for `selective_checkpointing` = p:
    block i (from 1) is checkpointed when i p reaches the next cut-off 1/2, 3/2, 5/2, ...
    (fms_fsdp/policies/ac_handler.py, `apply_fsdp_checkpointing`, from commit ed74fd5). With one
    pipeline stage the blocks' order does not change the step time or the memory (Plan.recompute_layers)."""
    count, cut_off = 0, 0.5
    for i in range(1, layers + 1):
        if i * fraction >= cut_off:
            cut_off += 1.0
            count += 1
    return count


def jax_remat_policy(row: dict[str, str]) -> str:
    """The JAX remat policy a MaxText or Paxml row ran (`physics.remat`'s name): its notes'
    `remat_policy=`, else what its source's launch configuration states (`JAX_LAUNCH_FACTS`);
    empty when neither says."""
    if row["framework"] not in ("maxtext", "paxml"):
        return ""
    stated = notes(row).get("remat_policy", "")
    if not stated or stated == "not-stated":
        facts = (f for f in JAX_LAUNCH_FACTS if f[0] in row["source"] and f[1] == row["model"])
        stated = next((f[3] for f in facts if f[2] in ("", row["precision"])), "")
    policy = remat.canonical(stated) if stated else ""
    return policy if policy in remat.RECOMPUTED else ""


def recompute(row: dict[str, str]) -> str:
    """none, selective or full, as the row's `recompute` column says; a JAX remat policy is
    "selective" with that policy (`execution`)."""
    if jax_remat_policy(row):
        return "selective"
    return next((m for m in ("full", "selective") if (row["recompute"] or "").startswith(m)), "none")


def zero_stage(row: dict[str, str], default: int | None) -> int | None:
    """The optimizer sharding the row states: `zero=N`, or full sharding (FSDP, ZeRO-3) over its
    `fsdp` ranks; else the preset's default."""
    n = notes(row)
    if n.get("zero", "").isdigit():
        return int(n["zero"])
    try:
        if int(float(row.get("fsdp") or 0)) > 0:
            return 3
    except ValueError:
        pass
    if row["framework"] == "paxml" and row.get("fsdp") == "0":
        # a data-only mesh replicates the weights and the optimizer state: google/paxml
        # contrib/gpu/scripts_gpu/configs.py GPT126M (04516ac8), ICI_MESH_SHAPE = DCN_MESH_SHAPE = [8, 1, 1]
        return 0
    return default


def shard_group(row: dict[str, str]) -> int:
    """The hybrid-sharding group the row states (`Plan.shard_group`), else 0 (ZeRO over every
    data-parallel rank): an `fsdp` degree below `dp` -- FSDP/HSDP inside a group, plain data parallelism across the
    groups, as fms-fsdp's `sharding_strategy=hsdp` and MaxText's ici_fsdp x dcn_data meshes run
    (the context-parallel ranks join the shard group, as torchtitan's dp_shard x cp)."""
    dp, cp = int(float(row.get("dp") or 0)), int(float(row.get("cp") or 1))
    try:
        fsdp = int(float(row.get("fsdp") or 0))
    except ValueError:
        return 0
    return fsdp * cp if 0 < fsdp < dp else 0


def network(row: dict[str, str]) -> tuple[str, float] | None:
    """(link preset, NICs per server) of the row's stated network, or None (the system's)."""
    return NETWORKS.get(notes(row).get("network", ""))
