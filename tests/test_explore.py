"""`shardwise explore` without a browser: the URL state, the in-process runner (the CLI's own
output and messages), each page's figures, and the command's own errors."""

import json
import socket
import sys

import numpy as np
import pytest

pytest.importorskip("dash", reason="the explorer is an optional extra: pip install 'shardwise[explore]'")

from shardwise.explore import layout, pages, runner, state


def test_url_state_round_trips_and_leaves_defaults_out():
    values = dict(state.DEFAULTS)
    assert state.encode(values) == ""
    values.update({"page": "planner", "x-links": ["nvlink4"], "x-layers": 48, "p-nodes": 16, "x-plans": "tp=4; pp=2"})
    search = state.encode(values)
    assert "x-bw" not in search and "p-nodes=16" in search
    assert state.decode(search) == values


def test_url_state_keeps_bad_text_for_the_command_to_reject():
    values = state.decode("?x-batch=lots&nonsense=1&page=nowhere")
    assert values["x-batch"] == "lots" and values["page"] == "crossover" and "nonsense" not in values


def test_plans_split_on_semicolons_or_spaces():
    assert state.plans("tp=8; pp=8  tp=2,pp=4") == ["--plan", "tp=8", "--plan", "pp=8", "--plan", "tp=2,pp=4"]


def test_the_runner_gives_what_the_cli_prints(cli):
    args = state.crossover_args(state.DEFAULTS)
    code, out, _ = cli([*args, "--json"])
    assert code == 0
    assert runner.run(args).data == json.loads(out)


def test_the_runner_gives_the_cli_error_line(cli):
    args = state.crossover_args({**state.DEFAULTS, "x-vary": "batch=abc"})  # one --vary: a second is refused
    code, _, err = cli([*args, "--json"])
    outcome = runner.run(args)
    assert code == 2 and outcome.data is None
    assert f"error: {outcome.error}" == err.strip().splitlines()[-1]
    assert outcome.command.startswith("shardwise crossover ") and "--json" not in outcome.command


def test_an_error_goes_under_the_control_it_names():
    outcome = runner.Outcome(("crossover",), error="--vary: 'abc' is not a number")
    top, *msgs = layout.error_outputs("crossover", outcome)
    named = dict(zip(state.CONTROLS["crossover"], msgs, strict=True))
    assert top == "" and named["x-vary"] == outcome.error
    assert all(m == "" for k, m in named.items() if k != "x-vary")
    top, *_ = layout.error_outputs("crossover", runner.Outcome(("crossover",), error="model: something"))
    assert top == "model: something"


NO_FILES = (None, None)


@pytest.mark.parametrize("page", state.PAGES)
def test_every_page_draws_its_command(page):
    values = dict(state.DEFAULTS)
    if page == "serving":  # keep the in-flight simulation small
        values.update({"s-plans": "tp=8", "s-output": 16})
    outcome, figs, text = pages.compute(page, values, NO_FILES, runner.run)
    assert outcome.error is None, outcome.error
    assert figs and all(f["data"] for f in figs if f is not pages.no_update)
    assert text
    csv_text = pages.table(page, values, NO_FILES, runner.run)  # what the CSV button gives
    assert csv_text.count("\n") >= (2 if page == "serving" else 10), csv_text[:200]
    sent = json.loads(pages.json_text(page, values, NO_FILES, runner.run))  # what the JSON button gives
    assert sent.keys() == outcome.data.keys() and sent.get("model") == outcome.data.get("model")


def test_the_crossover_marks_the_cli_crossings():
    outcome, (fig, parts), text = pages.compute("crossover", dict(state.DEFAULTS), NO_FILES, runner.run)
    crossings = outcome.data["crossings"]
    assert text == " | ".join(c["text"] for c in crossings)
    assert sorted(s["x0"] for s in fig["layout"]["shapes"]) == sorted(c["at"] for c in crossings)
    assert {b["x"][0] for b in parts["data"]} == {crossings[0]["faster_below"]}


def test_explore_without_dash_says_how_to_install(cli, monkeypatch):
    monkeypatch.setitem(sys.modules, "dash", None)
    code, _, err = cli(["explore", "--no-browser"])
    assert code == 2 and "pip install -e '.[explore]'" in err and err.count("\n") == 1


def test_explore_on_a_busy_port_says_so(cli):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, _, err = cli(["explore", "--no-browser", "--port", str(port)])
    assert code == 2 and f"--port: {port}" in err and err.count("\n") == 1


def test_uploaded_model_and_calibration_join_every_command():
    args = state.with_files(state.crossover_args(state.DEFAULTS), "/tmp/config.json", "/tmp/cal.yaml")
    assert args[:3] == ["crossover", "--model", "/tmp/config.json"] and args[-2:] == ["--calibration", "/tmp/cal.yaml"]
    planner = state.with_files(state.planner_args(state.DEFAULTS, "t.csv"), "m.yaml", None)
    assert planner[planner.index("--model") + 1] == "m.yaml" and "--calibration" not in planner


def test_a_hugging_face_config_drives_the_crossover(small_hf_config):
    outcome, _, _ = pages.compute("crossover", dict(state.DEFAULTS), (str(small_hf_config), None), runner.run)
    assert outcome.error is None and "16 layers, hidden 2048" in outcome.data["assumptions"]


def test_the_winner_map_hover_says_where_the_winner_s_time_goes():
    values = dict(state.DEFAULTS)
    outcome, (fig,), _ = pages.compute("winner-map", values, NO_FILES, runner.run)
    hover = [t for row in fig["data"][0]["text"] for t in row]
    assert all("fastest: " in t and "compute " in t for t in hover)
    assert "compute_s[tp=8]" in pages.table("winner-map", values, NO_FILES, runner.run).splitlines()[0]
    assert outcome.command.endswith("--csv grid.csv --breakdown")  # written where the user runs it


def test_serving_targets_run_the_search_beside_the_plans():
    values = {**state.DEFAULTS, "s-plans": "tp=8; pp=8", "s-output": 16, "s-tpot": "50ms"}
    outcome, (fig,), text = pages.compute("serving", values, NO_FILES, runner.run)
    assert outcome.error is None and "meets the targets: " in text
    assert {t["name"] for t in fig["data"]} == {"tp=8", "pp=8"}
    bad, _, _ = pages.compute("serving", {**values, "s-tpot": "fast"}, NO_FILES, runner.run)
    assert bad.error.startswith("--tpot-max: ")


def test_a_table_built_in_memory_is_the_file_the_command_writes(monkeypatch):
    """The planner's table (2,652 plans) built in memory is the CSV written to a file and read
    back, text for text."""
    args = state.planner_args(dict(state.DEFAULTS))
    in_memory = runner.run(args).table
    monkeypatch.setattr(runner, "IN_MEMORY_ROWS", -1)
    assert in_memory and in_memory == runner.run(args).table


def test_the_planner_heatmap_reads_the_columns_it_draws():
    """`figures.read_columns` gives the cells `read_table` gives, for the columns asked (the
    planner's heatmap reads four of its table's columns), row for row."""
    from shardwise.explore import figures

    table = runner.run(state.planner_args(dict(state.DEFAULTS))).table
    names = ("tp", "pp", "fits_with_headroom", "step_time_s", "schedule")
    _, rows = figures.read_table(table)
    assert rows and list(figures.read_columns(table, names)) == [tuple(r[n] for n in names) for r in rows]
    fig = figures.planner_heatmap(table, "time")
    best = min(float(r["step_time_s"]) for r in rows if r["fits_with_headroom"] == "true")
    assert min(v for row in fig["data"][0]["z"] for v in row if v is not None) == best


def test_a_serving_plan_that_does_not_fit_is_said_not_a_crash():
    """tp=1 of a 70B model on one 80 GB GPU has no TTFT or TPOT (the command prints '-'): the
    page says it does not fit, with the memory the command gives, beside the plans that do."""
    values = {**state.DEFAULTS, "s-plans": "tp=8; tp=1", "s-output": 16}
    outcome, (fig,), text = pages.compute("serving", values, NO_FILES, runner.run)
    tp1 = next(p for p in outcome.data["plans"] if p["plan"] == "tp=1")
    assert outcome.error is None and tp1["ttft_s"] is None
    assert f"tp=1: does not fit ({tp1['memory_bytes']['total'] / 1e9:.1f} GB per GPU" in text
    assert f"would fit with {tp1['would_fit']}" in text
    assert "tp=8: TTFT " in text and {t["name"] for t in fig["data"]} == {"tp=8"}  # no empty line


@pytest.mark.parametrize(
    ("page", "control", "bad"),
    [
        ("crossover", "x-heads", 1.5),  # "--heads: heads: '1.5' is not allowed"
        ("crossover", "x-layers", 0),  # "model 'gpt-96l-4096h': layers: 0 is not allowed"
        ("crossover", "x-plans", "tp=8; tp=8"),  # "each --plan and each --intra-link label must be different"
        ("serving", "s-plans", "tp=8; tp=8"),
        ("winner-map", "w-y", "abc"),  # "--vary 'abc': ...": the y axis's, not the x axis's
        ("winner-map", "w-x", "abc"),
        ("planner", "p-precision", "fp8"),  # "precision: fp8 is not supported by gpu 'a100-sxm4-80gb'"
        ("timeline", "t-vpp", 2),  # "plan: vpp=2 needs schedule=interleaved"
    ],
)
def test_the_command_s_message_goes_under_the_control_it_is_about(page, control, bad):
    values = {c: state.DEFAULTS[c] for c in state.CONTROLS[page]} | {control: bad}
    outcome, _, _ = pages.compute(page, values, NO_FILES, runner.run)
    assert outcome.error
    top, *msgs = layout.error_outputs(page, outcome, values=values)
    named = dict(zip(state.CONTROLS[page], msgs, strict=True))
    assert top == "" and named[control] == outcome.error, (top, named)


def test_figure_axes_name_their_quantity_and_unit():
    """A varied bandwidth is drawn in GB/s on an axis that says so (not bytes/s on an axis called
    'bandwidth'), a latency in µs; time axes say what time, in seconds."""
    values = {**state.DEFAULTS, "x-vary": "bandwidth=4GB/s..600GB/s"}
    outcome, (fig, parts), _ = pages.compute("crossover", values, NO_FILES, runner.run)
    x, y = fig["layout"]["xaxis"], fig["layout"]["yaxis"]
    assert x["title"]["text"] == "link bandwidth per direction (GB/s)"
    assert y["title"]["text"].startswith("train time (s")
    assert fig["data"][1]["x"][0] == pytest.approx(4.0)
    crossings = outcome.data["crossings"]
    assert sorted(s["x0"] for s in fig["layout"]["shapes"]) == pytest.approx(sorted(c["at"] / 1e9 for c in crossings))
    assert parts["layout"]["yaxis"]["title"]["text"] == "time (s)"
    values = {**state.DEFAULTS, "w-x": "latency=1us..100us:5", "w-y": "batch=1..8"}
    _, (heat,), _ = pages.compute("winner-map", values, NO_FILES, runner.run)
    assert heat["layout"]["xaxis"]["title"]["text"] == "link latency per step (µs)"
    assert heat["layout"]["yaxis"]["title"]["text"] == "global batch (sequences per step)"
    assert heat["data"][0]["x"][0] == pytest.approx(1.0)


def test_a_line_label_on_a_log_axis_is_placed_at_its_line():
    """Plotly places an annotation on a log axis at 10**x: the serving page's TPOT target (20
    tokens/s per user) was labelled at 1e20, which stretched the axis and squeezed the frontier
    into its left edge; so were the crossings of a crossover over a wide range."""
    import math

    values = {**state.DEFAULTS, "s-plans": "tp=8", "s-output": 16, "s-tpot": "50ms"}
    _, (fig,), _ = pages.compute("serving", values, NO_FILES, runner.run)
    (line,), (label,) = fig["layout"]["shapes"], fig["layout"]["annotations"]
    assert fig["layout"]["xaxis"]["type"] == "log" and line["x0"] == pytest.approx(20.0)
    assert label["x"] == pytest.approx(math.log10(20.0))
    values = {**state.DEFAULTS, "x-vary": "bandwidth=4GB/s..600GB/s"}
    _, (fig, _), _ = pages.compute("crossover", values, NO_FILES, runner.run)
    assert fig["layout"]["xaxis"]["type"] == "log"
    shapes, labels = fig["layout"]["shapes"], fig["layout"]["annotations"]
    assert [a["x"] for a in labels] == pytest.approx([math.log10(s["x0"]) for s in shapes])
    _, (fig, _), _ = pages.compute("crossover", dict(state.DEFAULTS), NO_FILES, runner.run)  # a linear axis
    assert [a["x"] for a in fig["layout"]["annotations"]] == [s["x0"] for s in fig["layout"]["shapes"]]


def test_serving_targets_show_the_command_that_searched_for_them(cli):
    """With a TTFT or TPOT target the view runs a second command (`serve --ttft-max/--tpot-max`):
    its line is shown under the first, and running it gives the plan the page says meets them."""
    import shlex

    values = {**state.DEFAULTS, "s-plans": "tp=8", "s-output": 16, "s-tpot": "20ms"}
    outcome, _, text = pages.compute("serving", values, NO_FILES, runner.run)
    first, second = outcome.command.splitlines()
    assert "--with-frontier" in first and "--tpot-max" not in first
    assert second.startswith("shardwise serve ") and second.endswith("--tpot-max 20ms")
    code, out, _ = cli([*shlex.split(second)[1:], "--json"])
    assert code == 0 and pages._meets(json.loads(out)) in text


@pytest.mark.parametrize(
    ("page", "control"), [("planner", "p-nodes"), ("serving", "s-input"), ("crossover", "x-batch")]
)
def test_an_empty_number_box_that_needs_a_number_says_so_under_it(page, control):
    """A browser's number box holds nothing when what was typed is not a number ('abc'): the
    command then ran with its own default (1 server, a 512-token prompt) while the box showed
    nothing, and the planner said no plan fits. A box that needs a number says so instead."""
    from shardwise.explore.checks import ControlError

    values = {c: state.DEFAULTS[c] for c in state.CONTROLS[page]} | {control: None}
    with pytest.raises(ControlError) as raised:
        pages.compute(page, values, NO_FILES, runner.run)
    assert raised.value.control == control and "give a number" in str(raised.value)
    optional = {c: state.DEFAULTS[c] for c in state.CONTROLS["serving"]} | {"s-plans": "tp=8", "s-output": 16}
    assert pages.compute("serving", optional | {"s-rate": None}, NO_FILES, runner.run)[0].error is None


def test_the_winner_map_s_log_axis_is_labelled_with_numbers():
    """The default map's bandwidth axis (4 to 600 GB/s) is logarithmic: its ticks are labelled as
    numbers (5, 10, 20, 50, ...), not Plotly's minor labels, which read as single digits ('100, 9,
    8, 7, ... 2, 10')."""
    _, (fig,), _ = pages.compute("winner-map", dict(state.DEFAULTS), NO_FILES, runner.run)
    y = fig["layout"]["yaxis"]
    assert y["type"] == "log" and y["ticktext"][:4] == ["5", "10", "20", "50"]
    assert "tickvals" not in fig["layout"]["xaxis"]  # batch 1..64 is linear


def test_an_overloaded_serving_plan_says_so_and_what_it_sustains():
    """At 1000 requests/s 8 H100s serving a 70B model are overloaded (the command says queues grow
    without bound, up to ~11 requests/s): the page says so too, and a TTFT of 50 s reads in seconds,
    not '5.039e+04 ms'."""
    values = {**state.DEFAULTS, "s-plans": "tp=8", "s-output": 16, "s-rate": 1000}
    outcome, _, text = pages.compute("serving", values, NO_FILES, runner.run)
    (plan,) = outcome.data["plans"]
    assert plan["overloaded"] and plan["ttft_s"] > 10
    assert f"TTFT {plan['ttft_s']:.4g} s," in text and "e+" not in text
    assert f"overloaded: sustains at most {plan['max_request_rate_per_s']:.3g} requests/s" in text


def test_a_crossover_with_no_link_asks_for_one():
    """With every link unticked and the slider at 0 the command compared its own default links
    (NVLink and PCIe) while the page showed none ticked: it asks for a link instead."""
    from shardwise.explore.checks import ControlError

    values = {**state.DEFAULTS, "x-links": [], "x-bw": 0}
    with pytest.raises(ControlError) as raised:
        pages.compute("crossover", values, NO_FILES, runner.run)
    assert raised.value.control == "x-links" and "tick a link" in str(raised.value)
    outcome, _, text = pages.compute("crossover", {**values, "x-bw": 64}, NO_FILES, runner.run)
    assert outcome.error is None and text.startswith("custom: ")  # the slider's link alone


def test_a_term_keeps_one_colour_on_every_page_and_in_the_command_lines_figures():
    """Review 33: the Planner page coloured terms by position from 8 colours (the 9th, overhead,
    repeated compute's blue) and pp bubble changed colour between pages; both pages and the command
    line's stacked bars now take each term's fixed colour (`colors.TERM_COLORS`)."""
    from shardwise import plots
    from shardwise.colors import TERM_COLORS
    from shardwise.explore import figures
    from shardwise.plots._base import plt

    terms = ["compute", "tp_comm", "ep_comm", "offload", "pp_p2p", "pp_bubble", "dp_comm", "optimizer", "overhead"]
    planner = figures.stacked(["tp=8", "pp=8"], [dict.fromkeys(terms, 1.0)] * 2, "t")
    colours = {b["name"]: b["marker"]["color"] for b in planner["data"]}
    assert len(set(colours.values())) == len(terms)  # overhead is not compute's blue
    crossover = figures.breakdown({"pp=8": {"compute": 1.0, "pp_bubble": 0.5}}, 4.0, "batch")
    assert [b["marker"]["color"] for b in crossover["data"]] == [TERM_COLORS["compute"], TERM_COLORS["pp_bubble"]]
    assert colours["PP bubble"] == TERM_COLORS["pp_bubble"] and colours["fixed overheads"] == TERM_COLORS["overhead"]
    fig = plots.stacked_bars(["a"], {"pp_bubble": np.array([1.0]), "compute": np.array([2.0])}, "ms", "t")
    drawn = [tuple(round(c, 3) for c in p.get_facecolor()[:3]) for p in fig.axes[0].patches]
    from matplotlib.colors import to_rgb

    assert drawn == [tuple(round(c, 3) for c in to_rgb(TERM_COLORS[t])) for t in ("pp_bubble", "compute")]
    plt.close(fig)
