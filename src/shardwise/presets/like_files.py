"""`like: NAME` in a model or GPU file: the built-in preset NAME's fields, the file's own over them,
as framework files take theirs (`framework_fields.with_like`, which keeps a framework's stack apart).
A link or system file states its own fields: `like:` there is refused in one line."""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

from shardwise.errors import SpecError

if TYPE_CHECKING:
    from shardwise.specs import Gpu

# the kinds whose files may name a built-in with `like:` here (frameworks: `framework_fields.with_like`)
LIKE_KINDS = ("models", "gpus")
# what a file does not take from its built-in: its words, and the checkpoint a serving engine loads
# (`hf_id`: a file's model is another model, whose weights the built-in's id does not hold)
NOT_INHERITED = ("source", "notes", "name", "kind", "description", "hf_id", "hf_weights")


def with_like(
    kind: str, path: str, data: dict[str, Any], table: dict[str, dict[str, Any]], aliases: dict[str, str]
) -> dict[str, Any]:
    """The fields of the `kind` file `path` (`data`) over those of the built-in its `like:` names
    (`table`, names lower-case; `aliases` of them); `data` unchanged without `like:` and for a
    framework file."""
    if "like" not in data or kind == "frameworks":
        return data
    what = kind[:-1]
    if kind not in LIKE_KINDS:
        raise SpecError(f"{path}: like: is for model, GPU and framework files; a {what} file states its own fields")
    like = data["like"]
    key = like.strip().lower() if isinstance(like, str) else ""
    key = aliases.get(key, key)
    if key not in table:
        import difflib

        close = difflib.get_close_matches(key, table, n=3, cutoff=0.6)
        hint = f" (closest: {', '.join(close)})" if close else ""
        raise SpecError(
            f"{path}: like: {like!r} is not a built-in {what}{hint}; name one of `shardwise presets {kind}`"
        )
    base = table[key]
    own = {k: v for k, v in data.items() if k != "like"}
    changed = [k for k in own if k not in NOT_INHERITED]
    said = str(own.pop("source", "") or "").strip()
    merged = {k: v for k, v in base.items() if k not in NOT_INHERITED} | own
    shape = f", {', '.join(changed)} changed" if changed else ""
    merged["source"] = (f"{said}; " if said else "") + f"like {key}{shape} ({key}: {base.get('source', '')})"
    if kind == "gpus":  # which built-in's fit it carries (`gpu_fit`; `presets.gpu` takes it off)
        merged["like"] = key
    return merged


# A GPU's fields that leave what its fitted sustained efficiency measured as it was (the fit scales its
# GEMMs' rate: `tools/fit_efficiency.py`): its name, its memory's capacity (what fits, not how fast),
# its host link and host CPU's Adam rate (offload alone), and the serving engine's matrix-vector cut
# (set by `engines.serving`). Any other field a file changes is one that fit did not measure.
FIT_NEUTRAL = (
    "name",
    "memory_bytes",
    "host_link_bytes_per_s",
    "host_adam_params_per_s",
    "matvec_max_rows",
    "mmq_token_tiles",
    "fit_name",
    "fit_changed",
)


def gpu_fit(gpu: Gpu, base: Gpu) -> Gpu:
    """`gpu`, read from a file whose `like:` names the built-in `base`, with the fit it carries: the
    built-in's name and the fields (YAML names) where it differs from it in what that fit measured, for
    the 80% interval (`calibration.spreads.gpu_term`: none changed, the built-in's own term; the memory
    bandwidth alone, a sibling's; anything else, a GPU fitted on no published run)."""
    from shardwise.loaders import _GPU_FIELDS

    yaml_name = {attr: key for key, (attr, _) in _GPU_FIELDS.items()}
    changed = [
        yaml_name.get(f.name, f.name)
        for f in dataclasses.fields(gpu)
        if f.name not in FIT_NEUTRAL and not _same(getattr(gpu, f.name), getattr(base, f.name))
    ]
    return gpu.with_(fit_name=base.fit_name or base.name, fit_changed=", ".join(changed))


def _same(a: Any, b: Any) -> bool:
    """Equal values; numbers to 1e-9 relative (3.35TB/s and 3350GB/s parse one ulp apart)."""
    numbers = (int, float)
    if isinstance(a, numbers) and isinstance(b, numbers) and not isinstance(a, bool) and not isinstance(b, bool):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0)
    return bool(a == b)
