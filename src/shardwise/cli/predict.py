"""`shardwise predict`: one scenario, one training step."""

from __future__ import annotations

from typing import Any

import click

from shardwise.cli.options import cluster_options, model_options, plan_options


@click.command()
@model_options
@cluster_options
@plan_options
@click.option(
    "--engine",
    type=click.Choice(["analytic", "simulate"]),
    default="analytic",
    show_default=True,
    help="analytic: the closed form; simulate: discrete-event simulation of the pipeline schedule.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (step_time_s, breakdown_s, memory_bytes, ...).")
def predict(engine: str, as_json: bool, **options: Any) -> None:
    """Time, throughput and memory of one training step of MODEL on a cluster under a plan.

    \b
    Examples:
      shardwise predict --model gpt3-175b --system dgx-a100 --nodes 8 --tp 8 --pp 8 \\
          --global-batch 64 --recompute full
      shardwise predict --layers 96 --hidden 4096 --heads 32 --gpu a100-sxm4-80gb \\
          --intra-link pcie4 --num-gpus 8 --pp 8 --global-batch 32 --json
    """
    from shardwise.cli.options import build_scenario, spread_of
    from shardwise.engines.training import estimate_training_step

    scn = build_scenario(options)
    if engine == "simulate":
        from shardwise.engines.simulated import simulate_training_step

        est = simulate_training_step(scn).estimate
    else:
        est = estimate_training_step(scn)
    spread = spread_of([scn], options)
    low, high = (float(x[0]) for x in spread.bounds(float(est.step_time_s)))
    if as_json:
        from shardwise import export

        tokens = float(est.tokens_per_s)
        step = float(est.step_time_s)
        interval = {
            "step_time_s_low": low,
            "step_time_s_high": high,
            "tokens_per_s_low": tokens * step / high,
            "tokens_per_s_high": tokens * step / low,
            "interval": {"level": 0.8, "basis": spread.basis},
        }
        click.echo(
            export.dumps(
                {
                    **export.estimate_dict(est),
                    **interval,
                    "engine": engine,
                    "scenario": export.scenario_dict(est.scenario),
                }
            )
        )
        return
    from shardwise.cli.render import print_estimate

    print_estimate(est, (low, high, spread.basis))
