"""The measured spreads that every prediction's error bars rest on (no imports: the value types
use them too). Both are measured on the public runs' dev split only, by
`python tools/calibration_spread.py`; `shardwise validate --calibrated` checks them on the holdout.
"""

Z80 = 1.2815515655446004  # the normal quantile of 90%: an 80% two-sided interval is +-Z80 sd

# The uncalibrated model's spread: root mean square of ln(predicted / measured) over the dev runs
# (bias included: an uncalibrated prediction's interval must cover it).
UNCALIBRATED_LOG_SD = 0.072

# How far the model misses one software stack's runs once that stack's parameters are fitted: the
# dev stacks' residuals after calibrating on all their runs, pooled with the degrees of freedom the
# fits used. A calibration's own spread has a prior centred here, worth NOISE_PRIOR_RUNS runs.
NOISE_LOG_SD = 0.060
NOISE_PRIOR_RUNS = 4.0

# The spread of the ratio of two layouts' times (one model on one cluster): the scatter of the
# dev runs' errors inside their groups x sqrt(2) (a ratio has two runs' errors; a group's shared
# bias cancels). `shardwise sensitivity` puts it around time(plan A) / time(plan B).
PAIR_LOG_SD = 0.086

# The serving model's spread: root mean square of ln(predicted / measured) over the 66 published
# serving measurements of `shardwise validate inference` (TensorRT-LLM throughput, FasterTransformer
# latencies). They are not split into dev and holdout (the serving constants were set on other
# data: datasheets and microbenchmarks), so this is the model's spread on every row it can price.
SERVING_LOG_SD = 0.104
