"""`shardwise predict`: one scenario, one training step."""

from __future__ import annotations

from typing import Any

import click

from shardwise.cli.options import cluster_options, emit_option, emit_version_option, model_options, plan_options


@click.command()
@model_options
@cluster_options
@plan_options
@click.option(
    "--engine",
    type=click.Choice(["analytic", "simulate"], case_sensitive=False),
    default="analytic",
    show_default=True,
    help="analytic: the closed form; simulate: discrete-event simulation of the pipeline schedule.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (step_time_s, breakdown_s, memory_bytes, ...).")
@emit_option("this plan's", "docs/emit/; --json carries it as `launch`")
@emit_version_option
def predict(engine: str, as_json: bool, emit: str | None, emit_version: str | None, **options: Any) -> None:
    """Time, throughput and memory of one training step of MODEL on a cluster under a plan.

    \b
    Examples:
      shardwise predict --model gpt3-175b --system dgx-a100 --nodes 8 --tp 8 --pp 8 \\
          --global-batch 64 --recompute full
      shardwise predict --layers 96 --hidden 4096 --heads 32 --gpu a100-sxm4-80gb \\
          --intra-link pcie4 --num-gpus 8 --pp 8 --global-batch 32 --json
      shardwise predict --model llama3-70b --system dgx-h100 --nodes 4 --tp 8 --pp 4 \\
          --global-batch 128 --recompute selective --emit megatron
    """
    from shardwise.cli.options import echo_notes, request_of
    from shardwise.requests.plan import checked_emit
    from shardwise.requests.training import PredictRequest

    target = checked_emit(emit, emit_version, "`predict` prices training")
    result = PredictRequest(request_of(options), engine).run()
    launch = None if target is None else _launch(result, target, emit_version)
    echo_notes(result.notes)
    if as_json:
        from shardwise import export

        click.echo(export.dumps({**result.as_dict(), **({"launch": launch} if launch is not None else {})}))
        return
    from shardwise.cli.render import print_estimate

    print_estimate(result.estimate, (result.step_time_s_low, result.step_time_s_high, result.interval_basis))
    if launch is not None:
        from shardwise.emit.report import text

        click.echo(text(launch, "this plan"))


def _launch(result: Any, target: str, version: str | None) -> dict[str, Any]:
    """The launch of the priced plan by `target` (`emit.report.training_launch`): refused when the
    plan, or what the tool runs of it, does not fit in the GPU's memory."""
    from shardwise.emit import EmitError
    from shardwise.emit.report import training_launch
    from shardwise.units import format_capacity

    est = result.estimate
    capacity = float(est.scenario.cluster.gpu.memory_bytes)
    if not bool(est.fits_in_memory):
        raise EmitError(
            f"--emit {target}: this plan needs {float(est.memory.total_bytes) / 1e9:.1f} GB per GPU, more than "
            f"{format_capacity(capacity)}; fix the plan (--tp, --pp, --zero, --recompute, ...) until it fits"
        )
    return training_launch(est.scenario, target, version, capacity, float(est.step_time_s))
