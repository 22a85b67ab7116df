"""Launch commands for a priced plan (`plan --emit TARGET`, `predict --emit TARGET`, `serve --emit vllm|sglang|trtllm`).

One module per target turns a Scenario into a `Launch` (environment, launcher, the tool's
arguments, files, what the user still adds): `megatron`, `torchtitan`, `deepspeed` for training,
`vllm`, `sglang` and `trtllm` for serving. Each training target first `adapt`s the plan to what the tool will run
(refusing, with one line naming the part, what it cannot run at all); when that changes the
plan, the command line re-prices it and shows both. tools/check_emit.py runs the real tools'
own argument parsing and validation on what these modules emit (docs/emit/).
"""

from __future__ import annotations

from dataclasses import replace
from types import ModuleType
from typing import TYPE_CHECKING

from shardwise.emit.launch import EmitError, Launch
from shardwise.specs import Scenario

if TYPE_CHECKING:
    from shardwise.emit.vllm_kv import KvPool

TRAINING_TARGETS = ("megatron", "torchtitan", "deepspeed")
# the framework presets each training target's launch runs, the first where a plan states none
# (`requests.emit_stack`): Megatron-LM main is Megatron-Core; torchtitan compiles as the plan is
# priced (`torchtitan._compile`): a fused stack's plan with torch.compile, an eager one without;
# the deepspeed target writes Megatron-DeepSpeed's pretrain_gpt.py
TARGET_STACKS = {
    "megatron": ("megatron-core",),
    "torchtitan": ("torchtitan-compile", "torchtitan"),
    "deepspeed": ("megatron-deepspeed",),
}
# serving targets: the launch each prints, by the serving framework its plans are priced as
SERVING_TARGETS = {"vllm": "vllm", "sglang": "sglang", "trtllm": "tensorrt-llm"}
TARGETS = (*TRAINING_TARGETS, *SERVING_TARGETS)

__all__ = [
    "TARGETS",
    "TARGET_STACKS",
    "TRAINING_TARGETS",
    "EmitError",
    "Launch",
    "adapt",
    "emit",
    "versions",
    "vllm_launch",
]


def _module(target: str) -> ModuleType:
    from shardwise.emit import deepspeed, megatron, sglang, torchtitan, trtllm, vllm

    mods = {"megatron": megatron, "torchtitan": torchtitan, "deepspeed": deepspeed, "vllm": vllm}
    mods |= {"sglang": sglang, "trtllm": trtllm}
    if target not in mods:
        raise EmitError(f"--emit: {target!r} is not allowed; choose {', '.join(TARGETS)}")
    return mods[target]


def versions(target: str) -> tuple[str, ...]:
    """The tool versions `target` emits for, the default first."""
    return _module(target).VERSIONS  # type: ignore[no-any-return]


def _version(target: str, version: str | None) -> str:
    allowed = versions(target)
    if version is None:
        return allowed[0]
    if version not in allowed:
        raise EmitError(
            f"--emit-version: {version!r} is not a {target} version shardwise emits; choose {', '.join(allowed)}"
        )
    return version


def adapt(scn: Scenario, target: str, version: str | None = None) -> tuple[Scenario, tuple[str, ...]]:
    """The plan `target` will actually run for `scn`, and each change as a sentence (none: the
    same plan). Raises EmitError for what the target cannot run."""
    if target not in TRAINING_TARGETS:
        raise EmitError(f"--emit {target}: not a training target; choose {', '.join(TRAINING_TARGETS)}")
    if scn.model.is_hybrid:  # Megatron-Core's MambaModel takes --hybrid-override-pattern and mamba flags: not emitted
        raise EmitError(f"--emit {target}: a hybrid Mamba-2 model's launch command is not emitted yet")
    return _module(target).adapt(scn, _version(target, version))  # type: ignore[no-any-return]


def emit(scn: Scenario, target: str, version: str | None = None) -> Launch:
    """The launch of `scn` by a training `target`, adapted to what it runs (`Launch.changes`)."""
    v = _version(target, version)
    run, changes = adapt(scn, target, v)
    out = _module(target).launch(run, v)
    return replace(out, changes=changes)


def vllm_launch(
    scn: Scenario,
    workload: object,
    model_id: str | None,
    version: str | None = None,
    max_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
    asked: int | None = None,
    kv_pool: KvPool | None = None,
    stored: object = None,
    engine: str = "vllm",
) -> Launch:
    """The server (`engine`: vllm, sglang or trtllm) for one replica of a serving plan (see
    `emit.vllm`, `emit.sglang`, `emit.trtllm`); `kv_pool`: its KV cache in vLLM's blocks
    (`emit.vllm_kv.kv_pool`); `stored`: what its checkpoint stores (`emit.checkpoint`)."""
    module = _module(engine)
    version = _version(engine, version)
    return module.launch(scn, workload, model_id, version, max_batched_tokens, max_num_seqs, asked, kv_pool, stored)
