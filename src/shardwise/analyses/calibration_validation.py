"""How much calibrating on a few of a stack's runs helps predict its other runs, and whether the
80% intervals hold 80% of the measurements (`shardwise validate --calibrated`).

A stack is one public source on one system (e.g. NVIDIA dgxc-benchmarking on DGX H100): one
software stack on one kind of machine, what a user's own runs would be. Within a stack and one
split (dev or holdout, made before anything was fitted; see `public_validation`):

- learning curve: for k = 1, 2, 4, 8, draw k runs at random (`DRAWS` times, fixed seed),
  calibrate on them, predict the stack's other runs: mean absolute percentage error and interval
  coverage (the share of measured values inside the predicted 80% interval), against k = 0 (the
  uncalibrated model with its default interval);
- leave one out: calibrate on all of a stack's runs but one and predict that one, for each run
  (`calibration.intervals.leave_one_out`: the full fit linearised, no refit per run; a test checks it
  against refitting);
- other layouts: within each group (one model, system, GPU count and sequence length) with two
  or more distinct layouts, calibrate on one layout and predict the others, for each choice of
  that layout: the error before and after.

Duplicate rows (the same layout and measurement published twice) count once.
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from shardwise.analyses import public_validation as pv
from shardwise.errors import SpecError
from shardwise.specs.memo import Memo

KS = (1, 2, 4, 8)
DRAWS = 4
SEED = 12
MIN_STACK_RUNS = 6  # a stack needs k + at least this many - k runs left to predict (k <= runs - 2)


@dataclass(frozen=True)
class PublicRun:
    run_id: str
    stack: str
    group: str
    split: str
    scenario: object
    measured_step_s: float


@dataclass(frozen=True)
class CurvePoint:
    stack: str
    split: str
    k: int
    runs: int  # runs in the stack (this split)
    predicted: int  # predictions scored (over all draws)
    mape: float
    coverage80: float


@dataclass(frozen=True)
class LayoutTransfer:
    stack: str
    split: str
    pairs: int  # (calibration layout, predicted layout) pairs
    mape_before: float
    mape_after: float
    coverage80: float


def public_runs() -> list[PublicRun]:
    from shardwise.engines.training_flops import flops_per_step

    out, seen = [], set()
    for row in pv.raw_rows():
        if pv.skip_reason(row) or row["workload"] == "lora":  # a stack's runs train every weight
            continue
        try:
            scn = pv.scenario_for(row)
        except SpecError:
            continue
        measured = pv.measured_step_s(row, pv.source_flops_per_step(row, scn, float(flops_per_step(scn)[0])))
        key = (scn, round(measured, 9))
        if key in seen:
            continue
        seen.add(key)
        source = pv.source_of(row).replace("NVIDIA-NeMo ", "").replace("NVIDIA ", "")
        stack = f"{source} / {row['system']}"
        out.append(PublicRun(row["id"], stack, row["group"], row["split"], scn, measured))
    return out


def serving_runs() -> list[PublicRun]:
    """The published serving measurements of `validate inference` as calibration cases (split
    "serving": they set no constant of the serving model, which comes from datasheets and
    microbenchmarks). A stack is one runtime on one GPU; TensorRT-LLM's max-throughput rows keep
    the batch the uncalibrated model picks (the largest that fits: memory, not speed)."""
    from shardwise.analyses import serving_validation as sv
    from shardwise.analyses.serving import at_max_batch
    from shardwise.calibration.cases import ServingCase
    from shardwise.specs.serving import ServingWorkload

    out = []
    for row in sv.inference_rows():
        if row["model"] not in sv.MODELS or row["gpu"] not in sv.SYSTEMS:
            continue
        scn = sv._scenario(row)
        isl, osl = int(row["isl"]), int(row["osl"])
        gpu = row["gpu"].split()[0]
        if row["framework"].startswith("FasterTransformer"):
            metric = next(
                m
                for k, m in (("prefill", "ttft_s"), ("decode", "tpot_s"), ("total", "e2e_s"))
                if row["metric"].startswith(k)
            )
            wl = ServingWorkload(isl, osl, 1, "fp16", "fp16", "cpp-eager", engine="fastertransformer")
            case, measured, stack = (
                ServingCase(scn, wl, metric),
                float(row["value"]) / 1e3,
                f"FasterTransformer / {gpu}",
            )
        else:
            wl = at_max_batch(scn, ServingWorkload(isl, osl, 1, "fp8", "fp8", custom_all_reduce="none")).workload
            case, measured = ServingCase(scn, wl, "throughput_tokens_per_s"), float(row["value"])
            stack = f"TensorRT-LLM / {gpu}"
        group = f"{row['model']} tp{row['tp']}"
        out.append(PublicRun(row["id"], stack, group, "serving", case, measured))
    return out


def _by_stack(runs: list[PublicRun], split: str) -> dict[str, list[PublicRun]]:
    stacks: dict[str, list[PublicRun]] = defaultdict(list)
    for r in runs:
        if r.split == split:
            stacks[r.stack].append(r)
    return {k: v for k, v in sorted(stacks.items()) if len(v) >= MIN_STACK_RUNS}


def _scores(members: list[PublicRun], jobs: list[tuple[object, list[int]]]) -> list[tuple[np.ndarray, np.ndarray]]:
    """For each (fit or None, indices into `members` to predict): (absolute relative errors,
    inside-the-80%-interval flags) of those runs under the fit, as `intervals.predict_interval`
    gives them, every fit priced in one call of one evaluator of the stack's runs: each fit's
    prediction and its gradient sets (`intervals.spread`) on the runs calibrated by its values
    (`Evaluator.step_s(at=...)`, as `cases.with_values` calibrates them), the uncalibrated
    predictions once for every job that has none."""
    from shardwise.calibration.cases import Evaluator, parameter_sets
    from shardwise.calibration.intervals import Spread, spread, t_factor
    from shardwise.calibration.parameters import NEUTRAL
    from shardwise.calibration.unmeasured import ALL, parameter_var

    if not jobs:
        return []
    ev = Evaluator([r.scenario for r in members])
    calibrated = [j for j, (f, _) in enumerate(jobs) if f is not None and f.fitted]  # type: ignore[attr-defined]
    at: dict[str, list] = {n: [] for n in NEUTRAL}
    sets: dict[str, list] = {n: [] for n in NEUTRAL}
    rows, steps = {}, {}
    for j in calibrated:
        f = jobs[j][0]
        # every parameter's gradient, the unfitted ones too (`calibration.unmeasured`, as `spread`)
        s, steps[j] = parameter_sets(ALL, np.zeros(len(ALL)), {})
        rows[j] = len(at["step_overhead_s"])
        for n in NEUTRAL:
            at[n] += [f.values[n]] * (len(ALL) + 1)  # type: ignore[attr-defined]
            sets[n] += list(np.broadcast_to(s.get(n, NEUTRAL[n]), len(ALL) + 1))
    priced = (
        ev.step_s({n: np.array(v) for n, v in sets.items()}, at={n: np.array(v) for n, v in at.items()})
        if calibrated
        else None
    )
    plain = ev.step_s({})[0] if len(calibrated) < len(jobs) else None
    out = []
    for j, (fitted, test) in enumerate(jobs):
        m = np.array([members[i].measured_step_s for i in test])
        if j in rows:
            k = len(ALL)
            logt = np.log(priced[rows[j] : rows[j] + k + 1][:, test])  # type: ignore[index]
            t = priced[rows[j], test]  # type: ignore[index]
            g = ((logt[1:] - logt[0]) / steps[j][:, None]).T
            var, _ = parameter_var(g, fitted)
            sd = np.sqrt(fitted.noise_log_sd**2 + var) * t_factor(fitted.dof)  # type: ignore[attr-defined]
            lo, hi = Spread(sd, "").bounds(t)
        else:  # no calibration, or one that fitted nothing: the uncalibrated spread
            t = plain[test]  # type: ignore[index]
            lo, hi = spread([members[i].scenario for i in test], fitted).bounds(t)  # type: ignore[arg-type]
        out.append((np.abs(t / m - 1.0), (m >= lo) & (m <= hi)))
    return out


def learning_curves(
    runs: list[PublicRun], split: str, ks: tuple[int, ...] = KS, draws: int = DRAWS, progress=None
) -> list[CurvePoint]:
    points = []
    for stack, members in _by_stack(runs, split).items():
        # each stack its own generator: a stack's draws do not change when another stack is added
        rng = np.random.default_rng([SEED, zlib.crc32(stack.encode())])
        # every draw of every k first (the generator's sequence as one draw after another), then
        # their fits side by side (`calibration.together`: the same fits, priced in fewer calls)
        picks = {
            k: [sorted(set(rng.choice(len(members), size=k, replace=False).tolist())) for _ in range(draws)]
            for k in ks
            if k <= len(members) - 2
        }
        fits = _fits_side_by_side(members, [pick for k in picks for pick in picks[k]])
        tests = [[i for i in range(len(members)) if i not in pick] for k in picks for pick in picks[k]]
        scores = iter(_scores(members, [(None, list(range(len(members)))), *zip(fits, tests, strict=True)]))
        errs, inside = next(scores)
        points.append(CurvePoint(stack, split, 0, len(members), len(members), float(errs.mean()), float(inside.mean())))
        for k in picks:
            all_err, all_in = [], []
            for _ in picks[k]:
                e, inn = next(scores)
                all_err.append(e)
                all_in.append(inn)
                if progress:
                    progress()
            e, inn = np.concatenate(all_err), np.concatenate(all_in)
            points.append(CurvePoint(stack, split, k, len(members), len(e), float(e.mean()), float(inn.mean())))
    return points


class _Columns:
    """The evaluator of a subset of runs: the columns `idx` of an evaluator of them all."""

    def __init__(self, ev, idx: list[int]) -> None:
        self.ev, self.idx = ev, np.array(idx)

    def step_s(self, sets: dict[str, np.ndarray]) -> np.ndarray:
        return self.ev.step_s(sets)[:, self.idx]


def _fits_side_by_side(members: list[PublicRun], picks: list[list[int]]) -> list:
    """The fit of each pick (indices into `members`), as `calibration.fit.fit` of those runs alone
    returns it, the fits priced together (`calibration.together.side_by_side`)."""
    from shardwise.calibration.cases import Evaluator
    from shardwise.calibration.fit import fit
    from shardwise.calibration.together import side_by_side

    used = sorted({i for pick in picks for i in pick})  # the runs some fit prices (not a large stack's all)
    column = {i: j for j, i in enumerate(used)}

    def job(pick: list[int]):
        scns, y = [members[i].scenario for i in pick], np.array([members[i].measured_step_s for i in pick])
        return lambda ev: fit(scns, y, ev=_Columns(ev, [column[i] for i in pick]), check=False)

    return side_by_side(Evaluator([members[i].scenario for i in used]), [job(pick) for pick in picks])


LOO = -1  # the `k` of a leave-one-out point (calibrated on all of the stack's runs but one)
FULL_FITS_KEPT = 64  # more than the stacks of one `validate --calibrated`
_FULL_FITS = Memo("calibration_validation._full_fit", FULL_FITS_KEPT)  # by the stack's runs


def _full_fit(members: list[PublicRun]):
    """`calibration.fit.fit` of all the runs of a stack: `leave_one_out` and `dev_spreads` both
    need the dev stacks' (computed once, a pure function of the runs; the oldest goes, so a
    long-lived process stays bounded; a key that cannot be hashed is not kept)."""
    from shardwise.calibration.fit import fit

    key = tuple((r.run_id, r.measured_step_s, r.scenario) for r in members)
    return _FULL_FITS.get_or_compute(
        key, lambda: fit([r.scenario for r in members], np.array([r.measured_step_s for r in members]), check=False)
    )


def leave_one_out(runs: list[PublicRun], split: str, progress=None) -> list[CurvePoint]:
    """Each stack's runs, each predicted by a calibration on all the stack's other runs."""
    from shardwise.calibration.intervals import leave_one_out as loo
    from shardwise.calibration.spreads import Z80

    points = []
    for stack, members in _by_stack(runs, split).items():
        scns, measured = [r.scenario for r in members], np.array([r.measured_step_s for r in members])
        err, sd = loo(scns, measured, _full_fit(members))
        mape, inside = float(np.mean(np.abs(np.expm1(err)))), float(np.mean(np.abs(err) <= Z80 * sd))
        points.append(CurvePoint(stack, split, LOO, len(members), len(members), mape, inside))
        if progress:
            progress()
    return points


def layout_transfer(runs: list[PublicRun], split: str, progress=None) -> list[LayoutTransfer]:
    """Calibrate on one layout of a group, predict the group's other layouts."""
    out = []
    for stack, members in _by_stack(runs, split).items():
        groups: dict[str, list[int]] = defaultdict(list)  # indices into members
        for i, r in enumerate(members):
            groups[r.group].append(i)
        ones = [i for group in groups.values() if len(group) >= 2 for i in group]
        fits = dict(zip(ones, _fits_side_by_side(members, [[i] for i in ones]), strict=True))
        pairs = [(i, [j for j in group if j != i]) for group in groups.values() if len(group) >= 2 for i in group]
        # each pair's runs uncalibrated, then calibrated on the one layout (every score in one pricing)
        jobs = [(None, others) for _, others in pairs] + [(fits[i], others) for i, others in pairs]
        scores = _scores(members, jobs)
        before, after, inside = [], [], []
        for p in range(len(pairs)):
            (e0, _), (e1, inn) = scores[p], scores[len(pairs) + p]
            before.append(e0)
            after.append(e1)
            inside.append(inn)
            if progress:
                progress()
        if before:
            b, a, inn = np.concatenate(before), np.concatenate(after), np.concatenate(inside)
            out.append(LayoutTransfer(stack, split, len(b), float(b.mean()), float(a.mean()), float(inn.mean())))
    return out


@dataclass(frozen=True)
class Spreads:
    """The spreads the error bars rest on, measured on the dev split (see calibration.spreads)."""

    runs: int
    uncalibrated_rms: float  # RMS of ln(predicted / measured), bias included
    groups: int
    within_group: float  # scatter of the runs inside a group (one model, system, GPU count)
    between_groups: float  # spread of the groups' mean error beyond the scatter inside them
    calibrated_residual: float  # dev stacks calibrated on all their runs, pooled, dof-corrected
    groups_per_gpu: dict[str, int]  # dev groups on each GPU


def dev_spreads(runs: list[PublicRun]) -> Spreads:
    """`calibration.spreads.UNCALIBRATED_LOG_SD` and `NOISE_LOG_SD` and the GEMM prior's width
    (`calibration.parameters.MATMUL_PRIOR_SD`), from the dev split only."""
    from shardwise.calibration.cases import Evaluator

    dev = [r for r in runs if r.split == "dev"]
    t = Evaluator([r.scenario for r in dev]).step_s({})[0]
    e = np.log(t / np.array([r.measured_step_s for r in dev]))
    groups: dict[str, list[float]] = defaultdict(list)
    for r, x in zip(dev, e, strict=True):
        groups[r.group].append(float(x))
    means = np.array([np.mean(v) for v in groups.values()])
    sizes = np.array([len(v) for v in groups.values()])
    within = sum(float(np.sum((np.array(v) - np.mean(v)) ** 2)) for v in groups.values())
    within_var = within / max(1, int(np.sum(sizes - 1)))
    between = float(np.sqrt(max(0.0, float(np.var(means) - np.mean(within_var / sizes)))))
    sq, dof = 0.0, 0.0
    for members in _by_stack(dev, "dev").values():
        f = _full_fit(members)
        sq += float(np.sum(f.after_log_error**2))
        dof += len(members) - len(f.fitted)
    rms = float(np.sqrt(np.mean(e**2)))
    per_gpu: dict[str, set[str]] = defaultdict(set)
    for r in dev:
        per_gpu[r.scenario.cluster.gpu.name].add(r.group)
    counts = {gpu: len(g) for gpu, g in sorted(per_gpu.items())}
    within = float(np.sqrt(within_var))
    return Spreads(len(dev), rms, len(groups), within, between, float(np.sqrt(sq / dof)), counts)
