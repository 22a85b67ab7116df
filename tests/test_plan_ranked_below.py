"""Why `plan` ranked a searched neighbour below its best plan though the why prints it better
(review 31): the tie rule is named only where the printed rates are within its tolerance; otherwise
the search's own figure is given. And a neighbour is the plan the search priced (its overlap of
pipeline sends follows its schedule, as the search's plans do)."""

from __future__ import annotations

import dataclasses

from shardwise.analyses import planner
from shardwise.analyses.plan_explain import SAME, TIE_MARGIN, describe
from shardwise.requests import PlanRequest

TIE = "a tie (rates within 0.5% of the best rank by step time)"
PER_GPU = "--model llama3-8b --system dgx-h100 --nodes 4 --global-batch 64 --objective throughput-per-gpu --top 1"


def test_a_tie_is_named_only_where_the_printed_rates_are_within_its_tolerance(monkeypatch):
    """Llama 3 8B on 32 H100, tokens/s per GPU: dp=16 on 16 GPUs has a 0.3% better rate and a slower
    step, a tie the best wins by step time. Were the why's estimate of it (`confirmed_estimate`, e.g. the
    simulator's, while the search ranked the closed form) 2% faster, the printed margin is 2.3%: no tie
    under 0.5%; the why then says the search's estimate had it 0.3% better, a tie there."""
    honest = PlanRequest.from_argv(PER_GPU).run()
    ties = [a for a in honest.why if a.ranked_below == TIE]
    assert ties and all(a.fits_with_headroom and a.in_space and 0 < -a.relative <= TIE_MARGIN for a in ties)
    tie = ties[0]
    gpus = int(tie.change.split(" on ")[1].split()[0])  # "dp=16 on 16 GPUs"
    real = planner.confirmed_estimate

    def faster(scn):  # the why's estimate of the neighbour 2% faster than the one the search ranked on
        est = real(scn)
        if int(scn.plan.num_gpus) != gpus:
            return est
        return dataclasses.replace(est, step_time_s=est.step_time_s * 0.98)

    monkeypatch.setattr(planner, "confirmed_estimate", faster)
    shifted = next(a for a in PlanRequest.from_argv(PER_GPU).run().why if a.change == tie.change)
    assert -shifted.relative > TIE_MARGIN  # 2.3% better as printed: beyond the tie rule's 0.5%
    assert shifted.ranked_below != TIE and shifted.excluded is None
    said = f"{TIE} on the search's estimate, {-tie.relative:.1%} better there"
    assert shifted.ranked_below == said
    assert describe(shifted).startswith(f"{tie.change}: {-shifted.relative:.1%} better but {said}:")


def test_a_neighbour_with_another_schedule_is_the_plan_the_search_priced():
    """GPT 6.7B on 16 RTX 4090 by step time: the best interleaves (its pipeline sends overlapped, the
    interleaved schedule's default); its neighbour 'schedule zb-h1' kept that overlap, a plan the search
    never priced (its ZB-H1 plans send blocking), and the why called it 5.8% better 'but outside the
    search'. Now no searched neighbour that fits is better than the best. (Megatron-LM runs no ZB-H1,
    review 47 #2: that neighbour is listed as what the stack cannot run, priced as the search would.)"""
    result = PlanRequest.from_argv("--model gpt-6.7b --system rtx4090-8x --nodes 2 --global-batch 64 --top 1").run()
    best = result.search.plan(int(result.search.ranked(1)[0]))
    assert int(best.vpp) > 1 and bool(best.overlap_p2p)
    schedules = [a for a in result.why if a.change in ("schedule zb-h1", "schedule 1f1b")]
    assert len(schedules) == 2 and all(a.fits_with_headroom and a.relative > SAME for a in schedules)
    assert [a.in_space or a.framework_cannot for a in schedules] == [True, True]
    assert [a.framework_cannot for a in schedules if a.change == "schedule zb-h1"] == [True]
    assert all("pipeline sends +" in a.reason for a in schedules)  # sent blocking, as the search priced them
    assert all(a.relative >= -SAME or not a.fits_with_headroom or not a.in_space for a in result.why)
    assert not any("outside the search" in describe(a) for a in result.why)
