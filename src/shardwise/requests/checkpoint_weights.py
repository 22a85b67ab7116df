"""The weights' storage a named model's checkpoint states, priced where the user names no precision
for serving: `serve` (no --weight-precision) and crossover/sweep/sensitivity with --workload decode
or prefill (no --precision) take it alike, with one note (task r47d #4: sweep priced DeepSeek-V3's
FP8 and gpt-oss's MXFP4 checkpoints in bf16 while serve priced them as published)."""

from __future__ import annotations


def checkpoint_weights(name: str | None, notes: list[str] | None, flag: str = "--weight-precision") -> str | None:
    """The storage of the checkpoint `name` loads: a config.json's quantization_config (`hf_quant`),
    or a preset's `hf_weights` (the checkpoint its hf_id names: DeepSeek-V3's and Kimi K2's FP8
    blocks, gpt-oss's MXFP4 experts), said in a note appended to `notes`; None where it states none
    (16 bits, the GPU's). `flag`: the command's flag that prices another (crossover's --precision)."""
    from shardwise.hf_quant import model_checkpoint
    from shardwise.presets import is_hf_config

    if not name:
        return None
    found = model_checkpoint(name)
    if found is None:
        return None
    if is_hf_config(name):
        where = f"as {name}'s quantization_config states them ({found.words()})"
    else:  # a preset (or a model file stating hf_weights): served as published, as a user expects
        where = f"as {name}'s published checkpoint stores them (hf_weights)"
    if notes is not None:
        notes.append(f"weights {found.precision}: the checkpoint's, {where}; {flag} to price another")
    return str(found.precision)
