"""Which term of llama.cpp's TP-against-layer-split pairs is wrong (#37): each side's compute,
communication and sends per micro-batch, tokens/s predicted and measured
(`analyses.serving_pcie_breakdown`; the rows of `data/public_serving_multi_gpu.csv` that
`shardwise validate inference_scaling` compares as ratios). Nothing is fitted.

    PYTHONPATH=src python tools/llamacpp_breakdown.py [--layer-scaling | --wrong]

--layer-scaling: the layer split over k GPUs against fewer (PP(k)/PP(1), PP(k)/PP(k/2)), both sides;
--wrong: every llama.cpp pair whose direction (gain or no gain) the model gets wrong, both sides.
"""

from __future__ import annotations

import argparse

from shardwise.analyses.serving_pcie_breakdown import (
    layer_scaling_breakdowns,
    llama_cpp_breakdowns,
    wrong_direction_breakdowns,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--layer-scaling", action="store_true", help="the layer split over k GPUs against fewer")
    which.add_argument("--wrong", action="store_true", help="the pairs whose direction the model gets wrong")
    args = parser.parse_args()
    sides = (
        layer_scaling_breakdowns()
        if args.layer_scaling
        else wrong_direction_breakdowns()
        if args.wrong
        else llama_cpp_breakdowns()
    )
    head = f"{'pair':36} {'side':7} {'tok/mb':>6} {'mbs':>4} {'compute ms':>10} {'comm ms':>9} {'send ms':>8}"
    print(head + f" {'stages ms':>24} {'pred t/s':>9} {'meas t/s':>9} {'error':>7}")
    for b in sides:
        stages = "/".join(f"{x * 1e3:.2f}" for x in b.stages_s)
        print(
            f"{b.pair:36} {b.side:7} {b.tokens_per_micro_batch:6d} {b.micro_batches:4d} {b.compute_s * 1e3:10.3f} "
            f"{b.comm_s * 1e3:9.3f} {b.send_s * 1e3:8.3f} {stages:>24} {b.predicted_tokens_per_s:9.1f} "
            f"{b.measured_tokens_per_s:9.1f} {b.error:+7.1%}"
        )


if __name__ == "__main__":
    main()
