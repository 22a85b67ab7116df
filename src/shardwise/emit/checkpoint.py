"""Whether the checkpoint a serving launch loads stores the weights that were priced (review 45 #5).

A launch's model id is the user's `--hf-id`, the directory of a config.json given as --model (its
`quantization_config`: `hf_quant`), or a preset's `hf_id` (16-bit, or its `hf_weights`). What an
--hf-id stores is read where it can be (`named`: a local folder's config.json, a preset's own id) or
stated by the user (`--hf-weights`); else it is not known, and a launch that needs pre-quantised
weights is refused rather than claimed "detected" (review 50 #1: a bf16 repository launched for int4).
A server loads what the checkpoint stores: weights priced in int4 but launched from a bf16
checkpoint run at 16 bits, with a smaller KV cache and another speed.
The one conversion a server makes itself at load is 16 bits to FP8 (`ONLINE`), where its flag for it
is written: vLLM's and SGLang's `--quantization fp8` (vLLM `Fp8Config` with
`is_checkpoint_fp8_serialized` false; SGLang `server_args.py` `--quantization fp8`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from shardwise.emit.launch import EmitError

# what each engine's launch converts 16-bit weights to at load, by its own flag
ONLINE = {"vllm": ("fp8",), "sglang": ("fp8",), "trtllm": ()}
SIXTEEN = ("bf16", "fp16")


@dataclass(frozen=True)
class Stored:
    """What the launched checkpoint stores its layers' weights in: `precision` (None: 16 bits) and
    where that is known from (`where`: "the preset's hf_id", "config.json's quantization_config");
    `known` False: not read nor stated (an --hf-id taken as named), `precision` then None."""

    precision: str | None
    where: str
    known: bool = True
    how: str = "--hf-weights {p}"  # how the user states it, where not known ({p}: the precision)

    @property
    def quantised(self) -> bool:
        return self.precision is not None and self.precision not in SIXTEEN


# the servers' names in a refusal, by `--emit` target
SERVER_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}


def check_checkpoint(engine: str, model_name: str, model_id: str | None, priced: str, stored: Stored | None) -> None:
    """An EmitError (one line) where the launch names no checkpoint the server can load, or one that
    stores other weights than the `priced` ones (`check_stored`)."""
    if not model_id:
        raise EmitError(
            f"--emit {engine}: {model_name!r} names no checkpoint {SERVER_NAMES[engine]} can load (a preset without "
            "a Hugging Face id, a model file without `hf_id: ORG/NAME`, or a preset a flag reshaped); give --hf-id "
            "ORG/NAME (or --model path/to/config.json)"
        )
    check_stored(engine, model_id, priced, stored)


def check_stored(engine: str, model_id: str, priced: str, stored: Stored | None) -> None:
    """An EmitError (one line) where the checkpoint `model_id` stores other weights than the `priced`
    ones and `engine`'s launch does not convert them; where what it stores is not known, where the
    priced weights are not the 16 bits a launch takes it to hold (or converts at load)."""
    if stored is None:
        return
    if not stored.known:
        if priced in SIXTEEN or priced in ONLINE[engine]:
            return
        raise EmitError(
            f"--emit {engine}: weights priced in {priced}, but what {model_id} stores is not known here "
            f"({stored.where}) and {SERVER_NAMES[engine]} loads it as stored; if it stores {priced}, say so with "
            f"{stored.how.format(p=priced)} (or give --hf-id a local folder whose config.json states it)"
        )
    has = stored.precision or "16-bit"
    if not stored.quantised:
        if priced in SIXTEEN or priced in ONLINE[engine]:
            return
    elif priced == stored.precision:
        return
    fix = (  # another checkpoint: one stored as priced
        f"give --hf-id ORG/NAME (or a folder) of a checkpoint stored in {priced}"
        if priced not in SIXTEEN
        else "give --hf-id ORG/NAME (or a folder) of a 16-bit checkpoint"
    )
    if stored.quantised:
        fix = f"price --weight-precision {stored.precision}, or {fix}"
    raise EmitError(
        f"--emit {engine}: weights priced in {priced}, but {model_id} ({stored.where}) stores {has} weights, "
        f"which the server would load as they are; {fix}"
    )


def stored_note(engine: str, model_id: str, priced: str, stored: Stored | None) -> str | None:
    """What the launch's note says of the weights it loads: read or stated (`stored.where`), or taken
    as 16 bits where nothing says what `model_id` stores; None: 16 bits, known."""
    if stored is None or (stored.known and not stored.quantised):
        return None
    if stored.known:
        return f"weights {priced}: {model_id} stores them, as {stored.where} states; the server loads them as stored"
    at_load = f", which {SERVER_NAMES[engine]} converts to {priced} at load" if priced in ONLINE[engine] else ""
    return (
        f"weights {priced}: {model_id} is taken to store 16-bit weights{at_load} (not read here: {stored.where}); "
        "if it stores others, state them with --hf-weights"
    )


def named(hf_id: str, stated: str | None) -> Stored:
    """What the checkpoint the user named (`--hf-id`) stores: as `stated` (--hf-weights), else a local
    folder's config.json (its quantization_config, `hf_quant`), else a model preset's own `hf_id`
    (its `hf_weights`); else not known (`Stored.known` False)."""
    if stated is not None:
        return Stored(None if stated in SIXTEEN else stated, f"--hf-weights {stated}")
    config = os.path.join(os.path.expanduser(hf_id), "config.json")
    if os.path.isfile(config):
        from shardwise.hf_quant import config_checkpoint

        found = config_checkpoint(config)
        return Stored(found and found.precision, f"{config}'s quantization_config")
    from shardwise import presets

    for name, data in presets.raw("models").items():
        if str(data.get("hf_id") or "").lower() == hf_id.lower():
            weights = data.get("hf_weights")
            return Stored(str(weights) if weights else None, f"the {name} preset's checkpoint")
    return Stored(None, "no local config.json, not a preset's checkpoint, no --hf-weights", known=False)


def names_own_hf_id(model: str) -> bool:
    """Whether --model is a model file that names its own `hf_id` (not one taken from `like:`): its
    storage is the user's to state (`hf_weights`), else the id is taken as named, as --hf-id is."""
    if not os.path.isfile(model):
        return False
    from shardwise.yaml_files import load_yaml

    data = load_yaml(model)
    return isinstance(data, dict) and bool(data.get("hf_id"))
