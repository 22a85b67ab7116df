"""What a framework preset states about a layout the user leaves open: the pipeline schedule its
trainer runs by default and whether its tensor parallelism runs with sequence parallelism, and the
host count of the other linear-layer mode it offers. Request-layer defaults, not `Plan` fields: a
flag given (`--schedule`, `--sequence-parallel`) wins, and without them the project's defaults
hold (1F1B, interleaved with --vpp > 1; sequence parallelism wherever tp > 1).

nanotron states both: `ParallelismArgs.__post_init__` (huggingface/nanotron
src/nanotron/config/parallelism_config.py, the same in v0.4, v0.5, 0e0a27ea of February 2025 and
main of 2026) sets `pp_engine = AllForwardAllBackwardPipelineEngine()` (every micro-batch's forward,
then every backward: GPipe's order, `Schedule.GPIPE`, at pp = 1 too),
`tp_mode = TensorParallelLinearMode.ALL_REDUCE` (no sequence parallelism) and
`tp_linear_async_communication = False` when a config leaves them out.
"""

from __future__ import annotations

from typing import Any

from shardwise.errors import SpecError

DEFAULT_FIELDS = ("schedule", "sequence_parallel", "layer_host_ops_async_sp")
# a preset's default schedule: one that needs no --vpp
PRESET_SCHEDULES = ("gpipe", "1f1b", "zb-h1")
MAX_HOST_OPS = 10_000


def check_default_fields(key: str, data: dict[str, Any]) -> None:
    """One line naming the field and what is allowed, for a preset's default fields."""
    schedule = data.get("schedule")
    if schedule is not None and schedule not in PRESET_SCHEDULES:
        allowed = ", ".join(PRESET_SCHEDULES)
        raise SpecError(f"framework {key!r}: schedule: {schedule!r} is not allowed; choose {allowed}")
    if "sequence_parallel" in data and not isinstance(data["sequence_parallel"], bool):
        value = data["sequence_parallel"]
        raise SpecError(f"framework {key!r}: sequence_parallel: {value!r} is not allowed; give true or false")
    if "layer_host_ops_async_sp" in data:
        value = data["layer_host_ops_async_sp"]
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= MAX_HOST_OPS:
            raise SpecError(
                f"framework {key!r}: layer_host_ops_async_sp: {value!r} is not allowed; "
                f"give host operations per layer, 0-{MAX_HOST_OPS}"
            )


def framework_schedule(name: str) -> str | None:
    """The framework's default pipeline schedule (None: the project's, 1F1B)."""
    from shardwise import presets

    value = presets._checked_framework(name).get("schedule")
    return None if value is None else str(value)


def framework_sequence_parallel(name: str) -> bool | None:
    """Whether the framework's tensor parallelism runs with sequence parallelism by default (None:
    the project's default, on wherever tp > 1)."""
    from shardwise import presets

    value = presets._checked_framework(name).get("sequence_parallel")
    return None if value is None else bool(value)


def framework_async_sp_host_ops(name: str) -> float | None:
    """The framework's host operations per layer and micro-batch when its linears run with sequence
    parallelism and asynchronous communication (`layer_host_ops` counts its default mode); None
    where it states no second count."""
    from shardwise import presets

    value = presets._checked_framework(name).get("layer_host_ops_async_sp")
    return None if value is None else float(value)
