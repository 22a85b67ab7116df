"""The discrete-event loop (engines/events.py): time order, tie-breaking, `until`, chaining."""

import pytest

from shardwise.engines.events import EventLoop


def test_events_run_in_time_order_whatever_order_they_were_scheduled_in():
    loop, seen = EventLoop(), []
    for t in (5.0, 1.0, 3.0, 0.0, 2.5):
        loop.at(t, lambda t=t: seen.append((loop.now, t)))
    assert len(loop) == 5
    assert loop.run() == 5.0
    assert seen == [(0.0, 0.0), (1.0, 1.0), (2.5, 2.5), (3.0, 3.0), (5.0, 5.0)]  # `now` is each event's time
    assert loop.events_run == 5 and len(loop) == 0


def test_ties_break_by_priority_then_by_scheduling_order():
    loop, seen = EventLoop(), []
    loop.at(1.0, seen.append, "a", priority=1)
    loop.at(1.0, seen.append, "b")
    loop.at(1.0, seen.append, "c", priority=-1)
    loop.at(1.0, seen.append, "d")
    loop.at(1.0, seen.append, "e", priority=1)
    loop.run()
    assert seen == ["c", "b", "d", "a", "e"]


def test_arguments_are_passed_through():
    loop, seen = EventLoop(), []
    loop.at(0.5, lambda *args: seen.append(args), 1, "two", (3,))
    loop.run()
    assert seen == [(1, "two", (3,))]


def test_run_until_stops_at_the_bound_and_keeps_the_rest():
    loop, seen = EventLoop(), []
    for t in (1.0, 3.0, 3.0 + 1e-9, 7.0):
        loop.at(t, seen.append, t)
    # an event exactly at `until` runs; the clock stays at the last event run, not at `until`
    assert loop.run(until=3.0) == 3.0
    assert seen == [1.0, 3.0] and len(loop) == 2
    assert loop.run(until=5.0) == pytest.approx(3.0 + 1e-9)
    assert len(loop) == 1
    assert loop.run() == 7.0 and seen[-1] == 7.0 and loop.events_run == 4


def test_the_past_is_refused_and_now_is_allowed():
    loop, seen = EventLoop(), []
    loop.at(2.0, seen.append, "x")
    loop.run()
    with pytest.raises(ValueError, match=r"event at 1.5 is in the past \(now 2.0\)"):
        loop.at(1.5, seen.append, "late")
    loop.at(2.0, seen.append, "now")  # at the current time is fine
    loop.run()
    assert seen == ["x", "now"]


def test_a_callback_can_schedule_more_events_and_same_time_ones_run_after_it():
    loop, seen = EventLoop(), []

    def tick(n: int) -> None:
        seen.append((loop.now, n))
        if n < 3:
            loop.at(loop.now + 0.5, tick, n + 1)
            loop.at(loop.now, seen.append, ("same time", n))

    loop.at(1.0, tick, 0)
    assert loop.run() == 2.5
    assert seen == [
        (1.0, 0),
        ("same time", 0),
        (1.5, 1),
        ("same time", 1),
        (2.0, 2),
        ("same time", 2),
        (2.5, 3),
    ]
    assert loop.events_run == 7


def test_a_single_server_queue_by_hand():
    """Jobs arrive at 0, 1, 2 and each takes 1.5 s on one server: they finish at 1.5, 3.0 and 4.5
    (each waits for the one before), a D/D/1 queue worked out by hand."""
    loop = EventLoop()
    queue: list[int] = []
    busy = [False]
    done: dict[int, float] = {}

    def start_next() -> None:
        if busy[0] or not queue:
            return
        busy[0] = True
        loop.at(loop.now + 1.5, finish, queue.pop(0))

    def arrive(job: int) -> None:
        queue.append(job)
        start_next()

    def finish(job: int) -> None:
        done[job] = loop.now
        busy[0] = False
        start_next()

    for job, t in enumerate((0.0, 1.0, 2.0)):
        loop.at(t, arrive, job)
    assert loop.run() == pytest.approx(4.5)
    assert done == pytest.approx({0: 1.5, 1: 3.0, 2: 4.5})


def test_two_runs_of_the_same_model_are_identical():
    def trace() -> list[tuple[float, int]]:
        loop, seen = EventLoop(), []
        for k in range(50):
            loop.at(float(k % 7), lambda k=k: seen.append((loop.now, k)), priority=k % 3)
        loop.run()
        return seen

    first = trace()
    assert first == trace()
    assert [t for t, _ in first] == sorted(t for t, _ in first)
