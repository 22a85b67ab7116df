"""Crossovers: found exactly, every one reported, 'no crossover' said plainly."""

import numpy as np
import pytest

from shardwise.analyses.crossover import describe_crossing, run_crossover
from shardwise.analyses.evaluate import times_s
from shardwise.analyses.experiment import BRIEF_LINKS, brief_experiment
from shardwise.analyses.vary import parse_vary
from shardwise.errors import SpecError
from shardwise.loaders import parse_plan_spec
from shardwise.presets import parse_link_spec

EXP = brief_experiment()


def test_the_integer_crossing_is_the_first_batch_where_the_other_plan_wins():
    result = run_crossover(EXP, "batch", np.array([1.0, 2, 4, 8, 16, 32]))
    nvlink = result.crossings_for("NVLink")
    assert len(nvlink) == 1
    c = nvlink[0]
    assert c.exact and c.low < c.at <= c.high
    every = np.arange(1, 33, dtype=float)
    tp, _ = times_s(EXP, EXP.plans[0], EXP.links[0].link, "batch", every)
    pp, _ = times_s(EXP, EXP.plans[1], EXP.links[0].link, "batch", every)
    first_pp_win = every[np.flatnonzero(pp < tp)[0]]
    assert c.at == first_pp_win
    assert (c.before, c.after) == ("tp=8", "pp=8")
    assert c.time_s == pp[int(c.at) - 1]  # the faster plan's time there, read off the grid


def test_a_continuous_crossing_is_a_root():
    exp = EXP.with_(links=(parse_link_spec("PCIe=pcie4"),))
    result = run_crossover(exp, "bandwidth", np.geomspace(1e9, 1e12, 7))
    (c,) = result.crossings
    tp, _ = times_s(exp, exp.plans[0], exp.links[0].link, "bandwidth", np.array([c.at]))
    pp, _ = times_s(exp, exp.plans[1], exp.links[0].link, "bandwidth", np.array([c.at]))
    assert tp[0] == pytest.approx(pp[0], rel=1e-5)
    assert c.time_s == pytest.approx(tp[0], rel=1e-5)  # priced at the root, between grid points
    assert "PCIe: pp=8 is faster below bandwidth" in describe_crossing(c, "bandwidth")


def test_no_crossover_is_reported_as_none():
    result = run_crossover(EXP.with_(cost_model="textbook", links=BRIEF_LINKS), "batch", np.arange(1, 33.0))
    assert result.crossings == ()
    assert set(result.winners("NVLink")) == {"pp=8"}


def test_every_crossing_of_every_pair_is_reported():
    exp = EXP.with_(plans=(parse_plan_spec("tp=8"), parse_plan_spec("pp=8"), parse_plan_spec("tp=2,pp=4")))
    result = run_crossover(exp, "batch", np.arange(1, 65.0))
    pairs = {(c.link, frozenset((c.before, c.after))) for c in result.crossings}
    assert ("NVLink", frozenset(("tp=8", "pp=8"))) in pairs
    for c in result.crossings:
        assert c.before != c.after


def test_invalid_points_are_nan_not_errors():
    # pp=8 needs at least 8 layers (one per stage); 12 and 20 split unevenly, which is allowed
    t, fits = times_s(EXP, EXP.plans[1], EXP.links[0].link, "layers", np.array([4.0, 12, 16, 6]))
    assert np.isnan(t[0]) and np.isnan(t[3]) and not np.isnan(t[1]) and not np.isnan(t[2]) and not fits[0]


def test_plan_gpus_all_and_dp_fill():
    spec = parse_plan_spec("tp=all")
    tp, _, dp = spec.degrees(np.array([8, 16]))
    assert list(tp) == [8, 16] and list(dp) == [1, 1]
    _, _, dp = parse_plan_spec("tp=8").degrees(np.array([8, 32]))
    assert list(dp) == [1, 4]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tp=x", "tp=x is not allowed"),
        ("foo=1", "is not KEY=VALUE"),
        ("tp", "is not KEY=VALUE"),
        ("tp=1,dp=8,ep=8", "dp is not a --plan key: data-parallel replicas fill the GPUs"),
    ],
)
def test_bad_plans(text, message):
    with pytest.raises(SpecError, match=message):
        parse_plan_spec(text)


def test_links_from_presets_rates_and_options():
    assert parse_link_spec("nvlink3").link.bandwidth_bytes_per_s == 300e9
    link = parse_link_spec("pcie=32GB/s,latency=2us").link
    assert link.bandwidth_bytes_per_s == 32e9 and link.efficiency == 1.0 and link.latency_s == 2e-6
    with pytest.raises(SpecError, match="closest"):
        parse_link_spec("nvlnk3")


@pytest.mark.parametrize(
    ("text", "first", "last", "n"),
    [
        ("batch=1..32", 1, 32, 32),
        ("bandwidth=1GB/s..1000GB/s:4", 1e9, 1e12, 4),
        ("layers=8,16,96", 8, 96, 3),
        ("hidden=512..16384:x2", 512, 16384, 6),
    ],
)
def test_parse_vary(text, first, last, n):
    _, values = parse_vary(text)
    assert values[0] == pytest.approx(first) and values[-1] == pytest.approx(last) and len(values) == n


@pytest.mark.parametrize("text", ["speed=1..2", "batch=0..3", "batch=5..2", "batch=a,b", "bandwidth=fast..slow"])
def test_bad_vary(text):
    with pytest.raises(SpecError):
        parse_vary(text)


def test_forward_workload_and_textbook_model_run():
    fwd = run_crossover(EXP.with_(workload="forward"), "batch", np.arange(1, 17.0))
    assert all(np.all(np.isfinite(s.time_s)) for s in fwd.series)
    with pytest.raises(SpecError, match="pure TP or pure PP"):
        run_crossover(
            EXP.with_(cost_model="textbook", plans=(parse_plan_spec("tp=2,pp=4"),)), "batch", np.arange(1, 4.0)
        )


def test_two_crossings_inside_one_grid_bracket_are_both_found():
    # the finder, not the physics: a GPU without an SM count has smooth (roofline) GEMM times, no
    # wave-quantization sawtooth that would add crossings where the plans are nearly tied
    exp = EXP.with_(workload="forward", batch=1, links=(parse_link_spec("PCIe=pcie4"),), gpu=EXP.gpu.with_(sm_count=0))
    result = run_crossover(exp, "seq_len", np.array([16.0, 64, 256, 1024, 4096]))
    changes = result.winner_changes("PCIe")
    assert [(c.before, c.after) for c in changes] == [("tp=8", "pp=8"), ("pp=8", "tp=8")]
    assert all(c.exact and c.high - c.low == 1 for c in changes)


def test_plans_that_do_not_fit_cannot_win_unless_memory_is_ignored():
    values = np.array([4096.0, 16384.0])  # a 96-layer model of hidden 16384 does not fit 8 A100s
    strict = run_crossover(EXP, "hidden", values)
    assert strict.winners("NVLink")[1] == ""
    loose = run_crossover(EXP, "hidden", values, ignore_memory=True)
    assert loose.winners("NVLink")[1] in ("tp=8", "pp=8")


def test_equal_plans_tie_and_do_not_cross():
    exp = EXP.with_(plans=(parse_plan_spec("tp=8"), parse_plan_spec("tp=all")), links=EXP.links[:1])
    result = run_crossover(exp, "batch", np.array([1.0, 2, 4]))
    assert result.winners("NVLink") == ["tie", "tie", "tie"]
    assert result.crossings == ()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tp=8,vpp=abc", "vpp=abc"),
        ("pp=8,sp=maybe", "sp=maybe"),
        ("tp=8,zero=5", "zero=5"),
        ("tp=8,mb=0", "mb=0"),
        ("pp=8,schedule=zigzag", "schedule=zigzag"),
    ],
)
def test_plan_options_are_checked(text, message):
    with pytest.raises(SpecError, match=message):
        parse_plan_spec(text)


def test_the_switch_point_breakdown_read_off_the_grid_equals_pricing_it_again():
    from dataclasses import replace

    from shardwise.analyses.crossover import crossing_breakdown
    from shardwise.analyses.evaluate import breakdown_at

    exp = brief_experiment()
    result = run_crossover(exp, "batch", np.arange(1.0, 33.0))
    assert result.crossings and result.dense is not None
    for c in result.crossings:
        link = next(lk.link for lk in exp.links if lk.label == c.link)
        plans = {p.label: p for p in exp.plans}
        again = {name: breakdown_at(exp, plans[name], link, "batch", c.at) for name in (c.before, c.after)}
        kept = crossing_breakdown(result, c)
        assert kept.keys() == again.keys()
        for name in kept:
            assert kept[name] == pytest.approx(again[name], rel=1e-12)
        assert crossing_breakdown(replace(result, dense=None), c) == again


def _tp8_pp16_two_nodes(vary: str = "") -> object:
    from shardwise.requests.compare import CrossoverRequest

    argv = "crossover --system dgx-h100 --nodes 2 --plan tp=8 --plan pp=16" + (f" --vary {vary}" if vary else "")
    return CrossoverRequest.from_argv(argv).run()


@pytest.mark.parametrize("vary", ["", "batch=2,4,6,8,10,12,14,16,18,20,22,24,26,28,30,32"])
def test_a_plan_invalid_at_odd_batches_makes_no_crossing_there(vary):
    # tp=8 over 16 GPUs has dp=2: invalid at every odd batch (a layout rule, not memory). It used
    # to "lose" there, so the winner flipped at every batch (13 false crossings).
    answer = _tp8_pp16_two_nodes(vary)
    result = answer.result
    assert len(result.crossings) == 1
    for c in result.crossings:
        assert c.at % 2 == 0 and c.low % 2 == 0  # only batches where tp=8 is valid
    assert len(answer.as_dict()["crossings"]) == 1


def test_a_plan_valid_at_one_point_hides_no_change_between_the_others():
    # tp=8 with micro-batch 16 over dp=2 runs only at batch 32: it must not hide the tp=8 -> pp=16
    # change at 12-14 that the two plans alone show (review: it did when every plan had to be valid)
    from shardwise.requests.compare import CrossoverRequest

    argv = "crossover --system dgx-h100 --nodes 2 --plan tp=8 --plan pp=16 --plan tp=8,mb=16 --vary batch=2..40"
    result = CrossoverRequest.from_argv(argv).run().result
    changes = [c for c in result.crossings if c.winner_change]
    assert [(c.before, c.after) for c in changes][:1] == [("tp=8", "pp=16")]
    assert changes[0].low >= 12 and changes[0].at <= 14


def test_a_switch_past_points_only_the_old_winner_can_run_is_a_crossover():
    """pp=8 faster at 2160 with both valid, then three widths only pp=8 can run (heads TP cannot
    split), then tp=8 faster at 3072: the old winner seemed to hand over without a comparison,
    "no crossover in this range" above a table showing one (walkthrough: `--vary
    hidden=1024..16384`). It is a crossover, bracketed by the last point where both ran."""
    from shardwise.analyses.crossover import _winner_changes

    x = np.array([2048.0, 2160, 2500, 2800, 2944, 3072])
    nan = float("nan")
    times = {"tp=8": np.array([2.0, 2.0, nan, nan, nan, 1.0]), "pp=8": np.array([1.0, 1.5, 1.6, 1.7, 1.8, 2.0])}
    valid = {k: ~np.isnan(v) for k, v in times.items()}
    (c,) = _winner_changes(EXP, EXP.links[0], "hidden", x, times, False, valid)
    assert (c.before, c.after, c.low, c.at, c.exact) == ("pp=8", "tp=8", 2160.0, 3072.0, False)
    assert "(none valid between)" in describe_crossing(c, "hidden")
    third = {**times, "x": np.array([nan, nan, 0.5, nan, nan, nan])}  # another plan won in between
    changes = _winner_changes(EXP, EXP.links[0], "hidden", x, third, False, {k: ~np.isnan(v) for k, v in third.items()})
    assert not [c for c in changes if (c.before, c.after) == ("pp=8", "tp=8")]  # not compared across it


def test_the_crossover_csv_says_why_a_point_is_invalid():
    import csv
    import io

    rows = list(csv.DictReader(io.StringIO(_tp8_pp16_two_nodes().csv_text())))
    odd = [r for r in rows if r["plan"] == "tp=8" and int(r["batch"]) % 2]
    assert odd and all(r["valid"] == "false" and "divisible" in r["why"] for r in odd)
    assert all(r["fits_in_memory"] == "" for r in odd)  # not "false": memory was never the problem
    even = [r for r in rows if r["plan"] == "tp=8" and int(r["batch"]) % 2 == 0]
    assert all(r["valid"] == "true" and r["why"] == "" and r["fits_in_memory"] == "true" for r in even)
    # each priced point's 80% band, as --json and sweep's CSV carry it (the CSV had none)
    assert all(float(r["time_s_low"]) < float(r["time_s"]) < float(r["time_s_high"]) for r in even)
    assert all(r["time_s_low"] == r["time_s_high"] == "" for r in odd)


def test_the_crossover_csv_names_the_unit_of_its_variable_and_writes_booleans_as_sweep_and_plan_do():
    """A swept bandwidth is written in B/s under `bandwidth_bytes_per_s` (sweep's column), not
    under `bandwidth`; booleans are true/false as in sweep's and plan's CSVs (were True/False)."""
    import csv
    import io

    from shardwise.requests.compare import CrossoverRequest

    answer = CrossoverRequest.from_argv("crossover --vary bandwidth=10GB/s..900GB/s").run()
    rows = list(csv.DictReader(io.StringIO(answer.csv_text())))
    assert float(rows[0]["bandwidth_bytes_per_s"]) == pytest.approx(1e10)
    assert {r["winner"] for r in rows} == {"true", "false"} and {r["valid"] for r in rows} == {"true"}


def test_a_system_s_host_cpu_reaches_the_crossover_s_clusters():
    # review: crossover and sweep rebuilt the cluster by hand and priced every host as Intel
    # (NCCL's network post per ring step across servers is 2 us on AMD hosts, 1 us on Intel)
    from shardwise.analyses.evaluate import _cluster, times_s
    from shardwise.requests.compare import CrossoverRequest

    request = CrossoverRequest.from_argv("crossover --system dgx-a100 --nodes 4 --plan tp=1,zero=3")
    exp = request.experiment.build().experiment
    assert exp.host_cpu == "amd"
    link = exp.links[0].link
    assert _cluster(exp, link, exp.gpus).host_cpu == "amd"
    amd, _ = times_s(exp, exp.plans[0], link, "batch", [64])
    intel, _ = times_s(exp.with_(host_cpu="intel"), exp.plans[0], link, "batch", [64])
    assert amd[0] > intel[0]  # every ring step across servers pays the dearer post


def test_a_system_file_s_nvls_off_reaches_the_crossover_s_clusters(tmp_path):
    # the experiment rebuilt the cluster without the system's `nvls`, so a system file with
    # `nvls: false` (NCCL_NVLS_ENABLE=0) was priced with NVLink SHARP all-reduces
    from shardwise.analyses.evaluate import _cluster, times_s
    from shardwise.requests.compare import CrossoverRequest

    system = tmp_path / "no-nvls.yaml"
    system.write_text("name: no-nvls\ngpu: h100-sxm5-80gb\ngpus_per_node: 8\nintra_node_link: nvlink4\nnvls: false\n")
    exp = CrossoverRequest.from_argv(f"crossover --system {system} --plan tp=8").experiment.build().experiment
    assert exp.nvls is False
    link = exp.links[0].link
    assert _cluster(exp, link, exp.gpus).nvls is False
    off, _ = times_s(exp, exp.plans[0], link, "batch", [8])
    on, _ = times_s(exp.with_(nvls=True), exp.plans[0], link, "batch", [8])
    assert off[0] > on[0]  # TP's all-reduces lose the switch's reduction


def test_a_switch_because_the_faster_plan_stops_fitting_says_so(cli):
    """At 112 layers pp=8 stops fitting from batch 7 on PCIe while still the quicker of the two:
    the switch to tp=8 is memory's, and the output says it (walkthrough: it read as a speed
    crossover, the slower plan 'faster from 7 on')."""
    code, out, err = cli(["crossover", "--layers", "112", "--vary", "batch=1..12", "--no-plot"])
    assert code == 0, err
    flat = " ".join(out.split())
    assert "crossover: PCIe: pp=8 is faster below batch 7, tp=8 from 7 on" in flat
    assert "pp=8 takes less time there but does not fit in GPU memory from batch 7 on" in flat
    assert flat.count("does not fit in GPU memory from") == 1  # the speed crossover at 3 has no note


def test_a_range_of_widths_steps_in_whole_heads_and_every_width_runs_under_tp():
    """`--vary hidden=1024..16384:20` (walkthrough) drew widths like 1185 that no TP degree
    divides, and heads of 128 that TP 8 cannot split (2560: 20 heads): 90% of a sweep's cells
    'none valid', `crossover --hidden 2560` refused outright. A range now steps in multiples of
    128 (a list is taken as given), and a width whose 128-wide head count TP cannot split takes
    the nearest count it can (2560: 16 heads of 160); widths the first rule served keep it."""
    from shardwise.analyses.evaluate import heads_for_hidden

    _, widths = parse_vary("hidden=1024..16384:20")
    assert len(widths) == 20 and widths[0] == 1024 and widths[-1] == 16384 and np.all(widths % 128 == 0)
    assert list(parse_vary("hidden=1000,1100")[1]) == [1000, 1100]
    with pytest.raises(SpecError, match="holds only 1024"):  # one width is no sweep (review 29: it was silent)
        parse_vary("hidden=1000..1100")
    assert list(parse_vary("hidden=1030..1100")[1]) == list(np.arange(1030, 1101))  # no multiple of 128 inside
    heads = heads_for_hidden(widths, 8)
    assert np.all(widths % heads == 0) and np.all(heads % 8 == 0)
    assert int(heads_for_hidden(2560, 8)) == 16 and int(heads_for_hidden(2560, 1)) == 20
    served = np.arange(1024, 16385, 1024.0)  # 128-wide heads in multiples of 8: as before
    assert np.array_equal(heads_for_hidden(served, 8), served // 128)
    tp, _ = times_s(EXP, EXP.plans[0], EXP.links[0].link, "hidden", widths)
    assert not np.isnan(tp).any()


def test_a_plan_with_pairs_not_separated_by_commas_says_so():
    """`--plan 'tp=2 pp=4'` was read as tp='2pp=4' and refused as "tp=2pp=4 is not allowed"."""
    from shardwise.plan_text import parse_plan_spec
    from shardwise.specs import SpecError

    for text in ("tp=2 pp=4", "tp=2;pp = 4"):
        with pytest.raises(SpecError, match=r"separate the KEY=VALUE pairs with commas \(tp=2,pp=4\)"):
            parse_plan_spec(text)
    assert parse_plan_spec("tp = 2, pp=4").pp == 4  # spaces around a pair still pass
