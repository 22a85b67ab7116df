"""Why the leave-one-source-out 80% intervals cover what they cover: each fold's interval taken
apart into the terms `analyses.interval_model` adds (the stack's mean offset mu, the between-source
tau^2, the stack mean's se^2, the within-source variance, the Welch-Satterthwaite degrees of
freedom, the GPU's term), beside the left-out rows' own errors, and the coverage the same folds get
when a stack without published runs takes the random-effects new-stack predictive alone (without
the floor at the widest stack with runs, `interval_model.predictive`).

    python tools/interval_diagnostics.py
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from shardwise.analyses import interval_model as im
from shardwise.analyses import loso


def _new_stack_alone(stack: str, known: list[im.Cell], whole: list[im.Cell]) -> im.Predictive:
    """`interval_model.predictive` without its floor: a stack the fold knows no run of takes the
    new-stack predictive (`interval_model.new_stack`) however narrow it is."""
    by: dict[str, list[im.Cell]] = defaultdict(list)
    for c in known:
        by[c.stack].append(c)
    within = im._within(known)
    tau2 = im.stack_tau2(dict(by), {s: v for s, (v, _) in within.items()})
    if by.get(stack):
        return im.known_stack(by[stack], *within[stack], *tau2[stack])
    whole_by: dict[str, list[im.Cell]] = defaultdict(list)
    for c in whole:
        if c.stack != stack:
            whole_by[c.stack].append(c)
    whole_within = im._within(whole)
    means = [im.stack_mean(cs, whole_within[s][0], tau2.get(s, tau2[""])[0]) for s, cs in sorted(whole_by.items())]
    return im.new_stack(means, *within[""], *tau2[""])


def _row(name: str, stack: str, p: im.Predictive, alone: im.Predictive, preds: list, fit: im.GpuFit) -> tuple:
    e = np.array([x.log_error for x in preds])
    gpu = np.array([fit.var(x.priced.gpu) for x in preds])
    h = im.Z80 * np.sqrt(p.log_sd**2 + gpu)
    h_alone = im.Z80 * np.sqrt(alone.log_sd**2 + gpu)
    return (
        f"{name[:30]:30s} {stack[:18]:18s} {len(e):4d} {'new' if p.runs == 0 else 'known':5s} "
        f"{p.mu:+.3f} {math.sqrt(p.var):.3f} {p.dof:6.1f} {np.median(gpu):.4f} "
        f"±{math.expm1(float(np.median(h))) * 100:4.0f}% {np.mean(np.abs(e) <= h) * 100:5.1f}%  "
        f"{e.mean():+.3f} {e.std():.3f}  ±{math.expm1(float(np.median(h_alone))) * 100:4.0f}% "
        f"{np.mean(np.abs(e) <= h_alone) * 100:5.1f}%",
        int(np.sum(np.abs(e) <= h)),
        int(np.sum(np.abs(e) <= h_alone)),
        len(e),
    )


def main() -> None:
    head = (
        f"{'left out':30s} {'stack':18s} {'runs':>4s} {'kind':5s} {'mu':>6s} {'sd':>5s} {'dof':>6s} {'gpu var':>7s} "
        f"{'h':>6s} {'cover':>6s}  {'mean e':>6s} {'sd e':>5s}  {'h*':>6s} {'cover*':>6s}"
    )
    for key in ("source", "stack"):
        print(f"leave one {key} out (* : a stack the fold knows no run of without the floor)")
        print(head)
        tot = [0, 0, 0]
        for name, (preds, fit) in sorted(loso._folds(key).items()):
            scored = (key, name)
            known = loso.cells(loso._errors_without("source", scored))
            whole = loso.cells(loso._errors_without("stack", scored))
            for stack in sorted({x.priced.stack for x in preds}):
                rows = [x for x in preds if x.priced.stack == stack]
                target = stack if key == "source" else name
                line, cov, cov_alone, n = _row(
                    name,
                    stack,
                    im.predictive(target, known, whole),
                    _new_stack_alone(target, known, whole),
                    rows,
                    fit,
                )
                print(line)
                tot = [tot[0] + cov, tot[1] + cov_alone, tot[2] + n]
        share = (tot[0] / tot[2] * 100, tot[1] / tot[2] * 100)
        print(f"all: covered {share[0]:.1f}% of {tot[2]}; without the floor {share[1]:.1f}%\n")


if __name__ == "__main__":
    main()
