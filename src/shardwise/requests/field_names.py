"""The names a `TrainingRequest` or an `ExperimentRequest` gives (a framework, a precision,
Megatron-Core's modules and CUDA graph scopes, a stage list) and the MoE capacity flags' rules,
checked when the request is built, in the command line's words, as `field_ranges` checks the numbers
(review: `TrainingRequest(framework="nope")` constructed and failed only in `.run()`). The plan's own
checks (`specs.plan_checks`, `specs.plan_fields`) stay: they name the `Plan` fields."""

from __future__ import annotations

from typing import Any

from shardwise.errors import SpecError


def check_framework(name: str | None) -> None:
    """A framework preset's name, or a YAML file's path (read when the request is priced)."""
    from shardwise import presets

    if name is None or presets._looks_like_path(name):
        return
    table = presets.raw("frameworks")
    if name.strip().lower() in table:
        return
    import difflib

    # only a name close enough to be a typo, as the command line's did-you-mean (cutoff 0.6; review 42:
    # 'nope' was told "closest: composer"); else the presets themselves
    close = difflib.get_close_matches(name.strip().lower(), table, n=3, cutoff=0.6)
    hint = f"closest: {', '.join(close)}; " if close else ""
    listed = "`shardwise presets frameworks`" if close else ", ".join(sorted(table))
    raise SpecError(f"--framework: {name!r} is not allowed; {hint}give a preset ({listed}) or a YAML file")


def check_names(t: Any) -> None:
    """A `TrainingRequest`'s names and the MoE capacity flags' rules (`specs.plan_checks._capacity_rules`)."""
    from shardwise.precisions import TRAINING_PRECISIONS
    from shardwise.recompute_policies import CUDA_GRAPH_SCOPES, RECOMPUTE_MODULES

    check_framework(t.framework)
    if t.precision is not None and t.precision not in TRAINING_PRECISIONS:
        raise SpecError(f"--precision: {t.precision!r} is not allowed; use one of {', '.join(TRAINING_PRECISIONS)}")
    _names("--recompute-modules", t.recompute_modules, RECOMPUTE_MODULES)
    note = " (whole MoE layers are graphed only when tokens are dropped and padded)"
    scopes = _names("--cuda-graph-scope", t.cuda_graph_scope, CUDA_GRAPH_SCOPES, note)
    if t.stage_layers is not None and isinstance(t.stage_layers, str):
        for part in (x for x in t.stage_layers.replace(" ", "").split(",") if x):
            if not part.isdigit() or int(part) < 1:
                raise SpecError(
                    f"--stage-layers: {t.stage_layers!r} is not allowed; give each stage's layers, whole numbers >= 1 "
                    "separated by commas (e.g. 7,9,9,7)"
                )
    if t.moe_pad_to_capacity and t.moe_capacity_factor <= 0:
        raise SpecError(
            "--moe-pad-to-capacity needs --moe-capacity-factor > 0 (Megatron-Core's rule: it pads each expert to "
            "its capacity); set --moe-capacity-factor or drop --moe-pad-to-capacity"
        )
    if t.moe_pad_to_capacity and t.moe_dispatcher != "alltoall":
        raise SpecError(
            f"--moe-pad-to-capacity runs with the alltoall dispatcher, not --moe-dispatcher {t.moe_dispatcher} "
            "(Megatron-Core's drop-and-pad path); use --moe-dispatcher alltoall or drop --moe-pad-to-capacity"
        )
    dropping = t.moe_capacity_factor > 0 and not t.moe_pad_to_capacity and t.moe_dispatcher == "alltoall"
    if dropping and "moe_preprocess" in scopes:
        raise SpecError(
            "--cuda-graph-scope moe_preprocess with token dropping unpadded (--moe-capacity-factor without "
            "--moe-pad-to-capacity): its preprocessing copies to the host, which Megatron-Core refuses to capture "
            "(arguments.py / transformer_config.py); add --moe-pad-to-capacity or leave moe_preprocess out"
        )


def _names(flag: str, value: Any, allowed: tuple[str, ...], moe_note: str = "") -> tuple[str, ...]:
    """A comma-separated list of names, each in `allowed` ("" or "none": none); `moe_note` added where
    the one refused is "moe" (`specs.plan_fields.cuda_graph_scope_of`)."""
    if value is None or not isinstance(value, str) or value.strip() in ("", "none"):
        return ()
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    for name in names:
        if name not in allowed:
            extra = moe_note if name == "moe" else ""
            raise SpecError(f"{flag}: {name!r} is not allowed; choose from {', '.join(allowed)}{extra}")
    return names
