"""Review 40's findings on the machine-readable outputs (a script writer's pass): one column set, one
cell rule, one meaning per key and one shape across the commands' CSV and JSON."""

from __future__ import annotations

import csv
import io
import json

from shardwise.cli import serve_output


def _rows(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def test_serve_csv_gives_every_row_the_same_columns_whatever_it_holds():
    """A plan that does not fit has null percentiles and empty parts; its row must not add a scalar
    `percentiles_s` column beside the flattened `percentiles_s.*` (review 40 #1), and a table of
    such plans alone has the percentiles' columns too (empty)."""
    fits = {"plan": "tp=8", "decode_s": {"compute": 0.5}, "percentiles_s": {"ttft_s": {"p50": 1.0, "p90": 2.0}}}
    no = {"plan": "tp=2", "decode_s": {}, "percentiles_s": None, "launch": None}
    for plans in ([fits, no], [no, fits], [no]):
        rows = _rows(serve_output.csv_text({"model": "m", "engine": {"name": "vllm"}, "plans": plans}))
        header = rows[0]
        assert "percentiles_s" not in header and len(set(header)) == len(header)
        assert {len(r) for r in rows} == {len(header)}
        assert {f"percentiles_s.{m}.p{p}" for m in ("ttft_s", "tpot_s", "e2e_s") for p in (50, 90, 99)} <= set(header)
        assert not [name for name in header if any(other.startswith(name + ".") for other in header)]
        cells = dict(zip(header, rows[[p["plan"] for p in plans].index("tp=2") + 1], strict=True))
        assert cells["percentiles_s.ttft_s.p50"] == "" and cells["launch"] == ""


def test_serve_csv_of_a_real_answer_has_no_column_that_prefixes_another(cli):
    argv = "serve --model llama3-70b --system rtx4090-8x --plan tp=8 --plan tp=2 --concurrency 32 --csv"
    code, out, err = cli(argv.split())
    assert code == 0, err
    rows = _rows(out)
    header = rows[0]
    assert not [name for name in header if any(other.startswith(name + ".") for other in header)]
    assert {len(r) for r in rows} == {len(header)} and len(rows) == 3
    assert {r[header.index("fits_in_memory")] for r in rows[1:]} == {"true", "false"}  # tables.cell, not True
    json.loads(rows[2][header.index("memory_bytes.total")])  # whole bytes
