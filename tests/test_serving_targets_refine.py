"""The target search's options whose untried loads could reach the best one's throughput are
bisected further (`analyses.serving_targets._refine_contenders`), or said to be tied with it."""

from __future__ import annotations

from types import SimpleNamespace

from shardwise.analyses.serving_targets import REFINE_MAX, Option, _Load, _refine_contenders


class FakeLoad(_Load):
    """A load search whose loads up to `limit` meet the targets, at `per_user` tokens/s each."""

    def __init__(self, good: int, bad: int, limit: int, per_user: float) -> None:
        self.good, self.bad, self.limit, self.per_user, self.why = good, bad, limit, per_user, "TPOT"
        self.good_est, self.tries = self._est(good), 0
        self.replica = SimpleNamespace(table=object())

    def _est(self, users: int) -> SimpleNamespace:
        return SimpleNamespace(throughput_tokens_per_s=users * self.per_user)

    def at(self, users: int):  # type: ignore[override]
        self.tries += 1
        return self._est(users), "" if users <= self.limit else "TPOT"


def option(label: str, load: FakeLoad) -> Option:
    users, est, why, _ = load.result()
    return Option(label, "fp8", "fp8", users, est.throughput_tokens_per_s, est, why)


def test_a_contender_within_reach_is_bisected_until_it_overtakes():
    """B at 8 users (96 tok/s) missed at 10: 9 users could give 108 > A's 100, so 9 is tried, and B leads."""
    a, b = FakeLoad(10, 11, 10, 10.0), FakeLoad(8, 10, 9, 12.0)
    got = _refine_contenders([option("A", a), option("B", b)], {0: a, 1: b}, 1)
    assert got[1].users_per_replica == 9 and got[1].tokens_per_s_per_gpu == 108.0
    assert a.tries == 0 and b.tries == 1
    assert "tied" not in got[0].why + got[1].why


def test_one_out_of_reach_is_not_tried_and_one_still_in_reach_is_said_tied():
    a = FakeLoad(10, 11, 10, 10.0)  # 100 tok/s, closed
    far = FakeLoad(4, 5, 4, 12.0)  # 48, bound 48: out of reach
    wide = FakeLoad(8, 100, 8, 12.0)  # 96, bound far above 100 until bisected
    got = _refine_contenders([option("A", a), option("far", far), option("wide", wide)], {0: a, 1: far, 2: wide}, 1)
    assert far.tries == 0
    assert wide.tries == REFINE_MAX and wide.bad == 10  # 54, 31, 19, 13, 10: 9 users still could reach 108
    assert got[2].why.endswith("tied with the best within the search's resolution")
    assert got[0].tokens_per_s_per_gpu == 100.0 and "tied" not in got[0].why
