"""Figures: one colour per plan kind, borders drawn once, hardware in the title."""

from __future__ import annotations

import numpy as np
import pytest

from shardwise.plots._base import KIND_SHADES, plan_colors, plan_kind, plt


@pytest.mark.parametrize(
    ("label", "kind"),
    [
        ("tp=8", "tp"),
        ("TP=8 PP=1", "tp"),
        ("tp=all", "tp"),
        ("pp=8", "pp"),
        ("tp=2,pp=4", "hybrid"),
        ("tp=1", "dp"),
        ("dp=8", "dp"),
        ("NVLink", None),
        ("tp=8, PCIe", "tp"),
    ],
)
def test_plan_kind(label, kind):
    assert plan_kind(label) == kind


def test_one_colour_per_kind_and_a_shade_per_repeat():
    tp8, pp8, tp4, hybrid, link = plan_colors(["tp=8", "pp=8", "tp=4", "tp=2,pp=4", "NVLink"])
    assert tp8 == KIND_SHADES["tp"][0] and tp4 == KIND_SHADES["tp"][1]
    assert pp8 == KIND_SHADES["pp"][0] and hybrid == KIND_SHADES["hybrid"][0]
    assert link not in {c for shades in KIND_SHADES.values() for c in shades}
    assert plan_colors(["pp=8", "tp=8"]) == [pp8, tp8]  # the colour follows the kind, not the order


def test_winner_borders_are_single_segments_on_cell_edges():
    from shardwise.plots.maps import _borders

    # plan 0 | plan 2 side by side: one vertical edge per row, not one line per level between 0 and 2
    winner = np.array([[0, 0, 0], [2, 2, 2]])  # (nx=2, ny=3)
    lines = _borders(winner, np.array([0.0, 1.0, 2.0]), np.array([0.0, 1.0, 2.0, 3.0]))
    segments = lines.get_segments()
    assert len(segments) == 3
    assert all(np.allclose(s[:, 0], 1.0) for s in segments)  # on the shared edge x = 1


def test_every_figure_title_names_the_hardware(tmp_path, cli, monkeypatch):
    from matplotlib import pyplot as plt

    titles = []
    monkeypatch.setattr("matplotlib.figure.Figure.suptitle", lambda self, t, **k: titles.append(t))
    monkeypatch.setattr("matplotlib.axes.Axes.set_title", lambda self, t, **k: titles.append(t))
    code, _, _ = cli(["crossover", "--vary", "batch=1..8", "--plot", str(tmp_path / "c.png")])
    assert code == 0 and any("on 8 x a100-sxm4-80gb" in t for t in titles)
    titles.clear()
    args = ["--model", "llama3-8b", "--system", "dgx-a100", "--pp", "4", "--tp", "2", "--global-batch", "16"]
    code, _, _ = cli(["timeline", *args, "--plot", str(tmp_path / "t.png")])
    assert code == 0 and any(" x a100" in t for t in titles), titles
    plt.close("all")


def test_serve_draws_one_panel_when_the_comparison_link_is_the_systems_own(tmp_path, cli, monkeypatch):
    drawn = []
    import shardwise.plots as plots

    real = plots.serving_frontier

    def spy(panels, title, *band):
        drawn.append(list(panels))
        return real(panels, title, *band)

    monkeypatch.setattr(plots, "serving_frontier", spy)
    args = ["serve", "--model", "llama3-8b", "--system", "a100-pcie-8x", "--plan", "tp=8", "--plan", "pp=8"]
    code, _, _ = cli([*args, "--plot", str(tmp_path / "f.png")])
    assert code == 0 and len(drawn[-1]) == 1
    code, _, _ = cli([*args, "--plot", str(tmp_path / "g.png"), "--plot-link", "NVLink=nvlink3"])
    assert code == 0 and len(drawn[-1]) == 2


def test_a_rastered_gantt_keeps_each_kinds_share_of_the_time():
    """Operations narrower than a pixel: each column of a stage's band is stacked by the share of
    its time each kind covers (forward a third, backward two thirds, then idle), not painted by
    the majority kind, which would hide the forward passes and the idle drain."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_rgb

    from shardwise.engines.simulator import KIND_NAMES, OP_DTYPE
    from shardwise.plots.timeline import GANTT_COLORS, RASTER_COLUMNS, RASTER_ROWS_PER_STAGE, _raster

    n = 30_000  # forward 1 s then backward 2 s, repeated over the first half of 2 * 3n seconds
    starts = np.arange(n) * 3.0
    rows = [(0, KIND_NAMES.index("F"), i, 0, s, s + 1.0) for i, s in enumerate(starts)]
    rows += [(0, KIND_NAMES.index("B"), i, 0, s + 1.0, s + 3.0) for i, s in enumerate(starts)]
    ops = np.array(rows, dtype=OP_DTYPE)
    fig, ax = plt.subplots()
    _raster(ax, ops, 1, 6.0 * n, 1.0)
    image = ax.get_images()[0].get_array()
    plt.close(fig)
    band = image[2:RASTER_ROWS_PER_STAGE, : RASTER_COLUMNS // 2 - 1, :3]  # the busy half, compute rows
    blue, orange = (np.round(np.array(to_rgb(GANTT_COLORS[k])) * 255) for k in ("F", "B"))
    share_f = np.mean(np.all(band == blue, axis=-1))
    share_b = np.mean(np.all(band == orange, axis=-1))
    assert abs(share_f - 1 / 3) < 0.02 and abs(share_b - 2 / 3) < 0.02
    idle = image[2:RASTER_ROWS_PER_STAGE, RASTER_COLUMNS // 2 + 1 :, :3]
    assert np.all(idle == 255)


@pytest.mark.parametrize("upper_left", [True, False])
def test_a_pixel_image_draws_what_imshow_draws(tmp_path, upper_left):
    """PixelImage (byte lookup, no float passes) paints a raster canvas as matplotlib's own
    imshow(interpolation="none") does: same orientation, same columns, within edge rounding."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from PIL import Image

    from shardwise.plots.pixels import pixel_imshow

    rng = np.random.default_rng(1)
    image = np.full((40, 300, 4), 255, dtype=np.uint8)
    image[..., :3] = rng.integers(0, 255, (40, 300, 3), dtype=np.uint8)
    if upper_left:  # a marker only in the top-left corner: a flip or a mirror would move it
        image[:10, :30, :3] = (255, 0, 0)
    pngs = []
    for draw in ("imshow", "pixels"):
        fig, ax = plt.subplots(figsize=(6, 3))
        extent = (0.0, 7.5, -0.5, 3.5)
        if draw == "imshow":
            ax.imshow(image, aspect="auto", interpolation="none", extent=extent, origin="upper")
        else:
            pixel_imshow(ax, image, extent)
        ax.set_xlim(0, 8.0)
        ax.set_ylim(-0.7, 3.7)
        path = tmp_path / f"{draw}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        pngs.append(np.asarray(Image.open(path)).astype(int))
    differs = np.abs(pngs[0] - pngs[1]).max(axis=2) > 0
    assert differs.mean() < 0.01


def test_a_pixel_image_still_draws_in_vector_formats(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from shardwise.plots.pixels import pixel_imshow

    fig, ax = plt.subplots()
    pixel_imshow(ax, np.full((4, 8, 4), 200, dtype=np.uint8), (0.0, 1.0, 0.0, 1.0))
    fig.savefig(tmp_path / "chart.svg")
    plt.close(fig)
    assert "<image" in (tmp_path / "chart.svg").read_text()


def test_the_crossover_legend_and_notes_sit_under_the_axes_not_on_the_curves():
    """With six entries, two of them long, a legend inside the axes ("best") hid part of a curve;
    under the axes it covers nothing, and the numbered notes come under it."""
    from shardwise.analyses.crossover import run_crossover
    from shardwise.analyses.experiment import brief_experiment
    from shardwise.plots.crossover import crossover_figure

    result = run_crossover(brief_experiment(), "batch", np.arange(1.0, 33.0))
    fig = crossover_figure(result, "t", "a subtitle", "s")
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    legend = ax.get_legend().get_window_extent(renderer)
    plot_area = ax.get_window_extent(renderer)
    (notes,) = fig.texts
    assert legend.y1 < plot_area.y0  # under the axes
    assert notes.get_window_extent(renderer).y1 <= legend.y0  # the notes under the legend
    plt.close(fig)


def test_the_tornado_marks_an_end_where_a_plan_does_not_fit_as_the_table_does():
    from shardwise.analyses.sensitivity import TornadoBar
    from shardwise.plots.sensitivity import tornado

    bars = [
        TornadoBar("hidden", 4096, 2048, 8192, 1.1, 0.66, fits_high=False, base_ratio=0.78),
        TornadoBar("layers", 96, 48, 192, 0.75, 0.79, base_ratio=0.78),
    ]
    fig = tornado(0.78, bars, ["tp=8", "pp=8"], 2.0, "t")
    ax = fig.axes[0]
    labels = sorted(t.get_text() for t in ax.texts)
    assert labels == ["0.66 *", "0.75", "0.79", "1.10"]
    assert any(t.get_text().startswith("* a plan does not fit") for t in ax.get_legend().get_texts())
    plt.close(fig)


def test_the_gantt_legend_names_the_collectives_after_the_pipeline():
    """dp = 1: the tied embeddings' sync is the only collective after the pipeline, and the legend
    says so (it was "data-parallel reduce / gather"); dp = 2 with the distributed optimizer: the
    reduction and the parameter all-gather (two kinds now) share one entry, as they share a colour."""
    from shardwise import presets
    from shardwise.engines.simulated import simulate_training_step
    from shardwise.plots.timeline import gantt
    from shardwise.specs import Plan, Scenario

    model, system = presets.model("gpt-96l-4096h"), presets.system("dgx-a100")
    legends = {}
    for dp in (1, 2):
        plan = Plan(tp=2 // dp, pp=4, dp=dp, global_batch=8, schedule="1f1b")
        fig = gantt(simulate_training_step(Scenario(model, system, plan)).simulation, "t")
        legends[dp] = [t.get_text() for t in fig.legends[0].get_texts()]
        plt.close(fig)
    assert "tied embedding sync" in legends[1] and not any("data-parallel" in t for t in legends[1])
    assert legends[2].count("data-parallel reduce / gather") == 1 and "tied embedding sync" in legends[2]
    # the interleaved schedule at dp = 1 drew reductions of nothing on stages 1-7 (review 33)
    plan = Plan(pp=8, vpp=4, global_batch=16, schedule="interleaved")
    fig = gantt(simulate_training_step(Scenario(model, system, plan)).simulation, "t")
    assert not any("data-parallel" in t.get_text() for t in fig.legends[0].get_texts())
    plt.close(fig)


def test_the_crossover_marker_sits_where_the_drawn_lines_cross():
    """Review 33: the marker of a crossing of batch sat at the first batch the other plan wins (2),
    on one line, not where the lines cross between 1 and 2; on log axes the drawn segments are
    straight in log space, so the point is interpolated there."""
    from shardwise.plots.crossover import crossing_point

    x = np.array([1.0, 2.0, 4.0])
    a, b = np.array([0.9, 1.8, 3.6]), np.array([1.06, 1.3, 1.8])  # a ahead at 1, b from 2 on
    px, py = crossing_point(x, a, b, 2.0, log_x=True, log_y=True)
    assert 1 < px < 2
    t = np.log(px / 1.0) / np.log(2.0)  # on both lines, in log space
    assert np.log(py) == pytest.approx(np.log(0.9) + t * np.log(1.8 / 0.9))
    assert np.log(py) == pytest.approx(np.log(1.06) + t * np.log(1.3 / 1.06))
    assert crossing_point(x, a, a * 2, 2.0, True, True) is None  # they never meet


def test_the_crossover_figure_names_band_and_tie_zone_apart_and_labels_a_short_log_axis():
    """The 80% band's legend swatch looked like the tie zone's shading: the tie zone is hatched now
    and each entry says what it is; a log axis over two decades is labelled at 1, 2, 5, 10, ...,
    not at 10^0 and 10^1 only."""
    from shardwise.analyses.crossover import run_crossover
    from shardwise.analyses.experiment import brief_experiment
    from shardwise.plots._base import label_log_y
    from shardwise.plots.crossover import TIE_HATCH, _tie_span, crossover_figure

    result = run_crossover(brief_experiment(), "batch", np.arange(1.0, 33.0))
    fig = crossover_figure(result, "t", "", "s")
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert any(t.startswith("band in each line's colour: its 80% interval") for t in labels)
    plt.close(fig)
    fig, ax = plt.subplots()
    _tie_span(ax, 1.0, 2.0, label="tie")
    assert ax.patches[-1].get_hatch() == TIE_HATCH
    ax.set_yscale("log")
    ax.set_ylim(0.7, 60.0)
    label_log_y(ax, 0.7, 60.0)
    fig.canvas.draw()
    shown = {t.get_text() for t in ax.get_yticklabels(minor=True) + ax.get_yticklabels() if t.get_text()}
    assert {"1", "2", "5", "10", "20", "50"} <= shown
    plt.close(fig)


def _sensitivity_curve(link, batches, winners, last, values=(24.0, 48.0, 72.0, 96.0)):
    from types import SimpleNamespace

    return SimpleNamespace(variable="layers", link=link, values=np.array(values), crossover_batch=np.array(batches),
                           winner_at_batch_1=winners, last_feasible_batch=np.array(last))  # fmt: skip


def test_the_sensitivity_footnote_speaks_of_markers_only_where_one_is_drawn():
    """plots/sensitivity.py ended its footnote in "triangles: no crossover up to batch 256:" with
    nothing after the colon where every point had a crossover."""
    from shardwise.plots.sensitivity import crossover_curves

    nan = float("nan")
    fig = crossover_curves(
        [_sensitivity_curve("NVLink", [8.0, 16.0, 17.0, 17.0], ["tp=8"] * 4, [256.0] * 4)], ["tp=8", "pp=8"], 256, "t"
    )
    (note,) = fig.texts
    assert note.get_text() == "below a line the plan that wins at batch 1 is faster, above it the other one"
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["NVLink"]
    plt.close(fig)
    fig = crossover_curves(
        [_sensitivity_curve("NVLink", [8.0, nan, 17.0, 17.0], ["tp=8"] * 4, [256.0] * 4)], ["tp=8", "pp=8"], 256, "t"
    )
    assert "NVLink: tp=8 faster up to batch 256 at layers 48" in fig.texts[0].get_text()
    plt.close(fig)


def test_the_sensitivity_plot_draws_each_kind_of_missing_crossover_apart():
    """Review 36 (3): "no feasible batch" and "both fit to 6" were drawn as the triangle of "no
    crossover up to 256", and the footnote printed "152 ()" with empty brackets."""
    from shardwise.plots.sensitivity import FITS_TO, NONE_FIT, THROUGHOUT, crossover_curves

    nan = float("nan")
    curves = [
        _sensitivity_curve("NVLink", [nan, 17.0, nan, nan], ["tp=8", "tp=8", "tp=8", ""], [256.0, 256.0, 6.0, nan]),
        _sensitivity_curve("PCIe", [nan, 3.0, 3.0, nan], ["tp=8", "tp=8", "tp=8", ""], [256.0, 256.0, 256.0, nan]),
    ]
    fig = crossover_curves(curves, ["tp=8", "pp=8"], 256, "t")
    ax = fig.axes[0]
    drawn = {line.get_gid(): line for line in ax.get_lines() if line.get_gid()}
    assert set(drawn) == {f"{THROUGHOUT}:NVLink", f"{THROUGHOUT}:PCIe", f"{FITS_TO}:NVLink", f"{NONE_FIT}:NVLink",
                          f"{NONE_FIT}:PCIe"}  # fmt: skip
    assert list(drawn[f"{THROUGHOUT}:NVLink"].get_ydata()) == [256.0]
    assert list(drawn[f"{FITS_TO}:NVLink"].get_xdata()) == [72.0]  # at the last batch where both fit
    assert list(drawn[f"{FITS_TO}:NVLink"].get_ydata()) == [6.0]
    assert {drawn[f"{k}:NVLink"].get_marker() for k in (THROUGHOUT, FITS_TO, NONE_FIT)} == {"^", "v", "X"}
    # the two links' markers at the same point are drawn apart, not one over the other
    nv, pc = drawn[f"{THROUGHOUT}:NVLink"], drawn[f"{THROUGHOUT}:PCIe"]
    fig.canvas.draw()
    assert nv.get_transform().transform((24.0, 256.0))[0] != pc.get_transform().transform((24.0, 256.0))[0]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[:2] == ["NVLink", "PCIe"] and len(legend) == 5
    assert any("as far as both plans fit" in t for t in legend) and any("no batch where both" in t for t in legend)
    note = fig.texts[0].get_text()
    assert "()" not in note
    assert "tp=8 faster as far as both plans fit at layers 72 (to batch 6)" in note
    assert "no batch where both plans fit at layers 96" in note
    plt.close(fig)


def test_a_switch_where_the_faster_plan_stops_fitting_is_drawn_as_a_limit_not_a_crossing():
    """Review 36 (4): in the decode crossover the switch at batch 162 (pp=8 stops fitting; tp=8 fits
    only at 162) was drawn as a crossing on the lines' crossing at 45, on top of marker (1), and
    its note left out the text's qualifier."""
    from shardwise.analyses.crossover import run_crossover
    from shardwise.analyses.crossover_limits import memory_limit
    from shardwise.analyses.experiment import brief_experiment
    from shardwise.plots.crossover import LIMIT_LABEL, crossover_figure

    exp = brief_experiment().with_(workload="decode")
    result = run_crossover(exp, "batch", 2.0 ** np.arange(9))
    changes = [c for c in result.crossings if c.winner_change and c.link == "PCIe"]
    assert [c.at for c in changes] == [50.0, 162.0]
    assert memory_limit(result, changes[0]) is None
    limit = memory_limit(result, changes[1])
    assert (limit.stops, limit.left, limit.left_fits_to, limit.none_from) == ("pp=8", "tp=8", 162.0, 163.0)
    fig = crossover_figure(result, "t", "", "s")
    ax = fig.axes[0]
    (line,) = [ln for ln in ax.get_lines() if ln.get_gid() == "memory limit 2"]
    assert list(line.get_xdata()) == [162.0, 162.0]  # a vertical line at the limit
    assert LIMIT_LABEL in [t.get_text() for t in ax.get_legend().get_texts()]
    marks = {a.get_gid(): a for a in ax.texts if (a.get_gid() or "").startswith("crossing")}
    fig.canvas.draw()
    one, two = (marks[f"crossing {k}"].get_window_extent().get_points().mean(axis=0) for k in (1, 2))
    assert np.hypot(*(one - two)) > 15  # not one over the other
    note = fig.texts[0].get_text()
    assert "(2) PCIe: pp=8 is faster below batch 162, tp=8 from 162 on: a memory limit, not a crossing" in note
    assert "tp=8 fits up to batch 162, no plan from 163 on" in note
    plt.close(fig)


def test_markers_that_would_overlap_are_set_apart():
    from shardwise.plots.crossover import MARKER_PT, _numbered

    fig, ax = plt.subplots()
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 10)
    placed = []
    a = _numbered(ax, 1, (5.0, 5.0), ax.transData, placed)
    b = _numbered(ax, 2, (5.0, 5.01), ax.transData, placed)
    assert a.xyann == (0.0, 0.0) and b.xyann[1] >= MARKER_PT  # lifted by at least its diameter
    assert b.arrow_patch is not None  # with a leader line to its point
    plt.close(fig)


def test_each_links_tie_zone_is_hatched_its_own_way_and_named():
    """Review 36 (6): two links' hatched tie zones looked alike and one legend entry named neither."""
    from shardwise.analyses.crossover import run_crossover
    from shardwise.analyses.experiment import brief_experiment
    from shardwise.plots.crossover import TIE_HATCHES, crossover_figure, tie_label

    result = run_crossover(brief_experiment(), "batch", np.arange(1.0, 33.0))
    fig = crossover_figure(result, "t", "", "s")
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert tie_label("NVLink", TIE_HATCHES[0]) in labels and tie_label("PCIe", TIE_HATCHES[1]) in labels
    hatches = {p.get_hatch() for p in ax.patches if p.get_hatch()}
    assert hatches == {TIE_HATCHES[0], TIE_HATCHES[1]}
    plt.close(fig)


def test_the_textbook_crossover_draws_both_models_and_no_band_on_the_formulas(tmp_path, cli, monkeypatch):
    """Review 36 (5): `crossover --cost-model textbook` drew one panel (the docs promise two), its
    x axis said sequences where the caption says rows of X (tokens), and the brief's formulas got
    the physical model's 80% band."""
    import matplotlib.figure

    from shardwise.plots import crossover as module

    drawn = []
    real = module.side_by_side

    def spy(*args, **kwargs):
        fig = real(*args, **kwargs)
        drawn.append(fig)
        return fig

    monkeypatch.setattr("shardwise.plots.side_by_side", spy)
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda *a, **k: None)
    code, _, err = cli(["crossover", "--cost-model", "textbook", "--vary", "batch=1,4,16", "--plot",
                          str(tmp_path / "t.png")])  # fmt: skip
    assert code == 0, err
    (fig,) = drawn
    physical, textbook = fig.axes
    assert physical.get_xlabel() == "global batch (sequences per step)"
    assert textbook.get_xlabel() == "batch (the brief's rows of X: tokens)"
    assert physical.collections and not textbook.collections  # bands only on the physical model
    assert not any("80%" in t.get_text() for t in textbook.get_legend().get_texts())
    assert any("batch = rows of X (tokens)" in " ".join(t.get_text().split()) for t in textbook.texts)


def test_the_slow_interconnect_figure_draws_each_links_curve_on_a_log_axis():
    """Review 36 (7): only the PCIe-class curve was drawn, with an "NVLink3 (A100)" mark on it
    (the NVLink-class curve crosses at 109 GB/s, not 179), on a linear axis that squashed the
    crossing."""
    from shardwise import plots
    from shardwise.analyses.scenarios import run

    report = run("slow-interconnect", plot=True)
    assert report.numbers["tp_pp_equal_bandwidth_bytes_per_s"] == pytest.approx(178.8e9, rel=0.01)
    fig = plots.draw(report.chart)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert {"tp=8, NVLink-class", "pp=8, NVLink-class", "tp=8, PCIe-class", "pp=8, PCIe-class"} <= set(labels)
    assert ax.get_yscale() == "log"
    note = fig.texts[0].get_text()
    assert "NVLink-class: pp=8 is faster below bandwidth 109.1 GB/s" in note
    assert "PCIe-class: pp=8 is faster below bandwidth 178.8 GB/s" in note
    plt.close(fig)


def test_thin_layers_marks_the_widths_that_do_not_fit_and_wide_layers_names_its_limit_in_the_axis_unit():
    """Review 36 (11): thin-layers drew hidden 8192 and 16384 (times only: 96 layers no longer fit)
    like the rest; wide-layers wrote "A100 80 GB" on a line drawn at 85.2 GB (79.35 GiB)."""
    from shardwise import plots
    from shardwise.analyses.scenarios import run

    fig = plots.draw(run("thin-layers", plot=True).chart)
    for ax in fig.axes:
        (ring,) = [ln for ln in ax.get_lines() if (ln.get_gid() or "").startswith("missing:")]
        assert list(ring.get_xdata()) == [8192, 16384]
        assert any("does not fit" in t.get_text() for t in ax.get_legend().get_texts())
    plt.close(fig)
    fig = plots.draw(run("wide-layers", plot=True).chart)
    ax = fig.axes[0]
    (limit,) = [t for t in ax.texts if "A100" in t.get_text()]
    assert "79.35 GiB = 85.2 GB" in limit.get_text()
    (line,) = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--" and len(set(ln.get_ydata())) == 1]
    assert line.get_ydata()[0] == pytest.approx(85.2, abs=0.05)
    plt.close(fig)


def test_the_winner_map_legend_names_no_valid_plan_only_where_a_cell_has_none():
    from shardwise.analyses.experiment import brief_experiment
    from shardwise.analyses.sweep import run_sweep
    from shardwise.plots.maps import winner_map

    exp = brief_experiment()
    every = run_sweep(exp, [("batch", np.arange(1.0, 9.0)), ("bandwidth", np.geomspace(1e9, 1e12, 5))])
    fig = winner_map(every)
    assert "no valid plan" not in [t.get_text() for t in fig.legends[0].get_texts()]
    plt.close(fig)
    # sequences of 100,000 tokens: neither plan fits, no cell has a winner
    odd = run_sweep(exp, [("batch", np.array([1.0, 8.0])), ("seq_len", np.array([2048.0, 100000.0]))])
    fig = winner_map(odd)
    assert "no valid plan" in [t.get_text() for t in fig.legends[0].get_texts()]
    plt.close(fig)


def test_the_textbook_crossover_keeps_its_own_panel_where_the_physical_model_refuses_the_plans(
    tmp_path, cli, monkeypatch
):
    """tp=16 on 8 GPUs: the brief's formulas price it, the physical model refuses it; the figure is
    the formulas' panel alone, saying why, not an error."""
    import matplotlib.figure

    from shardwise.plots import crossover as module

    drawn = []
    real = module.crossover_figure

    def spy(*args, **kwargs):
        drawn.append(real(*args, **kwargs))
        return drawn[-1]

    monkeypatch.setattr("shardwise.plots.crossover_figure", spy)
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda *a, **k: None)
    argv = ["crossover", "--cost-model", "textbook", "--plan", "tp=8", "--plan", "tp=16", "--vary", "batch=1,4"]
    code, _, err = cli([*argv, "--plot", str(tmp_path / "t.png")])
    assert code == 0, err
    (fig,) = drawn
    assert fig.axes[0].get_xlabel() == "batch (the brief's rows of X: tokens)" and not fig.axes[0].collections
    assert "no physical-model panel: --plan tp=16" in fig.texts[0].get_text()
