"""`crossover -o FILE.csv`: the series, one row per grid value, plan and link, with the stack and the
recompute each plan was priced under (`requests.compare.CrossoverResult.csv_text`)."""

from __future__ import annotations

from typing import Any


def crossover_csv(result: Any) -> str:
    """The series as CSV: every grid value, plan and link. `valid` is False where the plan breaks a
    layout rule there, `why` names the rule, and `fits_in_memory` is left empty at such a point (it
    was never priced). `framework`: the stack priced; `recompute`: what a training plan recomputes
    (`analyses.evaluate.recompute_label`: none, selective, full, or the stack's every-second-layer
    default; empty outside training)."""
    import csv
    import io

    import numpy as np

    from shardwise.analyses.evaluate import recompute_label, why_invalid
    from shardwise.analyses.experiment import column_values
    from shardwise.analyses.sweep import COLUMN_NAMES
    from shardwise.tables import cell

    exp = result.experiment
    links = {lk.label: lk.link for lk in exp.links}
    plans = {p.label: p for p in exp.plans}
    framework = str(exp.plan_defaults.get("framework") or "megatron-core")
    buf = io.StringIO()
    w = csv.writer(buf)
    # the variable in SI under sweep's column name (bandwidth_bytes_per_s, ...); every cell as
    # sweep's, plan's and serve's CSVs write it (tables.cell: true/false, floats in full)
    xs = column_values(result.variable, np.asarray(result.values)).tolist()
    variable = COLUMN_NAMES.get(result.variable, result.variable)
    header = [variable, "link", "plan", "time_s", "time_s_low", "time_s_high", "fits_in_memory"]
    w.writerow([*header, "winner", "valid", "why", "framework", "recompute"])
    for link in dict.fromkeys(s.link for s in result.series):
        winners = result.winners(link)
        for s in result.series_for(link):
            low, high = result.band(s)  # the 80% band, as --json and sweep's CSV carry it
            recompute = recompute_label(exp, plans[s.plan])
            for j, x in enumerate(xs):
                t = s.time_s[j]
                valid = bool(t == t)
                why = ""
                if not valid:
                    grid = {result.variable: np.array([float(result.values[j])])}
                    why = why_invalid(exp, plans[s.plan], links[link], grid) or "invalid"
                fits = bool(s.fits[j]) if valid else None
                row = [x, link, s.plan, *(None if not valid else v for v in (t, low[j], high[j]))]
                w.writerow(map(cell, [*row, fits, bool(winners[j] == s.plan), valid, why, framework, recompute]))
    return buf.getvalue()
