"""Print the spreads the uncalibrated intervals rest on (`calibration.spreads`), each measured on
the public runs predicted without their source (`analyses.loso`, `analyses.interval_model`):

- each software stack's (`STACK_LOG_SD`): the random-effects spread of a new source's run, from
  its sources' leave-one-source-out errors (within and between sources, DerSimonian-Laird, the
  stack's mean offset and its error, at Student's t), as a normal-equivalent spread;
- a stack without published runs (`NO_DATA_LOG_SD`): the spread of the stacks' errors when each is
  left out of the fit whole, plus a source's and a run's;
- the GPUs' fitted efficiencies (`GPU_FIT`, `GPU_GROUP_LOG_SD`, `GPU_SOURCE_LOG_SD`,
  `UNFITTED_LOG_SD`);
- each model family's (`FAMILY_LOG_SD`: hybrid Mamba-2 models, mixtures of experts), the rms
  miss over its priced runs at the shipped model (no GPU scale is fitted on MoE runs), pooled over
  their sources.

    python tools/stack_spreads.py        # paste into src/shardwise/calibration/spreads.py
"""

from __future__ import annotations

import math

from shardwise.analyses import family_spreads, loso


def main() -> None:
    fit = loso.shipped_gpu_fit()
    print("GPU_FIT: dict[str, tuple[int, float]] = {  # fitted GPU: (groups, effective sources) of its rows")
    for gpu, (groups, sources) in sorted(fit.support.items()):
        print(f'    "{gpu}": ({groups}, {sources}),')
    print("}")
    print(f"GPU_GROUP_LOG_SD = {math.sqrt(fit.group_var):.4f}")
    print(f"GPU_SOURCE_LOG_SD = {math.sqrt(fit.source_var):.4f}")
    print(f"UNFITTED_LOG_SD = {math.sqrt(fit.unfitted_var):.4f}")
    print("STACK_LOG_SD: dict[str, tuple[float, int, int]] = {")
    for stack, (sd, runs, sources) in loso.shipped_stack_spreads().items():
        print(f'    "{stack}": ({sd:.4f}, {runs}, {sources}),')
    print("}")
    sd, stacks = loso.shipped_no_data_spread()
    print(f"NO_DATA_LOG_SD = {sd:.4f}")
    print(f"NO_DATA_STACKS = {stacks}")
    print("FAMILY_LOG_SD: dict[str, tuple[float, int, int]] = {")
    for family, (sd, runs, sources) in family_spreads.shipped_family_spreads().items():
        print(f'    "{family}": ({sd:.4f}, {runs}, {sources}),')
    print("}")


if __name__ == "__main__":
    main()
