"""Fit each GPU's sustained matmul efficiency on the DEV split of the public training runs.

The GEMM tile model needs the fraction of peak a tile's main loop reaches while a real training
job runs (clocks under the power limit included). Bekman's MAMF microbenchmark gives it for one
GEMM at its best shape (x 0.978, see presets/gpus.yaml; GPUs without a MAMF row take a sibling's,
carried to their own power limit and SM count by `physics.power`); training jobs run below that.
So for each GPU with public runs in at least `MIN_GROUPS` dev groups, one scale multiplies
both its 16-bit and FP8 efficiencies, chosen so that the median signed step-time error of its dev
rows is zero (robust to a few odd rows), over the fused-kernel stacks (`analyses.loso.FIT_STACKS`:
XLA and eager PyTorch stacks are predicted, never fitted, so that their kernels' costs do not
leak into the GPU's clock). Only rows where
compute is at least `COMPUTE_SHARE` of the predicted step take part (where the step is mostly
communication or bubble, the rest of the model would be fitted instead); a GPU with fewer than
`MIN_GROUPS` such groups uses all its dev rows. Siblings on the same silicon take the scale. The
holdout rows are never read here. The procedure is `analyses.loso.fit_scales`, which
`shardwise validate public` also runs with one source (or stack) left out.

    python tools/fit_efficiency.py            # print the fitted values (paste into presets/gpus.yaml)
"""

from __future__ import annotations

from collections import defaultdict

from shardwise import presets
from shardwise.analyses import loso


def main() -> None:
    rows = list(loso.priced_rows())
    scales = loso.fit_scales(rows)
    groups: dict[str, set[str]] = defaultdict(set)
    counts: dict[str, int] = defaultdict(int)
    for p in rows:
        if p.sets_scale:
            groups[p.gpu].add(p.row.group)
            counts[p.gpu] += 1
    for name, s in sorted(scales.items()):
        gpu = presets.gpu(name)
        base = 1.0 / loso.SHIPPED_SCALES.get(name, 1.0)  # the preset holds base x shipped scale
        stacks = sorted({p.stack for p in rows if p.sets_scale and p.gpu == name})
        print(
            f"{name}: {counts[name]} dev rows, {len(groups[name])} groups ({', '.join(stacks)}): scale {s:.3f} -> "
            f"matmul_efficiency {gpu.matmul_efficiency * base * s:.3f}"
            + (
                f", matmul_efficiency_fp8 {gpu.matmul_efficiency_fp8 * base * s:.3f}"
                if gpu.matmul_efficiency_fp8
                else ""
            )
        )


if __name__ == "__main__":
    main()
