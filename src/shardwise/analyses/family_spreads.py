"""Model families whose runs their stack's spread does not describe (`calibration.spreads.FAMILY_LOG_SD`:
hybrid Mamba-2 models, mixtures of experts): each family's spread over its priced public runs, and
how many of them the shipped interval holds (`shardwise validate public` prints it)."""

from __future__ import annotations

from collections import defaultdict
from functools import cache

import numpy as np

from shardwise.analyses import public_validation as pv


@cache
def family_errors() -> dict[str, list[tuple[str, float]]]:
    """Per model family (`calibration.spreads.model_family`): (source, ln(predicted / measured)) of
    each of its priced public runs at the shipped model, whose GPU scales no MoE run moved
    (`analyses.loso.priced_rows` leaves them out; a hybrid family's few dense dev rows barely move
    them)."""
    from shardwise import presets
    from shardwise.calibration.spreads import model_family

    models = {r["id"]: pv.public_moe.resolved(r)["model"] for r in pv.raw_rows()}
    out: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for r in pv.validate_public():
        if not r.skip and (family := model_family(presets.model(models[r.run_id]))):
            out[family].append((r.source, float(np.log(r.predicted_step_s / r.measured_step_s))))
    return dict(sorted(out.items()))


def shipped_family_spreads() -> dict[str, tuple[float, int, int]]:
    """Per model family: (log spread of its uncalibrated 80% interval, rows, sources), the RMS of
    its runs' log errors (`family_errors`), pooled over their sources."""
    out = {}
    for family, rows in family_errors().items():
        e = np.array([x for _, x in rows])
        out[family] = (float(np.sqrt(np.mean(e**2))), len(rows), len({s for s, _ in rows}))
    return out


def family_coverage() -> dict[str, tuple[int, int, float]]:
    """Per model family of `calibration.spreads.FAMILY_LOG_SD`: (runs its shipped 80% interval
    holds, runs, the interval's upper half-width as a fraction): what `predict` says for such a
    model, checked on the family's published runs."""
    from shardwise.calibration.spreads import FAMILY_LOG_SD, Z80

    out = {}
    for family, rows in family_errors().items():
        sd = FAMILY_LOG_SD[family][0]
        e = np.array([x for _, x in rows])
        out[family] = (int(np.sum(np.abs(e) <= Z80 * sd)), len(rows), float(np.expm1(Z80 * sd)))
    return out
