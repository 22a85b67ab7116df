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
    help="analytic: the cost model (1F1B by its exact recurrence; GPipe, interleaved and zero-bubble "
    "schedules by the closed form, approximate with unequal stages); simulate: discrete-event "
    "simulation of the pipeline schedule.",
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
    from shardwise.cli.options import echo_notes
    from shardwise.requests.training import PredictRequest

    result = PredictRequest.from_options(options, engine, emit, emit_version).run()
    echo_notes(result.notes)
    if as_json:
        from shardwise import export

        click.echo(export.dumps(result.as_dict()))
        return
    from shardwise.cli.render import print_estimate

    interval = (result.step_time_s_low, result.step_time_s_high, result.interval_basis)
    print_estimate(result.estimate, interval, result.recompute_from)
    if result.launch is not None:
        click.echo(result.launch_text())
