"""What a measured run becomes: the ranks' results combined, the step split into terms from its
trace, and the CSV row `shardwise calibrate` reads (`scope: layers`, the system file by absolute
path, a new id when the same configuration is measured again)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shardwise.errors import SpecError


def combine(kind: str, ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """The step is the slowest rank's median; communication per kind averaged over ranks; the
    terms (`terms`) from the slowest rank's traced step."""
    step = max(r["step_s"] for r in ranks)
    kinds = sorted({k for r in ranks for k in r["comm_s"]})
    comm = {k: sum(r["comm_s"].get(k, 0.0) for r in ranks) / len(ranks) for k in kinds}
    slowest = max(ranks, key=lambda r: r["step_s"])
    return {
        "step_s": step,
        "per_rank_step_s": [r["step_s"] for r in ranks],
        "comm_s": comm,
        "ranks": len(ranks),
        "terms_s": terms(slowest),
    }


def terms(result: dict[str, Any]) -> dict[str, float]:
    """The slowest rank's traced step split as the prediction is: compute (its forward and backward
    spans less the collectives inside them), communication (collectives, and in a pipeline the
    receives, which also hold the waiting), and the rest of the step (idle, host overheads)."""
    spans = result.get("trace", [])
    step = max((end for _, _, end in spans), default=0.0)
    passes = [(a, b) for n, a, b in spans if n.startswith(("forward", "backward", "weight-gradient"))]
    comms = [(a, b) for n, a, b in spans if n.startswith(("tp_", "pp_", "dp_"))]
    comm = sum(b - a for a, b in comms)
    # collectives inside a forward or backward pass (TP's) are not compute
    nested = sum(b - a for a, b in comms if any(pa <= a and b <= pb for pa, pb in passes))
    passes = sum(b - a for a, b in passes)
    compute = passes - nested
    return {"compute": compute, "communication": comm, "other": max(0.0, step - compute - comm), "step": step}


def term_rows(kind: str, measured_terms: dict[str, float], predicted: Any) -> list[tuple[str, float, float]]:
    """(term, measured s, predicted s) in the same split: compute; communication (in a pipeline
    with the waiting, which the prediction calls the bubble); the rest; the traced step."""
    pp = kind == "pp"
    return [
        ("compute", measured_terms["compute"], predicted.compute_s),
        (
            "communication + waiting" if pp else "communication",
            measured_terms["communication"],
            predicted.comm_s + (predicted.bubble_s if pp else 0.0),
        ),
        ("other (idle, host)", measured_terms["other"], 0.0 if pp else predicted.bubble_s),
        ("traced step", measured_terms["step"], predicted.step_s),
    ]


def csv_row(kind: str, o: dict[str, Any], measured: dict[str, Any]) -> dict[str, Any]:
    n = o["ranks"]
    tp, pp, dp = {"tp": (n, 1, 1), "pp": (1, n, 1), "dp": (1, 1, n)}[kind]
    return {
        "id": f"measure-{kind}{n}-{o['model_name']}-l{o['layers']}-s{o['seq_len']}-b{o['micro_batch']}"
        f"x{o['micro_batches']}"
        + ("-sp" if o["sequence_parallel"] and kind == "tp" else "")
        + (f"-{o['schedule']}" if kind == "pp" and o["schedule"] != "1f1b" else ""),
        "model": o["model_name"],
        "system": _system_path(o["system"]),
        "num_gpus": n,
        "tp": tp,
        "pp": pp,
        "dp": dp,
        "global_batch": o["micro_batch"] * o["micro_batches"] * dp,
        "micro_batch": o["micro_batch"],
        "layers": o["layers"],
        "seq_len": o["seq_len"],
        "vpp": o["chunks"] if kind == "pp" and o["schedule"] == "interleaved" else 1,
        "precision": "bf16",
        "sequence_parallel": "yes" if (o["sequence_parallel"] and kind == "tp") else "no",
        "scope": "layers",  # no embedding, output layer or optimizer: calibrate prices it as measure does
        "micro_batches": o["micro_batches"],
        "step_time_s": f"{measured['step_s']:.6g}",
        "source": f"shardwise measure {kind} ({_how(kind, o)}, {o['dtype']}, {o['iters']} iterations, median)",
    }


def _system_path(system: str | None) -> str:
    """A preset name as given; a file as an absolute path (calibrate may run elsewhere)."""
    if not system:
        return ""
    return str(Path(system).resolve()) if Path(system).is_file() else system


def _how(kind: str, o: dict[str, Any]) -> str:
    if kind == "pp":
        return f"{o['schedule']} schedule"
    if kind == "tp" and o["sequence_parallel"]:
        return "sequence parallel, synchronous collectives"
    return "synchronous all-reduces"


# the columns of csv_row, in order: an existing -o file must have these (tests check csv_row's keys)
COLUMNS = (
    "id", "model", "system", "num_gpus", "tp", "pp", "dp", "global_batch", "micro_batch", "layers", "seq_len",
    "vpp", "precision", "sequence_parallel", "scope", "micro_batches", "step_time_s", "source",
)  # fmt: skip


def existing_ids(path: str) -> set[str]:
    """The ids of the runs already in measure's CSV `path` (none for a new or empty file), checked
    before anything is measured: a file of other columns, or not UTF-8, is one line naming -o."""
    import csv

    from shardwise.atomic import check_writable

    p = check_writable(path)  # a regular file (or a new one), never a device or a FIFO
    if not p.exists() or p.stat().st_size == 0:
        return set()
    try:
        with p.open(encoding="utf-8", newline="") as f:
            header = next(csv.reader(f), [])
            ids = {r[0] for r in csv.reader(f) if r}
    except UnicodeDecodeError as exc:
        raise SpecError(f"-o {path}: byte {exc.start} is not UTF-8; it is not measure's CSV, give a new file") from None
    except (OSError, csv.Error) as exc:
        raise SpecError(f"-o {path}: cannot read it as measure's CSV ({exc}); give a new file") from None
    if header != list(COLUMNS):
        raise SpecError(f"-o {path}: its columns are not measure's; give a new file")
    return ids


def append_csv(path: str, row: dict[str, Any]) -> None:
    import csv

    ids = existing_ids(path)
    new = not Path(path).exists() or Path(path).stat().st_size == 0
    base, n = row["id"], 2
    while row["id"] in ids:  # the same configuration measured again: its own id
        row["id"], n = f"{base}-run{n}", n + 1
    with open(path, "a", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(row))
        if new:
            w.writeheader()
        w.writerow(row)
