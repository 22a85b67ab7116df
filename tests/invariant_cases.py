"""Random but valid training configurations for the invariant tests (tests/test_invariants*.py).

A case is drawn as a user would ask it -- a `TrainingRequest` of a model preset or a custom shape,
a system, nodes, tp/pp/cp/ep, micro and global batch, recomputation, precision, a framework and a
few of the stack's switches -- and kept only when it builds and prices (a SpecError is a refused
input, not a case). Seeded numpy sampling: every run draws the same cases.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from shardwise import presets
from shardwise.engines.training import estimate_training_step
from shardwise.errors import SpecError
from shardwise.requests import TrainingRequest
from shardwise.requests.training import refuse_idle_flags
from shardwise.specs import Scenario

DENSE = (
    "llama3-8b",
    "llama3.2-1b",
    "gpt3-5b",
    "qwen2.5-7b",
    "gemma2-2b",
    "gpt-1.3b",
    "mistral-7b",
    "llama2-13b",
    "olmo2-7b",
    "qwen3-1.7b",
    "falcon-7b",
    "nemotron-h-8b",
)
MOE = ("mixtral-8x7b", "qwen3-30b-a3b", "gpt-oss-20b", "moonlight-16b", "deepseek-v2-lite")
SYSTEMS = (
    "dgx-a100",
    "dgx-h100",
    "dgx-b200",
    "a100-pcie-8x",
    "rtx4090-8x",
    "mi300x-8x",
    "l40s-8x",
    "aws-p5",
    "dgx-1-v100",
    "aws-p4d",
)
FRAMEWORKS = (
    "megatron-core",
    "megatron-lm-2022",
    "megatron-deepspeed",
    "fsdp",
    "torchtitan",
    "fsdp2",
    "deepspeed",
    "nanotron",
    "maxtext",
    "hf-transformers",
    "composer",
    "modalities",
    "colossalai",
    "internevo",
    "nemo-automodel",
    "paxml",
)


def _switches(rng: np.random.Generator) -> dict[str, Callable[[], Any]]:
    """Stack and plan switches a case may set (a few at a time)."""
    return {
        "sequence_parallel": lambda: bool(rng.random() < 0.5),
        "offload_activations": lambda: int(rng.choice([1, 2])),
        "offload_optimizer": lambda: float(rng.choice([0.5, 1.0])),
        "lora_rank": lambda: int(rng.choice([8, 64])),
        "packed_document_len": lambda: int(rng.choice([256, 1024])),
        "recompute_layers": lambda: int(rng.choice([1, 2])),
        "cp_comm": lambda: str(rng.choice(["p2p", "all_gather", "a2a"])),
        "etp": lambda: int(rng.choice([1, 2])),
        "moe_dispatcher": lambda: str(rng.choice(["alltoall", "flex", "allgather"])),
        "moe_overlap": lambda: bool(rng.random() < 0.5),
        "expert_imbalance": lambda: float(rng.choice([1.0, 1.3])),
        "moe_capacity_factor": lambda: float(rng.choice([0.0, 1.25])),
        "tp_comm_overlap": lambda: bool(rng.random() < 0.5),
        "overlap_grad_reduce": lambda: bool(rng.random() < 0.5),
        "overlap_param_gather": lambda: bool(rng.random() < 0.5),
        "attention_kernel": lambda: str(rng.choice(["fused", "flash2", "sdpa-flash2", "te-flash2"])),
        "flash_attention": lambda: bool(rng.random() < 0.5),
        "eager_kernels": lambda: bool(rng.random() < 0.5),
        "grad_reduce_bf16": lambda: bool(rng.random() < 0.5),
        "optimizer_state": lambda: str(rng.choice(["fp32", "bf16", "fp32-bf16-moments"])),
        "cuda_graph_scope": lambda: "full_iteration",
        "nics_per_node": lambda: float(rng.choice([1, 4, 8])),
        "p2p": lambda: bool(rng.random() < 0.5),
        "nvls": lambda: bool(rng.random() < 0.5),
        "pipeline_flushes": lambda: 2,
    }


def draw_fields(rng: np.random.Generator) -> dict[str, Any]:
    """One request's fields but the global batch (drawn once dp is known)."""
    moe = rng.random() < 0.2
    fields: dict[str, Any] = {
        "model": str(rng.choice(MOE if moe else DENSE)),
        "system": str(rng.choice(SYSTEMS)),
        "nodes": int(rng.choice([1, 1, 2, 4])),
        "tp": int(rng.choice([1, 1, 2, 4, 8])),
        "pp": int(rng.choice([1, 1, 2, 4])),
        "cp": int(rng.choice([1, 1, 1, 2])),
        "ep": int(rng.choice([1, 2, 4, 8])) if moe else 1,
        "micro_batch": int(rng.choice([1, 1, 2, 4])),
        "recompute": str(rng.choice(["none", "selective", "full"])),
        "framework": str(rng.choice(FRAMEWORKS)),
        "precision": str(rng.choice(["bf16", "bf16", "fp16", "fp8"])),
    }
    if rng.random() < 0.25:  # a custom shape instead of a preset
        hidden, heads = int(rng.choice([512, 1024, 2048, 3072, 4096])), int(rng.choice([8, 16, 32]))
        del fields["model"]
        fields.update(
            layers=int(rng.choice([2, 4, 8, 12, 24, 32])),
            hidden=hidden,
            heads=heads,
            kv_heads=int(rng.choice([heads, heads // 2, 8])),
            ffn_hidden=int(hidden * rng.choice([2, 3.5, 4])),
            vocab=int(rng.choice([32000, 50257, 128256])),
            family=str(rng.choice(["gpt", "llama"])),
        )
    switches = _switches(rng)
    for name in rng.choice(list(switches), size=int(rng.integers(0, 5)), replace=False):
        fields[str(name)] = switches[str(name)]()
    if rng.random() < 0.3:
        fields["seq_len"] = int(rng.choice([512, 1024, 4096, 8192]))
    if rng.random() < 0.3:
        fields["zero"] = int(rng.choice([0, 1, 2, 3]))
    if fields["pp"] > 1 and rng.random() < 0.3:
        fields["schedule"] = str(rng.choice(["gpipe", "1f1b", "interleaved"]))
        if fields["schedule"] == "interleaved":
            fields["vpp"] = 2
    return fields


@dataclass(frozen=True)
class Case:
    """A valid configuration: the request (what a user would type), its scenario, its step time."""

    request: TrainingRequest
    scenario: Scenario
    step_time_s: float

    def __str__(self) -> str:  # what an assertion prints: the request's fields
        return str(self.request.given())


def draw_case(rng: np.random.Generator, most_accumulation: int = 8) -> Case | None:
    """A case, or None where the drawn fields are refused (a SpecError)."""
    fields = draw_fields(rng)
    gpus = int(presets.system(fields["system"], nodes=fields["nodes"]).num_gpus)
    ranks = fields["tp"] * fields["pp"] * fields["cp"]
    if gpus % ranks:
        return None
    dp = gpus // ranks
    accumulation = int(rng.integers(1, most_accumulation + 1)) * (fields["pp"] if rng.random() < 0.5 else 1)
    fields["global_batch"] = dp * fields["micro_batch"] * accumulation
    try:
        request = TrainingRequest(**fields)
        scn = request.scenario()
        refuse_idle_flags(request, scn.model)  # what `predict` refuses besides (a flag given nothing to do)
        step = float(estimate_training_step(scn).step_time_s)
    except SpecError:
        return None
    return Case(request, scn, step)


@cache
def training_cases(seed: int, n: int) -> tuple[Case, ...]:
    """`n` valid cases drawn with `seed` (kept: several tests read the same ones)."""
    rng = np.random.default_rng(seed)
    out: list[Case] = []
    for _ in range(50 * n):
        case = draw_case(rng)
        if case is not None:
            out.append(case)
            if len(out) == n:
                return tuple(out)
    raise AssertionError(f"only {len(out)} of {n} drawn cases were valid")  # the generator went stale


def step_s(scn: Scenario) -> float:
    return float(estimate_training_step(scn).step_time_s)
