"""The weights' storage a Hugging Face config.json states in its `quantization_config`, as one of
`serve --weight-precision`'s names (`precisions.STORAGE_PRECISIONS`), so that `serve` prices a
pre-quantised checkpoint as it is stored and `--emit` does not launch another checkpoint than the
one priced (review 45 #3, #5).

The shapes read, each from the config.json of the Hugging Face repository named beside it, and the
loaders that define them (transformers `utils/quantization_config.py`, vLLM
`model_executor/layers/quantization/`):
- `quant_method: fp8` with `weight_block_size: [128, 128]` (deepseek-ai/DeepSeek-V3,
  Qwen/Qwen3-30B-A3B-FP8): E4M3 weights and an fp32 scale per 128 x 128 block (4 bytes per
  16,384 weights, 0.02%: not counted) -> fp8.
- `quant_method: fbgemm_fp8` (meta-llama/Llama-3.1-405B-Instruct-FP8): E4M3, a scale per row -> fp8.
- `quant_method: compressed-tensors` (RedHatAI/Meta-Llama-3.1-70B-Instruct-FP8 `float-quantized`,
  RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w4a16 `pack-quantized`, ...quantized.w8a8
  `int-quantized`, RedHatAI/Llama-3.3-70B-Instruct-NVFP4 `nvfp4-pack-quantized`): the first
  config group's `weights` {num_bits, type int|float, group_size} -> fp8, int8, int4, nvfp4, mxfp4.
- `quant_method: awq` / `gptq` (hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4,
  hugging-quants/Meta-Llama-3.1-8B-Instruct-GPTQ-INT4): `bits` 4 (or GPTQ's 8), `group_size`
  -> int4 (int8).
- `quant_method: bitsandbytes` (unsloth/llama-3-8b-bnb-4bit): `load_in_4bit` (NF4, a scale per
  64) or `load_in_8bit` -> int4, int8.
- `quant_method: mxfp4` (openai/gpt-oss-120b: the experts only, `modules_to_not_convert` the
  attention, router, embeddings and lm_head) -> mxfp4.
- `quant_method: modelopt` (nvidia/Llama-3.3-70B-Instruct-FP4, nvidia/Llama-3.1-8B-Instruct-FP8):
  `quant_algo` NVFP4, FP8, W4A16_AWQ, MXFP4 -> nvfp4, fp8, int4, mxfp4; `modelopt_fp4` -> nvfp4.
Any other method is refused in one line where it would be priced (give --weight-precision).
int4 is priced with a 16-bit scale and a 4-bit zero per 128 weights (`specs.serving.STORAGE_BYTES`);
a checkpoint with other groups (32, 64, per channel) differs by a few per cent of its weights, said
in the note.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shardwise.errors import SpecError
from shardwise.specs.serving import INT4_GROUP

READ_METHODS = ("fp8", "fbgemm_fp8", "compressed-tensors", "awq", "gptq", "bitsandbytes", "mxfp4", "modelopt")
_MODELOPT = {"NVFP4": "nvfp4", "FP8": "fp8", "W4A16_AWQ": "int4", "W4A8_AWQ": "int4", "MXFP4": "mxfp4"}


@dataclass(frozen=True)
class Checkpoint:
    """What a checkpoint stores its transformer layers' weights in: `precision` (a storage
    precision), `method` (the config's quant_method) and `detail` (what else the note says)."""

    precision: str
    method: str
    detail: str = ""

    def words(self) -> str:
        """'quant_method fp8, 128 x 128 blocks' (for a note or a refusal)."""
        return f"quant_method {self.method}" + (f", {self.detail}" if self.detail else "")


def checkpoint(cfg: Any, where: str = "config.json") -> Checkpoint | None:
    """The weights' storage `cfg`'s `quantization_config` states; None where it states none (the
    weights are 16-bit); SpecError (one line) for a method or a width not read here."""
    q = cfg.get("quantization_config") if isinstance(cfg, dict) else None
    if q is None:
        return None
    if not isinstance(q, dict):
        raise SpecError(f"{where}: quantization_config: expected an object, got {type(q).__name__}")
    method = str(q.get("quant_method", "")).lower()
    found = _read(q, method)
    if found is None:
        raise SpecError(
            f"{where}: quantization_config: quant_method {method or '(none)'} "
            + (f"with {_shape(q)} " if method in READ_METHODS else "")
            + f"is not read (read: {', '.join(READ_METHODS)}); give --weight-precision for the weights' storage"
        )
    return found


def _read(q: dict[str, Any], method: str) -> Checkpoint | None:
    if method == "fp8":
        block = q.get("weight_block_size")
        return Checkpoint("fp8", method, f"{block[0]} x {block[1]} blocks" if _pair(block) else "")
    if method == "fbgemm_fp8":
        return Checkpoint("fp8", method, "a scale per row")
    if method in ("awq", "gptq"):
        bits, group = q.get("bits"), q.get("group_size")
        width = {4: "int4", 8: "int8"}.get(bits) if method == "gptq" else {4: "int4"}.get(bits)
        return None if width is None else Checkpoint(width, method, _groups(width, group))
    if method == "bitsandbytes":
        if q.get("load_in_4bit"):
            kind = str(q.get("bnb_4bit_quant_type", "fp4"))
            return Checkpoint("int4", method, f"4-bit {kind} with a scale per 64 (priced as int4 groups of 128)")
        return Checkpoint("int8", method, "LLM.int8()") if q.get("load_in_8bit") else None
    if method == "mxfp4":
        return Checkpoint("mxfp4", method)
    if method in ("modelopt", "modelopt_fp4"):
        algo = str(q.get("quant_algo", "NVFP4" if method == "modelopt_fp4" else "")).upper()
        return Checkpoint(_MODELOPT[algo], "modelopt", f"quant_algo {algo}") if algo in _MODELOPT else None
    if method == "compressed-tensors":
        return _compressed(q)
    return None


def _compressed(q: dict[str, Any]) -> Checkpoint | None:
    """The first config group's weights (compressed-tensors `QuantizationArgs`: num_bits, type,
    group_size); None where there is none or its width is not one priced."""
    groups = q.get("config_groups")
    first = next(iter(groups.values()), None) if isinstance(groups, dict) and groups else None
    w = first.get("weights") if isinstance(first, dict) else None
    if not isinstance(w, dict):
        return None
    bits, kind, group = w.get("num_bits"), str(w.get("type", "int")).lower(), w.get("group_size")
    fmt = str(q.get("format", ""))
    if bits == 8:
        width = "fp8" if kind == "float" else "int8"
    elif bits == 4 and kind == "float":
        width = "mxfp4" if "mxfp4" in fmt or group == 32 else "nvfp4"
    elif bits == 4:
        width = "int4"
    else:
        return None
    detail = f"format {fmt}" if fmt else ""
    if width == "int4":
        detail = ", ".join(x for x in (detail, _groups(width, group)) if x)
    return Checkpoint(width, "compressed-tensors", detail)


def _groups(width: str, group: Any) -> str:
    """The int4 groups the checkpoint has, and how far the priced ones (`INT4_GROUP`) are from them."""
    if width != "int4" or group in (None, INT4_GROUP):
        return f"groups of {group}" if group else ""
    per = "per channel" if group == -1 else f"groups of {group}"
    if group == -1 or not isinstance(group, int) or group <= 0:
        return f"{per} (priced with groups of {INT4_GROUP})"
    delta = 2.5 / group - 2.5 / INT4_GROUP  # a 16-bit scale and a 4-bit zero per group
    return f"{per} (priced with groups of {INT4_GROUP}: {delta:+.3f} bytes per weight unpriced)"


def _pair(v: Any) -> bool:
    return isinstance(v, list) and len(v) == 2 and all(isinstance(x, int) for x in v)


def _shape(q: dict[str, Any]) -> str:
    """The fields that made a known method unreadable ('bits 3'), for the refusal."""
    shown = [f"{k} {q[k]!r}" for k in ("bits", "load_in_4bit", "load_in_8bit", "quant_algo") if k in q]
    return ", ".join(shown) or "these fields"


def config_checkpoint(path: str | Path) -> Checkpoint | None:
    """`checkpoint` of the config.json at `path`: its own quantization_config, else its text_config's
    (a multimodal wrapper may state it there: moonshotai/Kimi-K2.5, compressed-tensors int4 experts)."""
    from shardwise import hf_config

    p = Path(path)
    cfg = hf_config.load(p)
    if isinstance(cfg, dict) and "quantization_config" not in cfg and isinstance(cfg.get("text_config"), dict):
        cfg = cfg["text_config"]
    return checkpoint(cfg, p.name)


def model_checkpoint(name: str | None) -> Checkpoint | None:
    """What the checkpoint a --model loads stores its weights in: a config.json's quantization_config,
    or a preset's `hf_weights` (models.yaml: the checkpoint its `hf_id` names, where not 16-bit);
    None: 16-bit weights (or no model named)."""
    if not name:
        return None
    from shardwise.presets import is_hf_config
    from shardwise.presets.model_files import model_hf_weights

    if is_hf_config(name):
        return config_checkpoint(name)
    stored = model_hf_weights(name)
    return None if stored is None else Checkpoint(stored, "hf_weights", "the preset's checkpoint")
