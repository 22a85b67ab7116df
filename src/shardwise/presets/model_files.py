"""What a model file given as --model is read as (a Hugging Face config.json, or shardwise's own
fields in YAML or JSON), and what follows from that: the note on a file that names no family, the
Hugging Face id a serving engine loads."""

from __future__ import annotations

from shardwise import loaders
from shardwise.errors import SpecError


def is_hf_config(name: str) -> bool:
    """Whether --model `name` is read as a Hugging Face config.json: a .json that does not state
    shardwise's own model fields (`hf_config.states_own_fields`; one that cannot be read counts as
    a config: reading it says what is wrong)."""
    if not name.lower().endswith(".json"):
        return False
    from shardwise import hf_config

    try:
        return not hf_config.states_own_fields(hf_config.load(name))
    except SpecError:
        return True


def model_family_note(name: str | None) -> str | None:
    """What a model YAML file that names no `family` was given silently: the gpt family's defaults
    (`loaders.FAMILIES`) for the architecture flags it leaves out, in one line; None for a preset, a
    config.json (its own architecture) or a file that names its family or sets every flag."""
    from shardwise.presets import _looks_like_path, _lookup

    if not name or is_hf_config(name) or not _looks_like_path(name):
        return None
    _, data = _lookup("models", name)
    if "family" in data:
        return None
    left = [f"{k} {str(v).lower()}" for k, v in loaders.FAMILIES["gpt"].items() if k not in data]
    if not left:
        return None
    return (
        f"{name} names no family: the gpt family's defaults fill what it leaves out ({', '.join(left)}); "
        "add family: llama for untied embeddings, rotary positions, no biases and no dropout"
    )


def model_hf_id(name: str) -> str | None:
    """The Hugging Face id a model preset (or a model file of shardwise's own fields) names (`hf_id` in models.yaml),
    or None: a config.json, or a preset whose source names none."""
    return _model_field(name, "hf_id")


def model_hf_weights(name: str) -> str | None:
    """What the checkpoint a model preset's `hf_id` names stores its layers' weights in (`hf_weights`
    in models.yaml, given where not 16-bit: DeepSeek-V3's and Kimi K2's FP8 blocks, gpt-oss's MXFP4
    experts), or None."""
    return _model_field(name, "hf_weights")


def _model_field(name: str, key: str) -> str | None:
    """A model preset's (or shardwise model file's) `key` as text; None for a config.json or where unset."""
    from shardwise.presets import _lookup

    if is_hf_config(name):
        return None
    try:
        _, data = _lookup("models", name)
    except SpecError:
        return None
    found = data.get(key)
    return str(found) if found else None
