"""Print the spreads the calibrated error bars rest on, measured on the public runs' DEV split only
(the holdout rows are never read here): the values of `calibration/spreads.py` the uncalibrated
intervals do not take from `tools/stack_spreads.py`, and the GEMM prior of
`calibration/parameters.py`. `shardwise validate --calibrated` prints the same line.

    python tools/calibration_spread.py
"""

from __future__ import annotations

from shardwise.analyses import calibration_validation as cv


def main() -> None:
    s = cv.dev_spreads(cv.public_runs())
    print(f"dev runs: {s.runs}")
    print(
        f"uncalibrated RMS of ln(predicted / measured), every dev row: {s.uncalibrated_rms:.4f}  "
        "(UNCALIBRATED_LOG_SD is the Megatron-Core dev rows': tests/test_calibration.py)"
    )
    print(f"groups: {s.groups}; scatter inside a group {s.within_group:.4f}")
    print(f"the ratio of two layouts of one group: {s.within_group * 2**0.5:.4f}  (PAIR_LOG_SD)")
    print(f"group means spread beyond it: {s.between_groups:.4f}  (MATMUL_PRIOR_SD x 0.75)")
    print(f"dev groups per GPU: {s.groups_per_gpu}  (the fitted ones: GPU_FIT, tools/stack_spreads.py)")
    print(f"calibrated residual spread, pooled: {s.calibrated_residual:.4f}  (NOISE_LOG_SD)")


if __name__ == "__main__":
    main()
