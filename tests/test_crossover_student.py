"""Review 51: the founding question's commands as a student reads them (crossover's tie zone,
its stage flags, the stack's TP overlap in the header, the predict command of a switch)."""

import numpy as np
import pytest

from shardwise.analyses.bands import ratio_log_sd
from shardwise.analyses.crossover import describe_crossing
from shardwise.analyses.evaluate import times_s
from shardwise.calibration.spreads import PAIR_LOG_SD, Z80
from shardwise.requests.compare import CrossoverRequest, ExperimentRequest
from shardwise.requests.experiment_predict import predict_request


def _brief(vary: str = "batch=1..32", **kw):
    req = ExperimentRequest(**kw)
    return req, CrossoverRequest(req, vary).run().result


def test_the_tie_zone_is_where_the_ratio_s_interval_holds_one():
    """#3: the tie zone is judged on the two plans' time ratio (sensitivity's and plan's
    PAIR_LOG_SD), not on two independent bands: at each end the ratio's 80% interval holds 1,
    one batch beyond it does not, and it is narrower than the overlap of the two bands."""
    _, result = _brief()
    exp = result.experiment
    c = result.winner_changes("NVLink")[0]
    assert c.at == 17
    link = exp.links[0].link
    plans = {p.label: p for p in exp.plans}

    def gap(batch: float) -> float:
        ta = times_s(exp, plans[c.before], link, "batch", np.array([batch]))[0][0]
        tb = times_s(exp, plans[c.after], link, "batch", np.array([batch]))[0][0]
        return abs(np.log(ta / tb))

    limit = Z80 * PAIR_LOG_SD
    assert gap(c.range_low) <= limit < gap(c.range_low - 1)
    assert gap(c.range_high) <= limit < gap(c.range_high + 1)
    both_bands = Z80 * 2 * exp.prediction_log_sd  # the old rule: the two bands overlap
    assert gap(c.range_low - 1) <= both_bands  # the old rule called this batch a tie
    assert "a tie within the 80% interval of their ratio from batch" in describe_crossing(c, "batch")


def test_the_tie_zone_s_width_is_sensitivity_s_ratio_spread():
    """The uncalibrated ratio spread crossover uses is the one sensitivity and plan print."""
    _, result = _brief("batch=8..9")
    exp = result.experiment
    sd = ratio_log_sd(exp, lambda e: np.ones(2), lambda e: np.ones(2), np.ones(2), np.ones(2))
    assert np.all(sd == PAIR_LOG_SD)


def test_a_global_last_stage_layers_applies_to_the_pipelined_plans_only():
    """#2: `--last-stage-layers 2` beside tp=8 was refused ('need pp > 1'); it now moves pp=8
    alone, and tp=8's times are those without it."""
    _, plain = _brief("batch=8,16")
    _, staged = _brief("batch=8,16", last_stage_layers=2)
    tp = [next(s for s in r.series if s.plan == "tp=8" and s.link == "NVLink") for r in (plain, staged)]
    pp = [next(s for s in r.series if s.plan == "pp=8" and s.link == "NVLink") for r in (plain, staged)]
    np.testing.assert_array_equal(tp[0].time_s, tp[1].time_s)
    assert np.all(pp[1].time_s != pp[0].time_s)


def test_a_plan_s_own_first_key_on_one_stage_is_still_refused(cli):
    code, _, err = cli(["crossover", "--plan", "tp=8,last=2", "--plan", "pp=8", "--no-plot"])
    assert code == 2 and "pp > 1" in err and "Traceback" not in err


def test_the_header_says_when_sp_on_brought_the_stack_s_tp_overlap(cli):
    """#5: the 16% that tp=8,sp=on saves is the stack's Transformer Engine overlap that comes on
    with SP; the header names it for the plan that says sp=on, and not otherwise."""
    args = ["crossover", "--vary", "batch=8,16", "--no-plot", "--plan", "pp=8"]
    code, out, err = cli([*args, "--plan", "tp=8,sp=on"])
    assert code == 0, err
    flat = " ".join(out.split())
    assert "tp=8,sp=on: sequence parallelism and with it megatron-core's TP comm overlap" in flat
    code, out, _ = cli([*args, "--plan", "tp=8"])
    assert "TP comm overlap" not in " ".join(out.split())


@pytest.mark.parametrize(
    ("kw", "vary", "at"),
    [
        ({}, "batch=1..32", 17),
        (
            {
                "model": "llama3-8b",
                "gpu": "h100-sxm5-80gb",
                "intra_links": ("NVLink=nvlink4",),
                "plans": ("tp=8,sp=on", "pp=8,last=2", "tp=2,pp=4,zero=1"),
            },
            "batch=40,43",
            43,
        ),
        ({"last_stage_layers": 2, "intra_links": ("x=200GB/s,latency=3us",)}, "layers=16,32", 16),
        ({"ignore_memory": True, "intra_links": ("PCIe=pcie4",)}, "gpus=8,32", 32),  # across servers: ib-hdr
        ({"ignore_memory": True, "intra_links": ("NVLink=nvlink3",)}, "hidden=2048,2352", 2352),
    ],
)
def test_the_predict_request_of_a_row_gives_crossover_s_time(kw, vary, at):
    """#7: the predict command crossover prints prices each plan as crossover does (SP off and
    ZeRO-0 unless the plan says, the stack's TP overlap with sp=on, stage layers, the link)."""
    req = ExperimentRequest(**kw)
    result = CrossoverRequest(req, vary).run().result
    exp = result.experiment
    j = int(np.flatnonzero(result.values == at)[0])
    for s in result.series:
        plan = next(p for p in exp.plans if p.label == s.plan)
        asked = predict_request(req, exp, plan, s.link, result.variable, result.values[j])
        assert asked.run().step_time_s == pytest.approx(float(s.time_s[j]), rel=1e-9), asked.command()


def test_crossover_prints_the_predict_command_of_its_first_switch(cli):
    code, out, err = cli(["crossover", "--no-plot"])
    assert code == 0, err
    flat = " ".join(out.split())
    assert (
        "in predict: shardwise predict --model gpt-96l-4096h --gpu a100-sxm4-80gb --intra-link nvlink3 "
        "--num-gpus 8 --tp 8 --global-batch 17 --no-sequence-parallel --zero 0 (tp=8; pp=8: --pp 8 in place "
        "of --tp 8 --no-sequence-parallel)"
    ) in flat
    assert flat.count("in predict:") == 1


def test_no_predict_command_where_predict_has_no_flag_for_the_variable():
    req = ExperimentRequest()
    result = CrossoverRequest(req, "bandwidth=4GB/s..900GB/s").run().result
    exp = result.experiment
    assert predict_request(req, exp, exp.plans[0], "NVLink", "bandwidth", 1e11) is None


def test_the_figure_note_gives_where_the_lines_cross_and_the_first_batch_the_other_plan_wins():
    """#11: on PCIe the drawn lines cross near batch 2.1 while pp=8 wins from 3: the note says both."""
    import matplotlib.pyplot as plt

    from shardwise.analyses.crossover import run_crossover
    from shardwise.analyses.experiment import brief_experiment
    from shardwise.plots.crossover import crossover_figure

    result = run_crossover(brief_experiment(), "batch", np.arange(1.0, 33.0))
    fig = crossover_figure(result, "t", "", "s")
    (notes,) = fig.texts
    text = " ".join(notes.get_text().split())
    plt.close(fig)
    pcie = next(line for line in text.split("(2)")[1:])
    assert "pp=8 from 3 on" in pcie
    crossed = float(pcie.split("the drawn lines cross at batch ~")[1].split()[0])
    assert 2.0 < crossed < 3.0
