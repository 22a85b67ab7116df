"""Within-group ranking (issue 33 item 6): Spearman and top-1 regret on synthetic groups with a
known answer, then on the public runs and the command line."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from shardwise.analyses import ranking
from shardwise.analyses.public_validation import spearman


def _runs(group: str, measured: list[float], predicted: list[float], stack: str = "megatron-core"):
    return [
        ranking.Measured(group, stack, ranking.DENSE, f"L{i}", f"layout {i}", m, p)
        for i, (m, p) in enumerate(zip(measured, predicted, strict=True))
    ]


def test_one_swapped_pair_of_five_gives_rho_0_9():
    # 1 - 6 sum d^2 / (n (n^2 - 1)) = 1 - 6 * 2 / 120
    assert spearman(np.array([1, 2, 3, 4, 5.0]), np.array([2, 1, 3, 4, 5.0])) == pytest.approx(0.9)
    assert spearman(np.array([1, 2, 3, 4.0]), np.array([8, 6, 4, 2.0])) == pytest.approx(-1.0)


def test_ties_take_average_ranks():
    # ranks (1, 2.5, 2.5, 4) against (1, 2, 3, 4): Pearson of the ranks
    want = np.corrcoef([1, 2.5, 2.5, 4], [1, 2, 3, 4])[0, 1]
    assert spearman(np.array([1, 5, 5, 9.0]), np.array([1, 2, 3, 4.0])) == pytest.approx(want)


def test_regret_is_the_measured_slowdown_of_the_predicted_best():
    # the model ranks layout 1 first; it measures 90 tokens/s against the best's 100
    assert ranking.top1_regret(np.array([100, 90, 80.0]), np.array([1, 3, 2.0])) == pytest.approx(100 / 90 - 1)
    assert ranking.top1_regret(np.array([100, 90, 80.0]), np.array([3, 2, 1.0])) == 0.0


def test_a_tie_for_first_costs_the_mean_of_the_tied_layouts():
    regret = ranking.top1_regret(np.array([100, 50, 80.0]), np.array([2, 2, 1.0]))
    assert regret == pytest.approx((0.0 + 1.0) / 2)
    with pytest.raises(ValueError, match="equal non-empty"):
        ranking.top1_regret(np.array([1.0, 2.0]), np.array([1.0]))


def test_groups_rank_their_distinct_layouts_and_small_groups_drop_out():
    runs = _runs("g|m|s|8|4096", [100, 90, 80, 70], [70, 90, 80, 100])  # the model ranks them backwards
    runs += _runs("small|m|s|8|4096", [1, 2], [1, 2])  # two layouts: no rank to speak of
    runs += _runs("g|m|s|8|4096", [100, 90, 80], [1, 2, 3], stack="fsdp")  # another stack: its own group
    # the same layout published twice counts once, at its mean: L0 measured (100 + 60) / 2 = 80
    runs.append(ranking.Measured("g|m|s|8|4096", "megatron-core", ranking.DENSE, "L0", "layout 0", 60, 70))
    groups = {(g.group, g.stack): g for g in ranking.rank_groups(runs)}
    assert set(groups) == {("g|m|s|8|4096", "megatron-core"), ("g|m|s|8|4096", "fsdp")}
    mc = groups[("g|m|s|8|4096", "megatron-core")]
    assert mc.layouts == 4
    assert mc.spearman == pytest.approx(spearman(np.array([80, 90, 80, 70.0]), np.array([70, 90, 80, 100.0])))
    assert mc.predicted_best == "layout 3" and mc.measured_best == "layout 1"
    assert mc.regret == pytest.approx(90 / 70 - 1)
    assert groups[("g|m|s|8|4096", "fsdp")].spearman == pytest.approx(-1.0)


def test_a_group_predicted_all_tied_has_no_rho_but_a_regret():
    (g,) = ranking.rank_groups(_runs("g", [100, 80, 50], [7, 7, 7]))
    assert math.isnan(g.spearman) and g.predicted_best == "3 tied"
    assert g.regret == pytest.approx(np.mean([0, 100 / 80 - 1, 1.0]))
    (row,) = ranking.stack_table([g])
    assert math.isnan(row.median_spearman) and row.spearman_groups == 0 and row.median_regret == g.regret


def test_stack_table_takes_medians_and_extremes_per_stack():
    runs = _runs("a", [3, 2, 1], [3, 2, 1]) + _runs("b", [3, 2, 1], [1, 2, 3]) + _runs("c", [3, 2, 1], [3, 1, 2])
    runs += _runs("d", [3, 2, 1], [2, 3, 1], stack="fsdp")
    table = {(s.stack, s.kind): s for s in ranking.stack_table(ranking.rank_groups(runs))}
    mc = table[("Megatron-Core / NeMo", ranking.DENSE)]
    assert (mc.groups, mc.layouts) == (3, 9)
    assert mc.median_spearman == pytest.approx(0.5) and mc.min_spearman == pytest.approx(-1.0)
    assert mc.median_regret == 0.0 and mc.max_regret == pytest.approx(2.0)  # b picks 1 against 3
    everything = table[("all stacks", ranking.DENSE)]
    assert everything.groups == 4 and everything.max_regret == pytest.approx(2.0)
    assert table[("PyTorch FSDP", ranking.DENSE)].median_regret == pytest.approx(3 / 2 - 1)


@pytest.mark.slow  # prices every public row (the leave-one-source-out folds)
def test_public_groups_and_the_command_line(cli):
    groups = ranking.public_groups()
    assert len(groups) >= 10 and all(g.layouts >= ranking.MIN_LAYOUTS for g in groups)
    assert {g.kind for g in groups} >= {ranking.DENSE, ranking.MOE}
    assert all(0.0 <= g.regret < 1.0 for g in groups)
    code, out, _ = cli(["validate", "ranking", "--json"])
    data = json.loads(out)
    assert code == 0 and "NaN" not in out
    assert len(data["groups"]) == len(groups)
    assert any(s["stack"] == "all stacks" for s in data["stacks"])
    code, out, _ = cli(["validate", "ranking", "--markdown"])
    assert code == 0 and "| median top-1 regret | max top-1 regret |" in out and "| Spearman | top-1 regret |" in out
    code, _, err = cli(["validate", "ranking", "memory"])
    assert code == 2 and "give it alone" in err and "Traceback" not in err


def test_groups_by_release_rank_each_releases_layouts_apart():
    """Two releases of one group: each ranked alone is perfect, pooled the older release's fast
    software makes the model's pick look wrong (the group over releases ranks the drift too)."""
    from dataclasses import replace

    old = [replace(r, release="25.09") for r in _runs("g", [200, 190, 180], [3, 2, 1.0])]
    new = [replace(r, release="26.02", layout=f"N{i}") for i, r in enumerate(_runs("g", [100, 90, 80], [6, 5, 4.0]))]
    within = ranking.rank_groups(old + new, by_release=True)
    assert [(g.release, g.spearman, g.regret) for g in within] == [("25.09", 1.0, 0.0), ("26.02", 1.0, 0.0)]
    (pooled,) = ranking.rank_groups(old + new)
    assert pooled.releases == 2 and pooled.release == "" and pooled.regret == pytest.approx(200 / 100 - 1)
