"""`shardwise calibrate --suggest N`: the runs to measure next for a job (the flags `plan` takes),
chosen by `calibration.suggest`, with their launch commands (`--emit`)."""

from __future__ import annotations

from typing import Any

import click

# the `deepspeed` emitter writes Megatron-DeepSpeed's launch (emit/deepspeed.py)
DEFAULT_EMIT = {
    "torchtitan": "torchtitan",
    "torchtitan-compile": "torchtitan",
    "deepspeed": "deepspeed",
    "megatron-deepspeed": "deepspeed",
}


def default_target(framework: str) -> str:
    """The tool a suggested run is launched with: the stack's own where it has one, a framework
    file's from the built-in it starts from (`like:`), else Megatron-LM."""
    if framework:
        from shardwise.presets.stack_defaults import builtin_of

        framework = builtin_of(framework)
    return DEFAULT_EMIT.get(framework, "megatron")


def search_for(options: dict[str, Any], values: dict[str, float] | None, emit: str | None = None) -> Any:
    """The planner's search of the job in `options` on its cluster calibrated by `values` (None:
    the presets), as `shardwise plan` asks it (`requests.plan.PlanRequest.search`); with `emit`,
    under the stack that tool's launch runs, as `plan --emit` searches (`requests.emit_stack`)."""
    from dataclasses import replace

    from shardwise.cli.options import echo_notes
    from shardwise.requests.plan import PlanRequest

    asked = {k: v for k, v in options.items() if k not in ("emit", "emit_version", "top", "calibration")}
    request = PlanRequest.from_options(asked)
    if emit is not None:
        from shardwise.requests.emit_stack import emit_training

        training, notes = emit_training(request.training, emit.lower(), searched=True)
        request = replace(request, training=training)
        echo_notes(list(notes))
    return request.search(values)


def run_suggest(
    n: int,
    fit: Any,
    basis: str,
    options: dict[str, Any],
    emit: str | None,
    emit_version: str | None,
    as_json: bool,
    measured: list[Any],
    runs: tuple[list[Any], Any] | None = None,
    confounds: tuple[Any, ...] = (),
) -> None:
    """Print (or return as JSON) the n runs to measure next; `runs`: the cases and measured figures
    `fit` was fitted on (their likelihood weighs the particles, `calibration.suggest`); `confounds`:
    parameters those runs cannot tell apart (`calibration.confound`), each named with the run that
    would separate them."""
    from shardwise.calibration import suggest as sg
    from shardwise.errors import SpecError

    if options.get("global_batch") is None or not options.get("model_name"):
        raise SpecError("--suggest: give the job as `plan` takes it: --model, --system, --nodes, --global-batch")
    result = search_for(options, fit.values if fit is not None else None, emit)
    if result.ranked(1).size == 0:
        raise SpecError(f"--suggest: none of the {result.evaluated:,} plans fits in memory; `shardwise plan` says why")
    measured_idx = sg.measured_plans(result, measured)
    matched = sum(1 for scn in measured if sg.measured_plans(result, [scn]))  # runs that are plans of this job
    found = sg.suggest(result, fit, n, measured_idx, runs=runs)
    target = (emit or default_target(str(options.get("framework") or ""))).lower()
    capacity = float(result.cluster.gpu.memory_bytes) - result.space.memory_headroom_bytes
    launches = [_launch(result, r, target, emit_version, capacity) for r in found.runs]
    separate = separating(result, found, confounds, fit)
    if as_json:
        from shardwise import export

        click.echo(export.dumps({**_as_dict(result, found, launches, basis), "separate": separate}))
        return
    _print(result, found, launches, basis, (matched, len(measured), len(measured_idx)))
    for item in separate:
        click.echo(f"note: {item['note']}", err=True)


CANDIDATES = 64  # the plans (best first) among which a run that separates two confounded parameters is sought


def separating(result: Any, found: Any, confounds: tuple[Any, ...], fit: Any) -> list[dict[str, Any]]:
    """For each pair of parameters the runs cannot tell apart (`calibration.confound`): whether a
    suggested run separates them (its step differs by more than the noise between the two fits),
    else the plan of the CANDIDATES best that separates them most."""
    if not confounds:
        return []
    import numpy as np

    from shardwise.calibration.confound import gradient, separation
    from shardwise.calibration.regret import label

    sigma = float(fit.noise_log_sd)
    suggested = [r.plan for r in found.runs]
    plans = list(dict.fromkeys([*suggested, *(int(i) for i in result.ranked(CANDIDATES))]))
    g = gradient([result.scenario(i) for i in plans])  # the search is priced calibrated already
    out = []
    for pair in confounds:
        sep = separation(g, pair)
        which = f"{pair.fitted} from {pair.other}"
        done = [k for k, p in enumerate(suggested) if sep[plans.index(p)] > sigma]
        if done:
            k = done[0]
            gap = sep[plans.index(suggested[k])]
            text = f"run {k + 1} suggested tells {which}: its step differs by {gap:.0%} between the two fits"
            out.append({"fitted": pair.fitted, "other": pair.other, "plan": label(result, suggested[k]), "note": text})
            continue
        best = int(np.argmax(sep))
        if sep[best] > sigma:
            text = (
                f"no run suggested tells {which}; {label(result, plans[best])} would: its step differs by "
                f"{sep[best]:.0%} between the two fits (noise {sigma:.0%})"
            )
            plan = label(result, plans[best])
        else:
            text = f"no plan of this job tells {which} beyond the noise ({sigma:.0%}): {pair.how()}"
            plan = None
        out.append({"fitted": pair.fitted, "other": pair.other, "plan": plan, "note": text})
    return out


def _launch(result: Any, run: Any, target: str, version: str | None, capacity: float) -> dict[str, Any]:
    from shardwise.emit import EmitError
    from shardwise.emit.report import training_launch

    try:
        return training_launch(result.scenario(run.plan), target, version, capacity, run.step_time_s)
    except EmitError as exc:
        return {"target": target, "error": str(exc)}


def _as_dict(result: Any, found: Any, launches: list[dict[str, Any]], basis: str) -> dict[str, Any]:
    from dataclasses import asdict

    from shardwise.calibration.regret import label

    reg = found.regret
    return {
        "pick": {"label": label(result, reg.pick), **result.row(reg.pick)},
        "regret": {**asdict(reg), "basis": basis},
        "noise_log_sd": found.noise_log_sd,
        "suggestions": [
            {"label": label(result, r.plan), **asdict(r), "row": result.row(r.plan), "launch": launch}
            for r, launch in zip(found.runs, launches, strict=True)
        ],
    }


def _print(result: Any, found: Any, launches: list[dict[str, Any]], basis: str, measured: tuple[int, int, int]) -> None:
    """`measured`: (runs that are plans of this job, runs given, the search's plans they ran: a run
    names no schedule or sharding group, so one run can be several of the search's plans)."""
    import textwrap

    from shardwise.calibration.parameters import BY_NAME
    from shardwise.calibration.regret import describe, label
    from shardwise.cli.render import console
    from shardwise.units import format_seconds

    out = console()
    wrap = textwrap.TextWrapper(width=max(out.width, 60) - 1, subsequent_indent="    ")
    m, c, reg = result.model, result.cluster, found.regret
    out.print(
        f"[bold]{m.name}[/] on {int(c.num_gpus)} x {c.gpu.name}, global batch {result.global_batch}; "
        f"{reg.pool_size} plans could be the fastest under {basis}",
        highlight=False,
    )
    out.print(wrap.fill(f"today's pick: {label(result, reg.pick)}"), markup=False, highlight=False)
    out.print(wrap.fill(describe(reg, lambda i: label(result, i))), markup=False, highlight=False)
    matched, given, plans = measured
    if matched:
        variants = f" ({plans} plans of the search, with variants a run does not name: schedule, shard group)"
        variants = variants if plans != matched else ""
        out.print(
            wrap.fill(
                f"({matched} of the {given} runs measured are layouts of this job{variants}: not suggested again)"
            ),
            highlight=False,
        )
    if not found.runs:
        out.print("nothing left to measure among the contending plans")
        return
    out.print(f"measure next, in this order (each a few steps; {len(found.runs)} run(s)):")
    for k, (r, launch) in enumerate(zip(found.runs, launches, strict=True), start=1):
        narrowed = sorted(((v, n) for n, v in r.narrows.items() if v >= 0.05), reverse=True)[:3]
        settles = ", ".join(f"{BY_NAME[n].description} by {v:.0%}" for v, n in narrowed) or "no parameter much"
        lines = [
            f"{k}. {label(result, r.plan)}: predicted {format_seconds(r.step_time_s)} per step "
            f"(+-{r.spread_log_sd:.0%} (1 sd) before it is measured)",
            f"   settles: narrows {settles}; expected regret after {r.regret_after:.1%} "
            f"(the pick changes in {r.pick_changes:.0%} of outcomes)",
        ]
        for line in lines:
            out.print(wrap.fill(line), markup=False, highlight=False)
        if "error" in launch:
            out.print(wrap.fill(f"   no launch: {launch['error']}"), markup=False, highlight=False)
        else:
            changed = f" (runs a different plan: {'; '.join(launch['changes'])})" if launch["changes"] else ""
            head = f"   launch with {launch['target']} ({launch['version']}){changed}:"
            out.print(head, markup=False, highlight=False)
            click.echo(textwrap.indent(launch["shell"], "   "))
    out.print(
        wrap.fill(
            "then add each measured step time to your runs CSV (step_time_s), and run `shardwise calibrate RUNS.csv "
            "--suggest N` with the same job flags again: the next runs depend on what these show"
        ),
        markup=False,
        highlight=False,
    )
