"""`--emit` on the command line: the launch of the best plan, re-priced when the tool runs it
differently, refused when what it runs does not fit in memory."""

from __future__ import annotations

from typing import Any

from shardwise.emit import TARGET_STACKS, EmitError, adapt, emit
from shardwise.specs import Scenario
from shardwise.units import whole_bytes


def training_launch(
    scn: Scenario, target: str, version: str | None, capacity_bytes: float, priced_step_s: float
) -> dict[str, Any]:
    """The launch of `scn` by `target` as a dict (`Launch.as_dict`), with the priced step time
    and, when the tool runs another plan, that plan's step time and memory."""
    target = target.lower()
    run, changes = adapt(scn, target, version)
    # the stack the times are priced under (`requests.emit_stack`: the tool's own, unless --framework named another)
    out: dict[str, Any] = {
        "priced_step_time_s": priced_step_s,
        "launched_step_time_s": priced_step_s,
        "priced_framework": str(scn.plan.framework),
    }
    if changes:
        from shardwise.analyses.planner import confirmed_estimate

        est = confirmed_estimate(run)
        memory = float(est.memory.total_bytes)
        if memory > capacity_bytes:
            raise EmitError(
                f"--emit {target}: the plan {target} runs ({'; '.join(changes)}) needs {memory / 1e9:.1f} GB per GPU, "
                f"more than the {capacity_bytes / 1e9:.1f} GB planned for; fix the plan (--tp, --pp, --zero, ...) "
                "to what it runs"
            )
        out["launched_step_time_s"] = float(est.step_time_s)
        out["launched_memory_bytes"] = whole_bytes(memory)  # whole bytes in JSON, as every memory
    return {**emit(scn, target, version).as_dict(), **out}


def text(launch: dict[str, Any], which: str = "the best plan") -> str:
    from shardwise.units import format_seconds

    stack, own = launch.get("priced_framework"), TARGET_STACKS.get(launch["target"], ())
    if stack is None or (stack, launch["target"]) == ("megatron-core", "megatron"):
        stack = ""  # Megatron-LM's own stack, the default: nothing to say
    elif stack in own:
        stack = f", priced under {stack}"
    else:
        stack = f", priced under {stack} (--framework), not {own[0]}"
    head = f"\nlaunch {which} with {launch['target']} ({launch['version']}){stack}:"
    if launch["changes"]:
        launched, priced = (format_seconds(launch[k]) for k in ("launched_step_time_s", "priced_step_time_s"))
        # the same time as shown: not '104 s per step instead of 104 s' (review 43 #10); the launch's
        # '# launched as re-priced' lines say what differs
        same = f"(its '# launched as re-priced' lines), re-priced at the same {launched} per step"
        price = same if launched == priced else f"re-priced: {launched} per step instead of {priced}"
        head += (
            f"\n{launch['target']} runs a different plan{' ' if launched == priced else ', '}{price} "
            f"({launch['launched_memory_bytes'] / 1e9:.1f} GB per GPU)"
        )
    return f"{head}\n{launch['shell']}"
