"""JSON and CSV/Parquet output (export.py): numpy values become plain JSON, NaN and infinities
become null (never the invalid bare NaN), and column files hold exactly the values given."""

import json
import math

import numpy as np
import pytest

from shardwise import export, presets, tables
from shardwise.engines.training import estimate_training_step
from shardwise.physics.params import total_params
from shardwise.specs import Plan, Recompute, Scenario, Schedule


def strict_loads(text: str):
    """json.loads that refuses the NaN / Infinity tokens Python's json would otherwise accept."""

    def refuse(token: str):
        raise AssertionError(f"invalid JSON token {token}")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (np.float64(1.5), 1.5),
        (np.float32(0.5), 0.5),
        (np.int64(3), 3),
        (np.bool_(True), True),
        (np.array([1, 2, 3]), [1, 2, 3]),
        (np.array([[1.5, 2.0], [3.0, 4.0]]), [[1.5, 2.0], [3.0, 4.0]]),
        (np.array(["a", "b"], dtype=object), ["a", "b"]),
        (Schedule.INTERLEAVED, "interleaved"),
        (Recompute.SELECTIVE, "selective"),
        ("text", "text"),
        (None, None),
    ],
)
def test_plain_values_round_trip_through_json(value, expected):
    out = export.plain(value)
    assert strict_loads(export.dumps(out)) == expected
    assert not isinstance(out, (np.generic, np.ndarray))  # nothing numpy is left


def test_plain_keeps_booleans_boolean():
    assert export.plain(np.bool_(False)) is False  # not 0.0: JSON must say false
    assert export.plain(np.array([True, False])) == [True, False]
    assert export.dumps({"x": export.plain(np.float64(0.25))}) == '{\n  "x": 0.25\n}'


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, float("nan"), np.float32("nan")])
def test_dumps_writes_nan_and_infinity_as_null(bad):
    # json.dumps would write a bare NaN / Infinity, which strict JSON readers reject
    assert strict_loads(export.dumps({"x": bad})) == {"x": None}
    assert strict_loads(export.dumps({"x": export.plain(bad)})) == {"x": None}


def test_dumps_takes_numpy_values_inside_nested_containers():
    data = {
        "times": np.array([1.0, np.nan, np.inf]),
        "grid": [np.array([[1, 2], [3, 4]]), (np.float64(0.5), np.int64(2))],
        "ok": np.bool_(True),
        "nested": {"deeper": [{"t": np.float32(0.25)}, -np.inf]},
    }
    assert strict_loads(export.dumps(data)) == {
        "times": [1.0, None, None],
        "grid": [[[1, 2], [3, 4]], [0.5, 2]],
        "ok": True,
        "nested": {"deeper": [{"t": 0.25}, None]},
    }


@pytest.fixture(scope="module")
def scenario():
    model, cluster = presets.model("gpt3-175b"), presets.system("dgx-a100", nodes=8)
    return Scenario(model, cluster, Plan(tp=8, pp=8, dp=1, global_batch=64, recompute="full", schedule="1f1b"))


def test_scenario_dict_is_json_with_labels_and_derived_numbers(scenario):
    data = strict_loads(export.dumps(export.scenario_dict(scenario)))
    model, cluster, plan = data["model"], data["cluster"], data["plan"]
    assert model["params"] == pytest.approx(174.6e9, rel=1e-3)  # Narayanan et al. 2021: GPT-3 175B
    assert model["params"] == total_params(scenario.model)
    assert (model["layers"], model["hidden"], model["seq_len"]) == (96, 12288, 2048)
    assert model["tied_embeddings"] is True and model["gated_mlp"] is False
    assert cluster["num_gpus"] == 64 and cluster["gpu"]["peak_flops_per_s_16bit"] == 312e12
    assert cluster["inter_node_link"]["bandwidth_bytes_per_s"] == pytest.approx(25e9)  # one HDR NIC per GPU
    assert (plan["tp"], plan["pp"], plan["dp"]) == (8, 8, 1)
    assert plan["schedule"] == "1f1b" and plan["recompute"] == "full"
    assert plan["num_micro_batches"] == 64 and plan["stage_layers"] is None


def test_a_cluster_without_a_network_exports_null():
    one_box = presets.system("dgx-a100").with_(inter_node_link=None)
    data = strict_loads(export.dumps(export.cluster_dict(one_box)))
    assert data["nodes"] == 1 and data["num_gpus"] == 8
    assert data["inter_node_link"] is None
    assert data["intra_node_link"]["bandwidth_bytes_per_s"] == pytest.approx(300e9)  # NVLink 3, one direction


def test_estimate_dict_carries_the_estimates_numbers(scenario):
    est = estimate_training_step(scenario)
    data = strict_loads(export.dumps(export.estimate_dict(est)))
    assert data["step_time_s"] == pytest.approx(float(est.step_time_s))
    assert data["tokens_per_s"] == pytest.approx(64 * 2048 / data["step_time_s"])  # batch x sequence / step
    assert data["mfu"] == pytest.approx(data["model_tflops_per_gpu"] * 1e12 / 312e12)
    assert sum(data["breakdown_s"].values()) == pytest.approx(data["step_time_s"])
    assert set(data["breakdown_s"]) >= {"compute", "tp_comm", "pp_p2p", "pp_bubble", "dp_comm", "optimizer"}
    memory = data["memory_bytes"]
    assert memory["total"] == pytest.approx(sum(v for k, v in memory.items() if k not in ("total", "cached")))
    assert data["fits_in_memory"] is (memory["total"] <= data["gpu_memory_bytes"])


def test_an_array_scenario_exports_lists(scenario):
    plans = Plan(tp=np.array([8, 4]), pp=np.array([8, 16]), dp=1, global_batch=64, recompute="full")
    est = estimate_training_step(Scenario(scenario.model, scenario.cluster, plans))
    data = strict_loads(export.dumps(export.estimate_dict(est)))
    assert len(data["step_time_s"]) == 2
    assert data["step_time_s"] == pytest.approx([float(x) for x in est.step_time_s])
    assert data["breakdown_s"]["compute"] == pytest.approx([float(x) for x in est.breakdown.compute_s])


def test_csv_columns_values_and_formatting(tmp_path):
    path = tmp_path / "grid.csv"
    columns = {
        "link": np.array(["NVLink", "PCIe"], dtype=object),
        "time_s": np.array([0.000123456789, 1234567.0]),
        "batch": np.array([1, 16]),
        "fits": np.array([True, False]),
    }
    tables.write_columns(columns, path)
    # floats at full precision (repr); integers whole; booleans as true/false; text as is
    assert path.read_text() == "link,time_s,batch,fits\nNVLink,0.000123456789,1,true\nPCIe,1234567.0,16,false\n"
    assert [p.name for p in tmp_path.iterdir()] == ["grid.csv"]  # no temporary file left behind


def test_csv_nan_is_written_as_an_empty_field(tmp_path):
    """A missing number is an empty field in every CSV the commands write (crossover's too)."""
    path = tmp_path / "x.csv"
    tables.write_columns({"t": np.array([1.0, np.nan])}, path)
    assert path.read_text().splitlines() == ["t", "1.0", ""]


def test_parquet_round_trips_the_columns(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "grid.parquet"
    columns = {"link": np.array(["NVLink", "PCIe"], dtype=object), "time_s": np.array([0.5, np.nan])}
    tables.write_columns(columns, path)
    table = pq.read_table(path).to_pydict()
    assert table["link"] == ["NVLink", "PCIe"]
    assert table["time_s"][0] == 0.5 and math.isnan(table["time_s"][1])


def test_csv_is_written_in_chunks_with_progress_and_the_same_text(tmp_path, monkeypatch):
    n = 1000
    columns = {
        "link": np.array(["NVLink", "PCIe"] * (n // 2), dtype=object),
        "batch": np.arange(n),
        "time_s": np.linspace(0.001, 10.0, n),
        "fits": np.arange(n) % 3 == 0,
    }
    whole = tmp_path / "whole.csv"
    tables.write_columns(columns, whole)
    monkeypatch.setattr(tables, "CSV_CHUNK_ROWS", 64)
    seen = []
    chunked = tmp_path / "chunked.csv"
    tables.write_columns(columns, chunked, progress=lambda done, total: seen.append((done, total)))
    assert chunked.read_text() == whole.read_text()
    assert seen[0] == (64, n) and seen[-1] == (n, n) and len(seen) == -(-n // 64)
    lines = whole.read_text().splitlines()
    # 999 % 3 == 0: the last row fits
    assert len(lines) == n + 1 and lines[1] == "NVLink,0,0.001,true" and lines[-1] == "PCIe,999,10.0,true"


def test_long_rows_are_written_as_the_json_encoder_writes_them():
    """`export.Rows` (a simulated step's operations) is written by its own formatter: compact
    (orjson) and indented, the values `json.dumps` gives for the list of dicts."""
    import json

    import numpy as np

    from shardwise.export import Rows, dumps

    rows = Rows(
        ("stage", "kind", "start_s"), [(0, "F", 0.1), (np.int64(3), "send-B", np.float64(1e-300)), (2, "B", 2.5)]
    )
    data = {"schedule": "1f1b", "operations": rows, "n": 3}
    plain = {"schedule": "1f1b", "operations": [dict(zip(rows.names, r, strict=True)) for r in rows.records], "n": 3}
    compact = dumps(data, compact=True)
    assert "\n" not in compact and " " not in compact
    assert json.loads(compact) == json.loads(json.dumps(plain, default=lambda o: o.item()))
    assert json.loads(dumps(data)) == json.loads(json.dumps(plain, default=lambda o: o.item()))
    assert list(rows)[1]["kind"] == "send-B" and len(rows) == 3


def test_csv_floats_read_back_as_the_same_floats():
    """The CSV's floats (`tables._format`) are `repr`'s text, which reads back as the same float, for
    every kind of float: tiny, huge, negative zero, infinities, round numbers and random ones (review 40
    #6: `%.6g` wrote 1.92992e+11 bytes, so a CSV's keys did not join a JSON's); NaN, a missing number, is
    an empty field (`tables.MISSING`). `tables.cell` writes a single value by the same rule."""
    rng = np.random.default_rng(0)
    special = [0.0, -0.0, np.nan, np.inf, -np.inf, 1e-320, 5e-324, 1.7976931348623157e308, 1e16, 123456.5, 999999.5]
    values = np.array(special + list(rng.standard_normal(500) * 10.0 ** rng.integers(-30, 30, 500)))
    texts = tables._format(values)
    for v, text in zip(values.tolist(), texts, strict=True):
        if v != v:
            assert text == tables.MISSING
        else:
            assert float(text) == v and str(float(text)) == text
        assert tables.cell(v) == text
    assert [tables.cell(v) for v in (True, np.bool_(False), 3, np.int64(7), None, "a,b")] == [
        "true",
        "false",
        "3",
        "7",
        "",
        "a,b",
    ]
