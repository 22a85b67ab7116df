"""`serve`'s files: `-o/--output FILE` (the JSON `--json` prints, or one CSV row per plan, by the
extension; `-` prints the CSV) and `--csv` (the CSV on stdout), written whole or not at all
(`cli.output.write_text`, as plan's and sweep's `-o`)."""

from __future__ import annotations

from typing import Any

OUTPUT_FORMATS = (".json", ".csv")


def flat(row: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """One plan's JSON as CSV cells: nested objects flattened with dotted names (decode_s.compute),
    lists as JSON text, null as an empty cell."""
    import json

    cells: dict[str, Any] = {}
    for key, value in row.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            cells.update(flat(value, f"{name}."))
        elif isinstance(value, list | tuple):
            cells[name] = json.dumps(value)
        else:
            cells[name] = value
    return cells


def shape(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The columns every row is written with: the union of the rows' keys, an object wherever any row
    has one there (its keys the union too), in first-seen order; the simulated percentiles' object
    whole (`engines.inflight.PERCENTILES`) wherever the rows carry `percentiles_s`, so a plan that
    does not fit (null percentiles, empty parts) and one that does give the same columns (review 40
    #1: a null object was written as a scalar column `percentiles_s` beside `percentiles_s.*`)."""
    from shardwise.engines.inflight import PERCENTILES

    out: dict[str, Any] = {}
    for row in rows:
        _merge(out, row)
    if "percentiles_s" in out:
        whole = {m: {f"p{p}": None for p in PERCENTILES} for m in ("ttft_s", "tpot_s", "e2e_s")}
        out["percentiles_s"] = _merge(whole, out["percentiles_s"] if isinstance(out["percentiles_s"], dict) else {})
    return out


def _merge(into: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
    for key, value in row.items():
        if isinstance(value, dict):
            into[key] = _merge(into[key] if isinstance(into.get(key), dict) else {}, value)
        else:
            into.setdefault(key, None)
    return into


def _filled(row: dict[str, Any] | None, like: dict[str, Any]) -> dict[str, Any]:
    """`row` with every key of `like`, in its order: an object null or missing in `row` becomes one
    of nulls (empty cells)."""
    row = row if isinstance(row, dict) else {}
    return {k: _filled(row.get(k), sub) if isinstance(sub, dict) else row.get(k) for k, sub in like.items()}


def csv_text(answer: dict[str, Any]) -> str:
    """The CSV of `serve --json`'s answer: one row per plan (the latency-target search: per option),
    each with the model, system, gpus and engine the header names; the same columns in every row
    (`shape`)."""
    import csv
    import io

    from shardwise.tables import cell

    rows = answer.get("plans", answer.get("options", []))
    common = {k: answer[k] for k in ("model", "system", "gpus") if k in answer}
    if isinstance(common.get("model"), dict):  # the model's name (the JSON's object is its architecture)
        common["model"] = common["model"]["name"]
    if "engine" in answer:
        common["engine"] = answer["engine"]["name"]
    like = shape(rows)
    table = [{**common, **flat(_filled(row, like))} for row in rows]
    columns = list(table[0]) if table else [*common, *flat(_filled({}, like))]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows([cell(row[name]) for name in columns] for row in table)  # as plan's and sweep's cells
    return buf.getvalue()


def check(output_path: str | None, as_csv: bool, as_json: bool) -> None:
    """Refuse, before any work, an output that cannot be written or two answers on stdout."""
    from shardwise.cli import output
    from shardwise.errors import SpecError

    output.check(output_path, OUTPUT_FORMATS)
    printing = [f for f, on in (("--json", as_json), ("--csv", as_csv), ("-o -", output_path == output.STDOUT)) if on]
    if len(printing) > 1:
        raise SpecError(f"give one of {', '.join(printing)}, not both (each prints the answer)")


def write(answer: dict[str, Any], output_path: str | None, as_csv: bool) -> None:
    """`answer` to `output_path` (by its extension; `-`: the CSV on stdout), and as CSV on stdout with `as_csv`."""
    import json

    import click

    from shardwise import export
    from shardwise.cli import output

    answer = json.loads(export.dumps(answer))  # numpy values plain, NaN null
    if as_csv:
        click.echo(csv_text(answer), nl=False)
    if output_path is None:
        return
    text = export.dumps(answer) + "\n" if output_path.lower().endswith(".json") else csv_text(answer)
    output.write_text(output_path, text)
