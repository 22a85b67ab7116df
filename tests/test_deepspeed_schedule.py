"""DeepSpeed's 1F1B (deepspeed/runtime/pipe/schedule.py `TrainSchedule`, v0.6-v0.9.5) replayed
with blocking, in-order sends and receives: neighbouring stages run forward and backward in
opposite phases, yet the step takes what the model charges, (m + p - 1)(t_f + t_b), plus about
four transfers a micro-batch (`physics.microbatch.pipeline_transfers`). This is the evidence that
the schedule itself adds no per-micro-batch cost (docs/model.md, "What the DeepSpeed pipeline
engine does per micro-batch")."""

from __future__ import annotations

import pytest

from shardwise.physics.microbatch import SERIAL_TRANSFERS


def _micro_batch(step: int, stage: int, stages: int) -> tuple[int, bool]:
    """TrainSchedule._step_to_micro_batch: (micro-batch id, forward?)."""
    even_step, even_stage = step % 2 == 0, stage % 2 == 0
    if even_step and even_stage:
        return step // 2 - stage // 2, True
    if not even_step and not even_stage:
        return (step - 1) // 2 - stage // 2, True
    if even_step:
        return step // 2 - stages + (stage + 1) // 2, False
    return (step - 1) // 2 - stages + 1 + stage // 2, False


def _program(stage: int, stages: int, micro_batches: int) -> list[tuple]:
    """The instructions TrainSchedule.steps() yields for one stage, in order."""
    out: list[tuple] = []
    prev = None
    for step in range(2 * (micro_batches + stages - 1)):
        mb, forward = _micro_batch(step, stage, stages)
        mb = mb if 0 <= mb < micro_batches else None
        if forward:
            if prev is not None and stage > 0:
                out.append(("send", "grad", prev, stage - 1))
            if mb is not None and stage > 0:
                out.append(("recv", "act", mb, stage - 1))
        else:
            if mb is not None and stage < stages - 1:
                out.append(("recv", "grad", mb, stage + 1))
            if prev is not None and stage < stages - 1:
                out.append(("send", "act", prev, stage + 1))
        if mb is not None:
            out.append(("F" if forward else "B", mb))
        prev = mb
    return out


def _replay(
    stages: int,
    micro_batches: int,
    t_f: float | list[float],
    t_b: float | list[float],
    transfer_s: float,
) -> float:
    """Each stage runs its instructions in order; a send and its receive complete together,
    `transfer_s` after both are posted (blocking p2p.send / p2p.recv). `t_f` and `t_b`: one time
    for every stage, or one per stage."""
    t_f = t_f if isinstance(t_f, list) else [t_f] * stages
    t_b = t_b if isinstance(t_b, list) else [t_b] * stages
    programs = [_program(s, stages, micro_batches) for s in range(stages)]
    pc, clock, posted = [0] * stages, [0.0] * stages, {}
    while any(pc[s] < len(programs[s]) for s in range(stages)):
        moved = False
        for s in range(stages):
            while pc[s] < len(programs[s]):
                op = programs[s][pc[s]]
                if op[0] in ("F", "B"):
                    clock[s] += t_f[s] if op[0] == "F" else t_b[s]
                    pc[s] += 1
                    moved = True
                    continue
                key = (op[1], op[2], min(s, op[3]), max(s, op[3]))
                if key in posted and posted[key][0] != s:
                    other, posted_at = posted.pop(key)
                    clock[s] = clock[other] = max(posted_at, clock[s]) + transfer_s
                    pc[s] += 1
                    pc[other] += 1
                    moved = True
                    continue
                posted.setdefault(key, (s, clock[s]))
                break
        assert moved, "the schedule deadlocked"
    return max(clock)


@pytest.mark.parametrize(("stages", "micro_batches", "t_b"), [(8, 64, 3.0), (12, 48, 3.0), (4, 16, 2.0)])
def test_deepspeeds_schedule_takes_the_1f1b_time(stages, micro_batches, t_b):
    assert _replay(stages, micro_batches, 1.0, t_b, 0.0) == pytest.approx((micro_batches + stages - 1) * (1.0 + t_b))


def test_its_blocking_sends_cost_about_four_transfers_a_micro_batch():
    stages, micro_batches, transfer_s = 12, 96, 0.05
    ideal = (micro_batches + stages - 1) * 4.0
    per_slot = (_replay(stages, micro_batches, 1.0, 3.0, transfer_s) - ideal) / (micro_batches + stages - 1)
    assert 0.9 * SERIAL_TRANSFERS * transfer_s < per_slot <= SERIAL_TRANSFERS * transfer_s


@pytest.mark.parametrize(
    ("t_f", "t_b"),
    [
        ([1.1] + [1.0] * 10 + [0.8], [3.3] + [3.0] * 10 + [2.4]),  # the embedding's first stage, a lighter last
        ([1.3] + [1.0] * 11, [3.0] * 11 + [3.3]),  # a heavy forward at one end, a heavy backward at the other
        ([1.3 if s % 2 == 0 else 1.0 for s in range(12)], [3.0 if s % 2 == 0 else 3.3 for s in range(12)]),
    ],
)
def test_an_uneven_stage_sets_the_period_and_nothing_more(t_f, t_b):
    """Stages of unequal time (the first with the embedding, the last with the logits and the loss,
    or forward and backward heavy on opposite phases): the step stays within 1F1B's bound for the
    slowest stage, (m - 1) max(t_f + t_b) + the sum over stages, and above the slowest stage's own
    work; the opposite phases of TrainSchedule's even and odd stages do not make each step pay the
    larger of a forward and a neighbour's backward (that lockstep would cost 2 m max(t_b))
    (docs/model.md, "Third pass")."""
    stages, micro_batches = 12, 64
    slot = [f + b for f, b in zip(t_f, t_b, strict=True)]
    step = _replay(stages, micro_batches, t_f, t_b, 0.0)
    assert micro_batches * max(slot) < step <= (micro_batches - 1) * max(slot) + sum(slot) + 1e-9
    assert step < 0.8 * 2 * micro_batches * max(t_b)
