"""Print each software stack's uncalibrated interval spread (`calibration.spreads.STACK_LOG_SD`):
the root mean square of ln(predicted / measured) over its published runs, each source weighing
the same (the mean over sources of their mean squared log error), each run predicted by the
model fitted without that run's source (`analyses.loso`, leave one source out).

    python tools/stack_spreads.py        # paste the dicts into src/shardwise/calibration/spreads.py

and each model family's (`calibration.spreads.FAMILY_LOG_SD`: hybrid Mamba-2 models), over its
priced runs at the shipped model.
"""

from __future__ import annotations

from shardwise.analyses import loso


def main() -> None:
    print("STACK_LOG_SD: dict[str, tuple[float, int, int]] = {")
    for stack, (sd, runs, sources) in loso.shipped_stack_spreads().items():
        print(f'    "{stack}": ({sd:.4f}, {runs}, {sources}),')
    print("}")
    print("FAMILY_LOG_SD: dict[str, tuple[float, int, int]] = {")
    for family, (sd, runs, sources) in loso.shipped_family_spreads().items():
        print(f'    "{family}": ({sd:.4f}, {runs}, {sources}),')
    print("}")


if __name__ == "__main__":
    main()
