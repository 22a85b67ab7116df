"""Calibrate on the small jobs of one public stack and predict its large ones (docs/calibration.md,
"Calibrate on small jobs, predict the large ones").

Each candidate is one source of `src/shardwise/data/public_training_runs.csv` on one system (one
software stack on one kind of machine), split by GPU count, not at random: the runs on up to
`fit_max_gpus` GPUs are the calibration, the larger ones are predicted. A run published twice (the
same layout and measurement in two releases of a table) is kept once, as `calibrate` refuses a
duplicate. For each candidate the held-out runs' error and 80%-interval coverage are printed before
and after calibrating (`shardwise calibrate`, then `shardwise validate --runs` with and without
`--calibration`), with the parameters the fit chose.

    python tools/calibration_showcase.py                        # every candidate (about 5 minutes)
    python tools/calibration_showcase.py maxtext-h100           # one
    python tools/calibration_showcase.py maxtext-h100 --write examples/calibration
        # its two CSVs: maxtext-h100_fit.csv (calibrate on it), maxtext-h100_held_out.csv (predict it)
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PUBLIC = ROOT / "src" / "shardwise" / "data" / "public_training_runs.csv"
# what makes two rows of the public table the same run (`calibrate` refuses the same run and
# measurement twice)
SAME_RUN = (
    *("model", "system", "framework", "num_gpus", "tp", "pp", "cp", "vp", "ep", "dp", "fsdp"),
    *("mbs", "gbs", "seq_len", "layers", "recompute", "precision", "metric", "measured"),
)


@dataclass(frozen=True)
class Candidate:
    """One stack: the public rows whose `source` contains `source` on `system`, split at `fit_max_gpus`."""

    source: str
    system: str
    fit_max_gpus: int
    framework: str = ""  # only rows of this framework ("" any)


CANDIDATES = {
    "maxtext-h100": Candidate("NVIDIA/dgxc-benchmarking maxtext/", "dgx-h100", 128),
    "megatron-bridge-gb200": Candidate("Megatron-Bridge docs/performance-summary", "gb200-nvl72", 64),
    "megatron-bridge-gb300": Candidate("Megatron-Bridge docs/performance-summary", "gb300-nvl72", 64),
    "megatron-bridge-h100": Candidate("Megatron-Bridge docs/performance-summary", "dgx-h100", 64),
    "dgxc-gb200": Candidate("NVIDIA/dgxc-benchmarking", "gb200-nvl72", 128),
    "dgxc-llama3.1-8b-h100": Candidate("dgxc-benchmarking llama3.1/README_8b", "dgx-h100", 32),
    "dgxc-llama3.1-70b-h100": Candidate("dgxc-benchmarking llama3.1/README_70b", "dgx-h100", 128),
    "dgxc-llama3.1-405b-h100": Candidate("dgxc-benchmarking llama3.1/README_405b", "dgx-h100", 192),
    "dgxc-gpt3-175b-h100": Candidate("dgxc-benchmarking nemo_megatron/README_175b", "dgx-h100", 256),
    "dgxc-nemotron-h100": Candidate("dgxc-benchmarking nemotron/README.md", "dgx-h100", 64),
    "modalities-marenostrum5": Candidate("Modalities/modalities", "marenostrum5-acc", 64),
    "modalities-leonardo": Candidate("Modalities/modalities", "leonardo-booster", 64),
    "internevo-a100": Candidate("InternLM/InternEvo", "dgx-a100", 64),
    "paxml-h100": Candidate("NVIDIA/JAX-Toolbox", "dgx-h100", 64, framework="paxml"),
}


def rows_of(candidate: Candidate, rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """The candidate's rows with a model preset of their own (not the mixture-of-experts rows that
    `public_moe` resolves) that `shardwise validate public` prices (not skipped: a layout its source
    contradicts, a run published twice under two layouts, a layout the model refuses, ...), each
    run once."""
    from shardwise.analyses.public_validation import validate_public

    priced = {p.run_id for p in validate_public() if not p.skip}
    seen: set[tuple[str, ...]] = set()
    out = []
    for r in rows:
        if candidate.source not in r["source"] or r["system"] != candidate.system or not r["model"]:
            continue
        if candidate.framework and r["framework"] != candidate.framework:
            continue
        if r["id"] not in priced:
            continue
        key = tuple(r[c] for c in SAME_RUN)
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


def split(candidate: Candidate, rows: list[dict[str, str]]) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """(the runs to calibrate on, the runs to predict): up to `fit_max_gpus` GPUs, and more."""
    mine = rows_of(candidate, rows)
    fit = [r for r in mine if int(r["num_gpus"]) <= candidate.fit_max_gpus]
    return fit, [r for r in mine if int(r["num_gpus"]) > candidate.fit_max_gpus]


def run_row(row: dict[str, str]) -> dict[str, str]:
    """A public row as a runs CSV's row: the fields of the request `shardwise validate public`
    prices it with (`public_runs.request_for`: its stack, remat policy, sharding group, network,
    kernels), so that `calibrate` prices the run as it ran, and the measurement as published
    (`metric` + `measured`); its group is its GPU count, so `validate --runs` reports by scale, and
    its source names the published table and row."""
    from shardwise.analyses import public_moe, public_runs
    from shardwise.calibration.runs import REQUIRED

    request = public_runs.request_for(public_moe.resolved(row))
    return {
        "id": row["id"],
        **{k: str(getattr(request, k)) for k in REQUIRED},  # the columns a runs CSV must have, even at their default
        **request.to_row(),
        **{k: row[k] for k in ("metric", "measured")},
        "group": f"{row['num_gpus']} GPUs",
        "source": f"{row['source']} :: {row['locator']}",
    }


def write(path: Path, rows: list[dict[str, str]]) -> None:
    """`rows` as a runs CSV (`run_row`), the columns in the request's order."""
    from shardwise.requests.fields import TRAINING_FIELDS

    out = [run_row(r) for r in rows]
    given = {k for r in out for k in r}
    order = ("id", *(f.name for f in TRAINING_FIELDS), "metric", "measured", "group", "source")
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, [c for c in order if c in given], lineterminator="\n")
        w.writeheader()
        w.writerows(out)


def public_rows() -> list[dict[str, str]]:
    with PUBLIC.open(encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _shardwise(*args: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "shardwise", *args, "--json"], capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"shardwise {' '.join(args)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return json.loads(proc.stdout)


def _summary(result: dict) -> tuple[float, float, float]:
    """(MAPE, bias, share inside the 80% interval) of `validate --runs --json`'s runs."""
    errors = [r["error"] for r in result["runs"]]
    covered = [r["covered"] for r in result["runs"]]
    return statistics.mean(map(abs, errors)), statistics.mean(errors), statistics.mean(covered)


def evaluate(name: str, rows: list[dict[str, str]]) -> str:
    """One Markdown table row: the candidate's held-out error before and after calibrating."""
    fit, held = split(CANDIDATES[name], rows)
    with tempfile.TemporaryDirectory() as tmp:
        fit_csv, held_csv, cal = Path(tmp, "fit.csv"), Path(tmp, "held_out.csv"), Path(tmp, "cal.yaml")
        write(fit_csv, fit)
        write(held_csv, held)
        fitted = _shardwise("calibrate", str(fit_csv), "-o", str(cal))
        before = _summary(_shardwise("validate", "--runs", str(held_csv)))
        after = _summary(_shardwise("validate", "--runs", str(held_csv), "--calibration", str(cal)))
    params = [
        f"{k} {p['value']:.3g}" + (f" ({p['physical']})" if p.get("physical") else "")
        for k, p in fitted["parameters"].items()
        if p["fitted"]
    ]
    gpus = sorted({int(r["num_gpus"]) for r in fit}), sorted({int(r["num_gpus"]) for r in held})
    return (
        f"| {name} | {len(fit)} on {gpus[0][0]}-{gpus[0][-1]} | {len(held)} on {gpus[1][0]}-{gpus[1][-1]} | "
        f"{'; '.join(params) or 'none'} | {100 * before[0]:.1f}% -> {100 * after[0]:.1f}% | "
        f"{100 * before[1]:+.1f}% -> {100 * after[1]:+.1f}% | {100 * before[2]:.0f}% -> {100 * after[2]:.0f}% |"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"candidates [default: all]: {', '.join(CANDIDATES)}")
    parser.add_argument("--write", type=Path, help="write the (one) candidate's two CSVs into this folder")
    args = parser.parse_args(argv)
    rows = public_rows()
    names = args.names or list(CANDIDATES)
    unknown = [n for n in names if n not in CANDIDATES]
    if unknown:
        raise SystemExit(f"candidate {unknown[0]!r} is not one of: {', '.join(CANDIDATES)}")
    if args.write:
        if len(names) != 1:
            raise SystemExit("--write: name one candidate")
        fit, held = split(CANDIDATES[names[0]], rows)
        write(args.write / f"{names[0]}_fit.csv", fit)
        write(args.write / f"{names[0]}_held_out.csv", held)
        return
    print("| candidate | calibrated on (runs, GPUs) | held out | fitted | held-out MAPE | bias | in 80% interval |")
    print("|---|---|---|---|---:|---:|---:|")
    for name in names:
        print(evaluate(name, rows), flush=True)


if __name__ == "__main__":
    main()
