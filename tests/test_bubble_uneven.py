"""Review 41 #2: the closed form's pipeline makespan with stages of unequal time
(`engines.pipeline.one_f_one_b_makespan_s`) agrees with the discrete-event simulator, which runs
the schedule operation by operation: nanotron's compute split (the extra layers on stage 0: 11,
10 x 6, 9 of Llama 3 70B over 8 stages), Megatron's first/last-stage layers either way,
Megatron-DeepSpeed's partition, fewer micro-batches than stages, and GPipe (nanotron's
all-forward-all-backward). The old closed form charged a heavier first stage (p - 1) x the other
stages' time: 0.835 s of bubble against the simulator's 0.749 s on the 70B plan."""

from __future__ import annotations

import numpy as np
import pytest

from shardwise.engines.pipeline import one_f_one_b_makespan_s, pipeline_makespan_s
from shardwise.engines.simulated import simulate_training_step
from shardwise.engines.training import estimate_training_step
from shardwise.requests.training import TrainingRequest

BASE = "--seq-len 4096 --system dgx-h100 "
CASES = (
    "--model llama3-70b --nodes 32 --global-batch 256 --framework nanotron --tp 4 --pp 8 --micro-batch 1 --zero 1 "
    "--schedule 1f1b",
    "--model llama3-70b --nodes 4 --global-batch 256 --framework nanotron --tp 8 --pp 4 --micro-batch 1 --zero 0 "
    "--schedule 1f1b",
    "--model llama3.1-8b --nodes 4 --global-batch 256 --framework nanotron --tp 2 --pp 2 --micro-batch 2 --zero 1 "
    "--schedule 1f1b",
    "--model llama3.2-1b --nodes 1 --global-batch 4 --framework nanotron --tp 1 --pp 4 --dp 2 --micro-batch 1 "
    "--zero 0 --schedule 1f1b",  # 2 micro-batches through 4 stages
    "--model llama3.1-8b --nodes 1 --global-batch 64 --framework megatron-core --tp 2 --pp 4 --micro-batch 1 "
    "--first-stage-layers 6 --last-stage-layers 10",
    "--model llama3.1-8b --nodes 1 --global-batch 64 --framework megatron-core --tp 2 --pp 4 --micro-batch 1 "
    "--first-stage-layers 10 --last-stage-layers 6",
    "--model llama3.1-8b --nodes 1 --global-batch 4 --framework megatron-core --tp 2 --pp 4 --micro-batch 1 "
    "--first-stage-layers 10 --last-stage-layers 6",
    "--model llama3.1-8b --nodes 1 --global-batch 64 --framework megatron-deepspeed --tp 2 --pp 4 --micro-batch 1",
    "--model llama3-70b --nodes 32 --global-batch 256 --framework nanotron --tp 4 --pp 8 --micro-batch 1 --zero 1 "
    "--schedule gpipe",
)


@pytest.mark.parametrize("argv", CASES)
def test_closed_form_bubble_is_the_simulators_on_uneven_stages(argv):
    scn = TrainingRequest.from_argv(BASE + argv).scenario()
    closed = estimate_training_step(scn)
    sim = simulate_training_step(scn, records=False).estimate
    assert float(np.asarray(closed.step_time_s)) == pytest.approx(float(np.asarray(sim.step_time_s)), rel=1e-6)
    assert float(np.asarray(closed.breakdown.pp_bubble_s)) == pytest.approx(
        float(np.asarray(sim.breakdown.pp_bubble_s)), rel=1e-5, abs=1e-9
    )


def test_heavier_first_stage_waits_less_than_p_minus_1_other_stages():
    # the review's hand numbers: stage 0 0.1316 s per micro-batch (f + b), stages 1-6 0.119, stage 7 0.1206
    c, m, p = (0.1316, 0.119, 0.1206), 32, 8
    forward = tuple(x / 3 for x in c)
    mids = 6 * 0.119
    old = pipeline_makespan_s(*c, p, m, 1, mids)
    new = one_f_one_b_makespan_s(c, forward, p, m, mids)
    assert float(old) - m * c[0] == pytest.approx(0.835, abs=1e-3)
    assert float(new) - m * c[0] == pytest.approx(2 * 0.835 - 7 * 0.1316, abs=1e-3)  # 0.749 s


def test_equal_stages_keep_m_plus_p_minus_1():
    for m, p in ((32, 8), (8, 4), (2, 4), (1, 2)):
        c = 0.1
        got = one_f_one_b_makespan_s((c, c, c), (c / 3, c / 3, c / 3), p, m, (p - 2) * c)
        # with fewer micro-batches than stages too: the last stage runs F B F B ..., m c after the
        # first forward's fill, then the last backward's drain
        assert float(got) == pytest.approx((m + p - 1) * c), (m, p)


def test_plan_says_which_step_times_are_simulated():
    from click.testing import CliRunner

    from shardwise.cli import cli as main

    args = "plan --model llama3.1-8b --seq-len 4096 --system dgx-h100 --nodes 1 --global-batch 64 --pp 2 --tp 2"
    done = CliRunner().invoke(main, [*args.split(), "--schedule", "interleaved,1f1b"])
    assert done.exit_code == 0, done.output
    assert "s* " in done.output and "* step time simulated operation by operation" in done.output
