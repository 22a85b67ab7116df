"""The calibration file: the fitted parameters, their uncertainty, and where they came from.

A YAML mapping (format 2):

    shardwise_calibration: 2          # the file format; another number is refused
    shardwise_version: 0.1.0          # the version that wrote it
    cost_model: '2026.12b'            # the cost model fitted to; another is refused
    created_utc: '2026-12-01T04:40:00Z'
    runs: {files: {runs.csv: SHA-256}, count: 12, ids: [...]}
                                      # + frameworks: {mine.yaml: SHA-256} where runs name a framework file
    hardware: [h100-sxm5-80gb]        # the GPUs of the runs
    stacks: [megatron-core]           # the training runs' framework presets (absent: not recorded)
    noise_log_sd: 0.035               # the spread of ln(predicted / measured) once fitted
    fitted: [matmul_efficiency_scale, step_overhead_s]
    u_covariance: [[...], [...]]      # posterior covariance of the fitted parameters (u space)
    u_covariance_all: [[...], ...]    # optional: every parameter's, at the fitted values (`Fit.full_covariance`)
    parameters:
      matmul_efficiency_scale: {value: 0.85, low80: 0.83, high80: 0.88, fitted: true}
      inter_node_bandwidth_scale: {value: 1.0, fitted: false, why: no run crosses servers}
      memory_bandwidth_scale: {value: 0.3, ..., physical: HBM 1.0 TB/s (presets 3.35), limit: lower}
    checks: [...]                     # optional: what to check before using it (a value at a limit, mixed GPUs)
    residuals: [{id: r1, metric: step_time_s, measured: 1.9, before: 2.1, after: 1.92}, ...]
    checksum: sha256:...              # of the fitted content (below): an edited file is refused

The checksum covers what a prediction uses (format, cost model, fitted parameters and their values,
covariance, noise, run counts, hardware, stacks where recorded): a hand-edited value would otherwise be applied as if it
had been fitted. Format 1 (no checksum) is refused with the command that rewrites it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from shardwise.calibration.fit import Fit
from shardwise.calibration.parameters import BY_NAME, NEUTRAL, PARAMETERS
from shardwise.calibration.spreads import NOISE_PRIOR_RUNS
from shardwise.errors import SpecError

FORMAT = 2  # 2: a checksum of the fitted content
# The cost model the parameters were fitted to: bump it whenever a change to the model moves what a
# fitted value means (then older calibrations are refused, not silently misapplied).
COST_MODEL = "2026.12b"  # 2026.12b: MXFP8, refitted GPU efficiencies, the link latency parameter
MAX_FILE_BYTES = 4 << 20


@dataclass(frozen=True)
class Calibration:
    """A fit with its provenance (what `--calibration FILE` loads)."""

    fit: Fit
    path: str
    gpus: tuple[str, ...]
    runs: int
    version: str
    serving_runs: int = 0
    # the training runs' stacks (framework presets); None: a file written before they were recorded
    stacks: tuple[str, ...] | None = None


def document(
    fitted: Fit,
    runs_file: str | Path | list[str],
    run_ids: list[str],
    gpus: list[str],
    measured_step_s: np.ndarray,
    metrics: list[str] | None = None,
    left_out: str = "not asked for",
    framework_files: list[str] | None = None,
    physical: dict[str, str] | None = None,
    checks: list[str] | None = None,
    stacks: list[str] | None = None,
) -> dict[str, Any]:
    """The calibration file's content (see the module docstring); `left_out`: why a parameter the
    fit names no reason for stayed at its prior (`--params` did not ask for it, or the need-driven
    choice of `calibration.explain` did without it); `framework_files`: the framework YAML files the
    runs named, recorded as the runs files are (path and SHA-256 of its text: the fit holds for
    that text), left out where the runs name presets only; `physical`: a fitted scale's absolute
    value on the runs' GPUs (`checks.physical`), written beside it; `checks`: what to check before
    using the file (`checks.limit_notes`, `checks.mixture_notes`), written as `checks:`; `stacks`: the
    training runs' framework presets (None: not recorded). A fitted value at a limit of its range gets
    `limit: lower` or `upper`."""
    from shardwise import __version__
    from shardwise.calibration.checks import at_limit, interval_at_limit

    sources = [Path(f) for f in (runs_file if isinstance(runs_file, list) else [runs_file])]
    digests = {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sources if p.is_file()}
    stack_files = [Path(f) for f in dict.fromkeys(framework_files or [])]
    stack_digests = {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in stack_files if p.is_file()}
    params: dict[str, Any] = {}
    limits, reaches = at_limit(fitted), interval_at_limit(fitted)
    for par in PARAMETERS:
        entry: dict[str, Any] = {"value": _round(fitted.values[par.name]), "fitted": par.name in fitted.fitted}
        if par.name in fitted.fitted:
            lo, hi = fitted.interval80(par.name)
            entry.update(low80=_round(lo), high80=_round(hi))
            if (physical or {}).get(par.name):
                entry["physical"] = physical[par.name]  # type: ignore[index]
            if par.name in limits:
                entry["limit"] = limits[par.name]
            elif par.name in reaches:
                entry["interval_limit"] = reaches[par.name]  # its 80% interval reaches that limit
        else:
            entry["why"] = fitted.not_fitted.get(par.name, left_out)
        params[par.name] = entry
    measured = np.asarray(measured_step_s, dtype=float)
    return with_checksum(
        {
            "shardwise_calibration": FORMAT,
            "shardwise_version": __version__,
            "cost_model": COST_MODEL,
            "created_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "runs": {
                "files": digests,
                **({"frameworks": stack_digests} if stack_digests else {}),
                "count": len(run_ids),
                "serving": sum(1 for m in (metrics or []) if m != "step_time_s"),
                "ids": list(run_ids),
            },
            "hardware": sorted(set(gpus)),
            **({"stacks": sorted(set(stacks))} if stacks is not None else {}),
            "noise_log_sd": _round(fitted.noise_log_sd),
            "fitted": list(fitted.fitted),
            "u_covariance": [[float(x) for x in row] for row in np.asarray(fitted.u_covariance)],
            **(
                {"u_covariance_all": [[float(x) for x in row] for row in np.asarray(fitted.full_covariance)]}
                if fitted.full_covariance is not None
                else {}
            ),
            "parameters": params,
            **({"checks": list(checks)} if checks else {}),
            "residuals": [
                {
                    "id": rid,
                    "metric": metric,
                    "measured": _round(m),
                    "before": _round(m * math.exp(b)),
                    "after": _round(m * math.exp(a)),
                }
                for rid, metric, m, b, a in zip(
                    run_ids,
                    metrics or ["step_time_s"] * len(run_ids),
                    measured,
                    fitted.before_log_error,
                    fitted.after_log_error,
                    strict=True,
                )
            ],
        }
    )


CHECKSUMMED = ("shardwise_calibration", "cost_model", "fitted", "parameters", "u_covariance", "noise_log_sd")


def checksum(doc: dict[str, Any]) -> str:
    """sha256 of the content a prediction uses, as canonical JSON (see the module docstring)."""
    import json

    runs = doc.get("runs") if isinstance(doc.get("runs"), dict) else {}
    content = {k: doc.get(k) for k in CHECKSUMMED}
    content["runs"] = {"count": runs.get("count"), "serving": runs.get("serving")}
    content["hardware"] = doc.get("hardware")
    if "u_covariance_all" in doc:  # optional (files before it keep their checksum)
        content["u_covariance_all"] = doc["u_covariance_all"]
    if "stacks" in doc:  # optional, as above
        content["stacks"] = doc["stacks"]
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), allow_nan=False, default=str)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def with_checksum(doc: dict[str, Any]) -> dict[str, Any]:
    return {**doc, "checksum": checksum(doc)}


def _round(x: float) -> float:
    return float(f"{float(x):.6g}")


def save(doc: dict[str, Any], path: str | Path) -> None:
    """Write a calibration file's content (`document`, or `CalibrateResult.document()`) to `path`;
    from a `fit.fit` result and its runs, `save_fit` builds the content and writes it."""
    import yaml

    from shardwise.atomic import atomic_path

    if isinstance(doc, Fit):
        raise SpecError(
            "store.save: takes a calibration's content (store.document); to write a fit, call "
            "store.save_fit(fit, runs, measured_step_s, path)"
        )

    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        fh.write("# shardwise calibration: `shardwise predict --calibration FILE` (and plan, timeline, ...)\n")
        yaml.safe_dump(doc, fh, sort_keys=False, default_flow_style=None, width=100)


def save_fit(
    fitted: Fit, runs: list[Any], measured_step_s: Any, path: str | Path, run_ids: list[str] | None = None
) -> dict[str, Any]:
    """Write the file `--calibration` reads from a `fit.fit` result and the runs it was fitted on
    (Scenarios or `calibration.cases` cases, in the order given to `fit`; `measured_step_s` the same
    measurements): the content `shardwise calibrate -o FILE` writes, its checks and each fitted
    scale's physical value included; no runs file is recorded (`runs.files` is empty). Returns the
    content written."""
    from shardwise.calibration.checks import limit_notes, misfit_notes, mixture_notes, physical

    if not isinstance(fitted, Fit):
        raise SpecError(
            f"store.save_fit: fitted is a {type(fitted).__name__}, not the Fit that calibration.fit.fit returns"
        )
    scenarios = [getattr(r, "scenario", r) for r in runs]
    measured = np.asarray(measured_step_s, dtype=float).reshape(-1)
    if not (len(scenarios) == len(measured) == len(fitted.before_log_error)):
        raise SpecError(
            f"store.save_fit: {len(scenarios)} run(s) and {len(measured)} measurement(s) for a fit of "
            f"{len(fitted.before_log_error)} run(s); give the runs and measurements the fit was given"
        )
    ids = list(run_ids) if run_ids is not None else [f"run{i + 1}" for i in range(len(scenarios))]
    doc = document(
        fitted,
        [],
        ids,
        [str(s.cluster.gpu.name) for s in scenarios],
        measured,
        [getattr(r, "metric", "step_time_s") for r in runs],
        physical={n: physical(scenarios, n, fitted.values[n]) for n in fitted.fitted},
        checks=limit_notes(fitted) + misfit_notes(fitted, ids) + mixture_notes(scenarios, fitted),
        stacks=training_stacks(runs),
    )
    from_document(doc, str(path))  # never write a file that --calibration would refuse
    save(doc, path)
    return doc


def load(path: str | Path) -> Calibration:
    """Read and check a calibration file; every problem is one SpecError line naming the file."""
    from shardwise import files, loaders

    # the runs, not their fit ("line 2 is not valid YAML" said too little); a missing file or a
    # directory is answered as any other calibration path is ("cannot read", "not a regular file")
    if str(path).lower().endswith(".csv") and files.is_file(path):
        raise SpecError(
            f"{path}: a CSV of runs, not a calibration; fit one first: shardwise calibrate {path} -o FILE.yaml, "
            "then --calibration FILE.yaml"
        )
    return from_document(loaders.load_yaml(path), str(path))


def from_document(doc: Any, p: str) -> Calibration:
    """Check a calibration's content (what `load` reads, and what `calibrate` checks before it
    writes a file): every field's type and range, the format and the cost model it was fitted to."""
    if not isinstance(doc, dict) or "shardwise_calibration" not in doc:
        raise SpecError(f"{p}: not a shardwise calibration file (write one with `shardwise calibrate RUNS.csv`)")
    fmt = doc["shardwise_calibration"]
    version = str(doc.get("shardwise_version", "unknown"))
    if isinstance(fmt, bool) or fmt != FORMAT:
        raise SpecError(
            f"{p}: calibration format {fmt!r} (written by shardwise {version}); this shardwise reads format "
            f"{FORMAT}: run `shardwise calibrate` on the runs again"
        )
    model = doc.get("cost_model")
    if model != COST_MODEL:
        raise SpecError(
            f"{p}: fitted to cost model {model!r} (shardwise {version}); this shardwise's cost model is "
            f"{COST_MODEL!r}, whose parameters mean something else: run `shardwise calibrate` on the runs again"
        )
    params = doc.get("parameters")
    if not isinstance(params, dict):
        raise SpecError(f"{p}: parameters: missing or not a mapping")
    unknown = [k for k in params if k not in BY_NAME]
    if unknown:
        raise SpecError(f"{p}: parameters: unknown parameter {unknown[0]!r}; known: {', '.join(BY_NAME)}")
    values = dict(NEUTRAL)
    for name, entry in params.items():
        value = entry.get("value") if isinstance(entry, dict) else None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise SpecError(f"{p}: parameters: {name}: value {value!r} is not a number")
        par = BY_NAME[name]
        if par.log_scale and value <= 0:
            raise SpecError(f"{p}: parameters: {name}: {value} is not allowed; a scale must be > 0")
        u = par.u(value)
        if not par.low - 1e-9 <= u <= par.high + 1e-9:
            lo, hi = par.value(par.low), par.value(par.high)
            raise SpecError(f"{p}: parameters: {name}: {value} is outside {lo:.3g}..{hi:.3g}")
        values[name] = float(value)
    fitted = doc.get("fitted") or []
    if not isinstance(fitted, list) or any(not isinstance(f, str) or f not in BY_NAME for f in fitted):
        raise SpecError(f"{p}: fitted: must be a list of parameter names ({', '.join(BY_NAME)})")
    fitted = [f.name for f in PARAMETERS if f.name in fitted]
    k = len(fitted)
    rows = doc.get("u_covariance") or []
    shape_ok = isinstance(rows, list) and len(rows) == k and all(isinstance(r, list) and len(r) == k for r in rows)
    # a covariance entry no larger than 100 x the product of the two parameters' ranges (u space)
    span = [max(1.0, BY_NAME[f].high - BY_NAME[f].low) for f in fitted]
    numbers = shape_ok and all(
        isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and abs(x) <= 100 * a * b
        for r, a in zip(rows, span, strict=False)
        for x, b in zip(r, span, strict=False)
    )
    cov = np.array(rows, dtype=float).reshape(k, k) if numbers else None
    if (
        cov is None
        or not np.allclose(cov, cov.T, rtol=1e-6, atol=1e-12)
        or (k and np.any(np.linalg.eigvalsh(cov) < -1e-12))
    ):
        raise SpecError(
            f"{p}: u_covariance: must be a symmetric {k} x {k} covariance matrix of numbers (one row per fitted "
            "parameter)"
        )
    sd = doc.get("noise_log_sd")
    if isinstance(sd, bool) or not isinstance(sd, (int, float)) or not 0 < sd < 5:
        raise SpecError(f"{p}: noise_log_sd: {sd!r} is not allowed; it must be a number in (0, 5)")
    runs = doc.get("runs")
    runs = runs if isinstance(runs, dict) else {}
    count, serving = runs.get("count", 0), runs.get("serving", 0)
    if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in (count, serving)):
        raise SpecError(f"{p}: runs: count and serving must be whole numbers >= 0")
    hardware = doc.get("hardware") or []
    if not isinstance(hardware, list) or not all(isinstance(g, str) for g in hardware):
        raise SpecError(f"{p}: hardware: must be a list of GPU names")
    stacks = doc.get("stacks")
    if stacks is not None and (not isinstance(stacks, list) or not all(isinstance(g, str) for g in stacks)):
        raise SpecError(f"{p}: stacks: must be a list of framework names (e.g. [megatron-core])")
    for name, entry in params.items():
        flag = entry.get("fitted", name in fitted) if isinstance(entry, dict) else None
        if flag is not (name in fitted):
            raise SpecError(f"{p}: parameters: {name}: fitted is {flag!r} but the fitted list says {name in fitted}")
        lo, hi = entry.get("low80", values[name]), entry.get("high80", values[name])
        if name in fitted and not (
            all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (lo, hi)) and lo <= values[name] <= hi
        ):
            raise SpecError(f"{p}: parameters: {name}: the 80% interval {lo!r}..{hi!r} does not hold its value")
    if doc.get("checksum") != checksum(doc):
        raise SpecError(
            f"{p}: the checksum does not match the fitted values: the file was edited or damaged after "
            "`shardwise calibrate` wrote it (an edited value would be used as if fitted); calibrate again"
        )
    fit = Fit(
        tuple(fitted),
        values,
        cov,
        float(sd),
        after_log_error=_after_log_errors(doc),
        dof=max(count - k, 0) + NOISE_PRIOR_RUNS,
        full_covariance=_all(doc, p),
    )
    return Calibration(fit, p, tuple(hardware), count, version, serving, None if stacks is None else tuple(stacks))


def training_stacks(runs: list[Any]) -> list[str]:
    """The framework presets of the training runs (a serving run's engine is not a training stack)."""
    from shardwise.calibration.cases import ServingCase

    return sorted({str(getattr(r, "scenario", r).plan.framework) for r in runs if not isinstance(r, ServingCase)})


def _after_log_errors(doc: dict[str, Any]) -> np.ndarray:
    """ln(calibrated / measured) of each run from the file's residuals (empty where not readable:
    they are a record, not part of the checksum)."""
    out = []
    for r in doc.get("residuals") or []:
        m, a = (r.get(x) if isinstance(r, dict) else None for x in ("measured", "after"))
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0 for x in (m, a)):
            return np.zeros(0)
        out.append(math.log(a / m))
    return np.array(out, dtype=float)


def _all(doc: dict[str, Any], p: str) -> np.ndarray | None:
    """The optional covariance of every parameter (checked like u_covariance)."""
    rows = doc.get("u_covariance_all")
    if rows is None:
        return None
    k = len(PARAMETERS)
    params = doc.get("parameters")
    older = isinstance(params, dict) and len(params) < k  # written before a parameter was added
    if older and isinstance(rows, list) and len(rows) == len(params):
        return None  # as a file without it: the fitted ones' posterior, the others' prior
    ok = isinstance(rows, list) and len(rows) == k and all(isinstance(r, list) and len(r) == k for r in rows)
    ok = ok and all(
        isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for r in rows for x in r
    )
    cov = np.array(rows, dtype=float) if ok else None
    if cov is None or not np.allclose(cov, cov.T, rtol=1e-6, atol=1e-12) or np.any(np.linalg.eigvalsh(cov) < -1e-12):
        raise SpecError(f"{p}: u_covariance_all: must be a symmetric {k} x {k} covariance matrix of numbers")
    return cov
