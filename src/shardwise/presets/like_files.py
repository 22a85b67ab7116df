"""`like: NAME` in a model or GPU file: the built-in preset NAME's fields, the file's own over them,
as framework files take theirs (`framework_fields.with_like`, which keeps a framework's stack apart).
A link or system file states its own fields: `like:` there is refused in one line."""

from __future__ import annotations

from typing import Any

from shardwise.errors import SpecError

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
    return merged
