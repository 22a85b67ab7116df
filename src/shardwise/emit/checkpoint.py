"""Whether the checkpoint a serving launch loads stores the weights that were priced (review 45 #5).

A launch's model id is the user's `--hf-id` (taken as named: its storage is not known here), the
directory of a config.json given as --model (its `quantization_config`: `hf_quant`), or a preset's
`hf_id` (16-bit, or its `hf_weights`). A server loads what the checkpoint stores: weights priced in
int4 but launched from a bf16 checkpoint run at 16 bits, with a smaller KV cache and another speed.
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
    where that is known from (`where`: "the preset's hf_id", "config.json's quantization_config")."""

    precision: str | None
    where: str

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
    ones and `engine`'s launch does not convert them; `stored` None: the user named the checkpoint."""
    if stored is None:
        return
    has = stored.precision or "16-bit"
    if not stored.quantised:
        if priced in SIXTEEN or priced in ONLINE[engine]:
            return
    elif priced == stored.precision:
        return
    fix = f"give --hf-id ORG/NAME of a checkpoint stored in {priced}" if priced not in SIXTEEN else "give --hf-id"
    if stored.quantised:
        fix = f"price --weight-precision {stored.precision}, or {fix}"
    raise EmitError(
        f"--emit {engine}: weights priced in {priced}, but {model_id} ({stored.where}) stores {has} weights, "
        f"which the server would load as they are; {fix}"
    )


def names_own_hf_id(model: str) -> bool:
    """Whether --model is a model file that names its own `hf_id` (not one taken from `like:`): its
    storage is the user's to state (`hf_weights`), else the id is taken as named, as --hf-id is."""
    if not os.path.isfile(model):
        return False
    from shardwise.yaml_files import load_yaml

    data = load_yaml(model)
    return isinstance(data, dict) and bool(data.get("hf_id"))
