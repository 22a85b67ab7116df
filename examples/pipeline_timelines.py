"""Pipeline schedules simulated operation by operation, against the closed form.

    python examples/pipeline_timelines.py               # table + Gantt charts in docs/figures/
    python examples/pipeline_timelines.py --no-figures  # the table only

Two settings: the brief's model (hidden 4096, 96 layers) with PP=8 on one DGX A100 and 16
micro-batches; and GPT-3 175B as Korthikanti et al. 2022 Table 5 ran it (64 A100s, TP=8, PP=8,
64 micro-batches of 1, selective recomputation, sequence parallelism; measured 13.75 s with the
interleaved schedule, v=3).
"""

import sys
from pathlib import Path

from shardwise import Plan, Scenario, estimate_training_step, plots, presets
from shardwise.engines.simulated import simulate_training_step

OUT = Path(__file__).resolve().parent.parent / "docs" / "figures"
SETTINGS = {
    "gpt-96l-4096h, pp=8, m=16": (
        presets.model("gpt-96l-4096h"),
        presets.system("dgx-a100"),
        Plan(pp=8, global_batch=16),
    ),
    "gpt3-175b, tp=8 pp=8, m=64": (
        presets.model("gpt3-175b"),
        presets.system("dgx-a100", nodes=8),
        Plan(tp=8, pp=8, global_batch=64, recompute="selective", sequence_parallel=True, flash_attention=False),
    ),
}
SCHEDULES = {"gpipe": {}, "1f1b": {}, "interleaved": {"vpp": 3}, "zb-h1": {}}


def main(figures: bool) -> None:
    print(
        f"{'setting':28s} {'schedule':15s} {'closed form':>11s} {'simulated':>10s} {'diff':>6s} "
        f"{'idle':>7s} {'stage-0 peak':>12s}"
    )
    for setting, (model, cluster, plan) in SETTINGS.items():
        for schedule, extra in SCHEDULES.items():
            if schedule == "interleaved" and model.layers % (plan.pp * extra["vpp"]):
                continue
            scn = Scenario(model, cluster, plan.with_(schedule=schedule, **extra))
            closed = float(estimate_training_step(scn).step_time_s)
            sim = simulate_training_step(scn)
            s = sim.simulation
            print(
                f"{setting:28s} {schedule + (' v=3' if extra else ''):15s} {closed:10.3f}s {s.makespan_s:9.3f}s "
                f"{(s.makespan_s - closed) / closed:+6.1%} {s.mean_stage_idle_fraction:7.1%} "
                f"{s.peak_in_flight[0]:12.3g}"
            )
            if figures and setting.startswith("gpt-96l"):
                OUT.mkdir(parents=True, exist_ok=True)
                title = (
                    f"brief model, PP=8, 16 micro-batches, {schedule}: step {s.makespan_s:.3g} s, "
                    f"stages idle {s.mean_stage_idle_fraction:.1%}"
                )
                plots.save(plots.gantt(s, title), OUT / f"timeline-{schedule}.png", tight=False)


if __name__ == "__main__":
    main(figures="--no-figures" not in sys.argv)
