"""Grids: one vectorized evaluation equals point-by-point evaluation; winners and margins."""

import csv
import io
import json

import numpy as np
import pytest

from shardwise.analyses import sweep as sweep_module
from shardwise.analyses.evaluate import evaluate, times_s
from shardwise.analyses.experiment import brief_experiment
from shardwise.analyses.sweep import run_sweep

EXP = brief_experiment()
GRID = [
    ("batch", np.array([1.0, 3, 8, 20])),
    ("bandwidth", np.geomspace(4e9, 600e9, 5)),
    ("layers", np.array([8.0, 6, 96])),
]


def test_grid_equals_point_by_point():
    result = run_sweep(EXP, GRID)
    rng = np.random.default_rng(0)
    for _ in range(10):
        i, j, k = (int(rng.integers(len(v))) for _, v in GRID)
        for link in EXP.links:
            for plan in EXP.plans:
                point = {name: np.array([values[idx]]) for (name, values), idx in zip(GRID, (i, j, k), strict=True)}
                t, _ = evaluate(EXP, plan, link.link, point)
                got = result.times_s[(link.label, plan.label)][i, j, k]
                if np.isnan(t[0]):
                    assert np.isnan(got)
                else:
                    assert got == pytest.approx(t[0])


def test_blocks_give_the_same_answer(monkeypatch):
    whole = run_sweep(EXP, GRID)
    monkeypatch.setattr(sweep_module, "BLOCK_POINTS", 7)
    seen = []
    blocked = run_sweep(EXP, GRID, progress=seen.append)
    for key, value in whole.times_s.items():
        np.testing.assert_allclose(blocked.times_s[key], value)
    assert sum(seen) == np.prod([len(v) for _, v in GRID]) * len(EXP.links) * len(EXP.plans)


def test_winner_and_margin():
    result = run_sweep(EXP, GRID)
    for link in result.links:
        w, margin = result.winner(link), result.margin(link)
        t = result.stack(link)
        valid = w >= 0
        assert np.all(margin[valid] >= 1.0)
        best = np.take_along_axis(t, np.maximum(w, 0)[None], axis=0)[0]
        assert np.allclose(best[valid], t.min(axis=0)[valid])
    # 6 layers cannot fill 8 pipeline stages but are valid for tp=8: tp wins there by default
    assert np.all(result.winner("NVLink")[:, :, 1] == 0)


def test_columns_are_a_wide_table():
    result = run_sweep(EXP, GRID[:2])
    cols = dict(result.columns())
    batches, bandwidths = GRID[0][1], GRID[1][1]
    n = 4 * 5 * 2  # 4 batches x 5 bandwidths x 2 links
    assert all(len(v) == n for v in cols.values())
    assert {"link", "batch", "bandwidth_bytes_per_s", "time_s[tp=8]", "time_s[pp=8]", "winner_plan", "margin"} <= set(
        cols
    )
    # row order: link, then batch, then bandwidth (C order); row 27 = link 1, batch index 1, bandwidth 2
    link, i, j = result.links[1], 1, 2
    row = 1 * 20 + i * 5 + j
    assert cols["link"][row] == link
    assert cols["batch"][row] == batches[i] and cols["bandwidth_bytes_per_s"][row] == bandwidths[j]
    for plan in ("tp=8", "pp=8"):
        assert cols[f"time_s[{plan}]"][row] == result.times_s[(link, plan)][i, j]
    # the winner is the faster plan of its row; the margin the slower time over the faster
    tp, pp = cols["time_s[tp=8]"], cols["time_s[pp=8]"]
    both = ~np.isnan(tp) & ~np.isnan(pp)
    assert both.sum() > n // 2
    np.testing.assert_array_equal(cols["winner_plan"][both], np.where(tp[both] <= pp[both], "tp=8", "pp=8"))
    np.testing.assert_allclose(cols["margin"][both], np.maximum(tp, pp)[both] / np.minimum(tp, pp)[both])


def test_single_variable_grid_matches_times_s():
    result = run_sweep(EXP, [("batch", np.arange(1, 9.0))])
    t, _ = times_s(EXP, EXP.plans[0], EXP.links[0].link, "batch", np.arange(1, 9.0))
    np.testing.assert_allclose(result.times_s[("NVLink", "tp=8")], t)


@pytest.mark.parametrize("workload", ["train", "decode"])
def test_breakdown_columns_add_up_to_the_time(workload):
    import dataclasses

    exp = dataclasses.replace(brief_experiment(), workload=workload)
    result = run_sweep(exp, [("batch", np.array([1.0, 4.0, 16.0])), ("layers", np.array([24.0, 96.0]))], breakdown=True)
    cols = dict(result.columns())
    for plan in result.plans:
        terms = [k for k in cols if k.endswith(f"_s[{plan}]") and not k.startswith("time_s")]
        assert len(terms) >= 3
        total = np.sum([cols[k] for k in terms], axis=0)
        assert total == pytest.approx(cols[f"time_s[{plan}]"], rel=1e-9, nan_ok=True)
    plain = dict(run_sweep(exp, [("batch", np.array([1.0, 4.0, 16.0])), ("layers", np.array([24.0, 96.0]))]).columns())
    assert not any("compute_s[" in k for k in plain)
    assert plain["time_s[tp=8]"] == pytest.approx(cols["time_s[tp=8]"], nan_ok=True)


def test_breakdown_needs_a_table_and_the_physical_model(cli, tmp_path):
    code, _, err = cli(["sweep", "--vary", "batch=1..4", "--breakdown"])
    assert code == 2 and "-o FILE" in err
    out = str(tmp_path / "g.csv")
    code, _, err = cli(["sweep", "--vary", "batch=1..4", "--breakdown", "--csv", out, "--cost-model", "textbook"])
    assert code == 2 and "textbook" in err and not (tmp_path / "g.csv").exists()


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
@pytest.mark.parametrize("breakdown", [False, True])
def test_a_streamed_sweep_writes_the_table_the_whole_sweep_does(tmp_path, suffix, breakdown):
    """Streamed block by block (`stream_sweep`, blocks of a few points) the file is the in-memory
    table, row for row, and the totals are its winner counts."""
    from shardwise.analyses.sweep import stream_sweep
    from shardwise.tables import columns_writer, write_columns

    whole = run_sweep(EXP, GRID, breakdown=breakdown)
    write_columns(dict(whole.columns()), tmp_path / f"whole{suffix}")
    seen = []
    with columns_writer(tmp_path / f"streamed{suffix}") as write:
        totals = stream_sweep(EXP, GRID, write, progress=seen.append, breakdown=breakdown, block_points=7)
    assert len(seen) > 4 and sum(seen) == whole.points == totals.points
    if suffix == ".csv":
        assert (tmp_path / f"streamed{suffix}").read_text() == (tmp_path / f"whole{suffix}").read_text()
    else:
        import pyarrow.parquet as pq

        a, b = (pq.read_table(tmp_path / f"{name}{suffix}").to_pydict() for name in ("streamed", "whole"))
        assert list(a) == list(b)
        for name in a:  # NaN where a plan is invalid: compared as equal
            x, y = np.array(a[name]), np.array(b[name])
            assert np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), name
    assert totals.winner_cells() == whole.winner_cells()
    assert all(totals.valid_somewhere(p) == whole.valid_somewhere(p) for p in whole.plans)
    assert totals.invalid_cells() == whole.invalid_cells()
    assert any(any(c.values()) for c in whole.invalid_cells().values())
    assert totals.wins_beside_invalid() == whole.wins_beside_invalid()
    assert totals.invalid_tallies() == whole.invalid_tallies()


def test_a_failed_stream_leaves_no_file(tmp_path):
    from shardwise.analyses.sweep import stream_sweep
    from shardwise.tables import columns_writer

    out = tmp_path / "grid.csv"
    with pytest.raises(RuntimeError), columns_writer(out) as write:
        stream_sweep(EXP, GRID, write, block_points=7)
        raise RuntimeError("interrupted")
    assert not out.exists() and not list(tmp_path.iterdir())


def test_the_cli_streams_a_grid_with_csv_and_refuses_a_huge_one_without(cli, tmp_path):
    out = tmp_path / "grid.csv"
    code, _, err = cli(["sweep", "--vary", "batch=1..64", "--vary", "layers=8..96:12", "--csv", str(out)])
    assert code == 0, err
    assert out.read_text().count("\n") == 1 + 64 * 12 * 2  # header, every point on each link
    code, _, err = cli(["sweep", "--vary", "batch=1..5000", "--vary", "bandwidth=1GB/s..900GB/s:5000"])
    assert code == 2 and "-o FILE without --plot" in err
    bad = tmp_path / "bad.csv"
    code, _, err = cli(["sweep", "--vary", "batch=1..8", "--plan", "pp=8", "--layers", "6", "--csv", str(bad)])
    assert code == 2 and "invalid at every point" in err, err
    assert not bad.exists()


def test_a_plan_invalid_everywhere_prints_no_rows_before_its_error_on_stdout(cli):
    """`-o -` streamed the rows to stdout as it evaluated them, then said the plan was invalid
    everywhere (exit 2): a CSV and an error. The rows now wait for the sweep to end."""
    code, out, err = cli(["sweep", "--vary", "batch=1..8", "--plan", "pp=8", "--layers", "6", "-o", "-"])
    assert code == 2 and out == "" and err.count("\n") == 1 and "invalid at every point" in err, (out, err)
    code, out, err = cli(["sweep", "--vary", "batch=1..8", "--layers", "8", "--plan", "pp=8", "-o", "-"])
    assert code == 0 and out.count("\n") == 1 + 8 * 2, err  # header, every point on each link


def test_a_plan_that_does_not_fit_wins_no_cell_unless_memory_is_ignored(cli):
    """`--ignore-memory`'s help: without it a plan that does not fit in GPU memory cannot win. The
    sweep's winner map counted it as the winner all the same (the flag changed nothing)."""
    args = ["sweep", "--model", "mixtral-8x7b", "--system", "dgx-h100", "--framework", "fsdp", "--plan",
            "tp=1,ep=8,zero=3", "--plan", "tp=1,ep=4,zero=3", "--vary", "batch=8,64", "--vary", "gpus=8,16",
            "-o", "-"]  # fmt: skip
    code, out, err = cli(args)
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    plan = "tp=1,ep=8,zero=3"  # mixtral's state needs > 8 x 80 GB; batch 8 on 16 GPUs: invalid, not priced
    assert rows and all(
        r[f"fits_in_memory[{plan}]"] == ("false" if r[f"valid[{plan}]"] == "true" else "") for r in rows
    )
    assert [r[f"valid[{plan}]"] for r in rows] == ["true", "false", "true", "true"]
    assert all(r["winner_plan"] == "" for r in rows)
    code, out, err = cli([*args, "--ignore-memory"])
    assert code == 0, err
    assert any(r["winner_plan"] for r in csv.DictReader(io.StringIO(out)))


# review 43 #2: dp=2 plans cannot split an odd batch; tp=8,pp=8 (dp=1) can
SPLIT = ["sweep", "--model", "llama3-70b", "--system", "dgx-h100", "--nodes", "8", "--plan", "tp=8,pp=4",
         "--plan", "tp=8,pp=8", "--plan", "tp=4,pp=8", "--vary", "batch=64..80",
         "--framework", "torchtitan"]  # fmt: skip


def test_a_plan_that_cannot_split_a_batch_is_invalid_there_not_out_of_memory(cli):
    """Its time and fits_in_memory are empty and valid[PLAN] false at an odd batch (it fits at the
    even ones): 'fits_in_memory=false' called a plan that fits out of memory (review 43 #2)."""
    code, out, err = cli([*SPLIT, "-o", "-"])
    assert code == 0, err
    rows = {r["batch"]: r for r in csv.DictReader(io.StringIO(out))}
    odd, even = rows["65"], rows["66"]
    for plan in ("tp=8,pp=4", "tp=4,pp=8"):
        assert (odd[f"time_s[{plan}]"], odd[f"fits_in_memory[{plan}]"], odd[f"valid[{plan}]"]) == ("", "", "false")
        assert (even[f"fits_in_memory[{plan}]"], even[f"valid[{plan}]"]) == ("true", "true")
    assert (odd["valid[tp=8,pp=8]"], odd["winner_plan"]) == ("true", "tp=8,pp=8")


def test_wins_beside_an_invalid_plan_are_counted_apart_and_named(cli):
    """The wins table counted the odd batches as wins of the only plan valid there, with a footnote
    about memory only; now the cells each plan won beside an invalid one and those where each is
    invalid are counted apart, a note names each partly invalid plan and its rule, and the batch
    step every plan can run is given (review 43 #2)."""
    code, out, err = cli([*SPLIT, "--json"])
    assert code == 0, err
    d = json.loads(out)
    assert d["winner_cells"]["nvlink4"]["tp=8,pp=8"] == 8  # the 8 odd batches of 64..80
    assert d["wins_beside_invalid"]["nvlink4"] == {"tp=8,pp=4": 0, "tp=8,pp=8": 8, "tp=4,pp=8": 0}
    assert d["invalid_cells"]["nvlink4"] == {"tp=8,pp=4": 8, "tp=8,pp=8": 0, "tp=4,pp=8": 8}
    notes = " ".join(d["notes"])
    assert "--plan tp=8,pp=4 is invalid at 8 of 17 grid points (first at batch 65: the batch must be" in notes
    assert "tp=8,pp=8 is invalid" not in notes and "--vary batch=64..80:9" in notes
    code, text, err = cli(SPLIT)
    flat = " ".join(text.split())  # the table and its footnote wrap at the terminal's width
    assert code == 0 and "invalid (not" in text and "'beside an invalid plan' counts those wins" in flat, err
    assert "--vary batch=64..80:9" in err
    code, out, err = cli([*SPLIT[:-4], "--vary", "batch=64..80:9", "--framework", "torchtitan", "--json"])
    assert code == 0 and not any(n for c in json.loads(out)["invalid_cells"].values() for n in c.values()), err


def test_crossover_and_sensitivity_json_leave_fits_empty_where_a_plan_is_invalid(cli):
    """crossover --json's fits_in_memory was false at an odd batch where tp=8,pp=4 (dp 2) is invalid,
    and sensitivity's fits_low false where layers/2 does not split over pp 8: never priced there,
    so null, with crossover's `valid` false and a note naming the plan (review 43 #2)."""
    code, out, err = cli(["crossover", *SPLIT[1:7], "--plan", "tp=8,pp=4", "--plan", "tp=8,pp=8",
                          "--vary", "batch=64..66", "--framework", "torchtitan", "--no-plot", "--json"])  # fmt: skip
    assert code == 0, err
    d = json.loads(out)
    series = {s["plan"]: s for s in d["series"]}
    assert series["tp=8,pp=4"]["fits_in_memory"] == [True, None, True]
    assert series["tp=8,pp=4"]["valid"] == [True, False, True] and series["tp=8,pp=8"]["valid"] == [True] * 3
    assert any("--plan tp=8,pp=4 is invalid at 1 of 3 grid points" in n for n in d["notes"])
    sens = ["sensitivity", "--no-plot", "--plan", "tp=1,pp=8", "--plan", "tp=8", "--layers", "8", "--json"]
    code, out, err = cli(sens)
    assert code == 0, err
    bars = {b["input"]: b for b in json.loads(out)["one_at_a_time"]["NVLink"]["bars"]}
    assert (bars["layers"]["ratio_low"], bars["layers"]["fits_low"], bars["layers"]["fits_high"]) == (None, None, True)


def test_breakdown_books_the_embedding_sync_apart_as_predict_does(cli):
    """servefix #3: with one replica (dp = 1) what dp_comm held is the tied embedding's sync: the CSV
    carries it as `embedding_sync_s[PLAN]`, as predict's JSON `embedding_sync`; with dp > 1 dp_comm
    keeps it (predict writes no embedding_sync key then) and the column is 0."""
    args = ["--model", "gpt-96l-4096h", "--system", "dgx-a100"]
    sweep = ["sweep", *args, "--plan", "pp=8", "--vary", "gpus=8,16", "--vary", "batch=8", "--breakdown", "-o", "-"]
    code, out, err = cli(sweep)
    assert code == 0, err
    rows = {int(r["gpus"]): r for r in csv.DictReader(io.StringIO(out))}
    code, out, err = cli(["predict", *args, "--pp", "8", "--num-gpus", "8", "--global-batch", "8", "--json"])
    assert code == 0, err
    parts = json.loads(out)["breakdown_s"]
    assert parts["embedding_sync"] > 0 and parts["dp_comm"] == 0
    assert float(rows[8]["embedding_sync_s[pp=8]"]) == pytest.approx(parts["embedding_sync"], rel=1e-12)
    assert float(rows[8]["dp_comm_s[pp=8]"]) == 0
    code, out, err = cli(["predict", *args, "--pp", "8", "--num-gpus", "16", "--global-batch", "8", "--json"])
    assert code == 0 and "embedding_sync" not in json.loads(out)["breakdown_s"], err
    assert float(rows[16]["embedding_sync_s[pp=8]"]) == 0 and float(rows[16]["dp_comm_s[pp=8]"]) > 0


def test_plan_csv_books_the_embedding_sync_apart_too(cli):
    """`plan -o` rows, as sweep's: a plan with one replica of a dense model writes its tied
    embedding's sync as `embedding_sync_s` (dp_comm_s 0), the others 0 there and dp_comm_s theirs."""
    argv = ["plan", "--model", "gpt-96l-4096h", "--system", "dgx-a100", "--global-batch", "8", "-o", "-"]
    code, out, err = cli(argv)
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    one = [r for r in rows if r["dp"] == r["cp"] == "1" and int(r["pp"]) > 1]
    more = [r for r in rows if int(r["dp"]) > 1 and int(r["pp"]) > 1]
    assert one and more
    assert all(float(r["dp_comm_s"]) == 0 and float(r["embedding_sync_s"]) > 0 for r in one)
    assert all(float(r["embedding_sync_s"]) == 0 and float(r["dp_comm_s"]) > 0 for r in more)
