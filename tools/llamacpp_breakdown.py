"""Which term of llama.cpp's TP-against-layer-split pairs is wrong (#37): each side's compute,
communication and sends per micro-batch, tokens/s predicted and measured
(`analyses.serving_pcie_breakdown`; the rows of `data/public_serving_multi_gpu.csv` that
`shardwise validate inference_scaling` compares as ratios). Nothing is fitted.

    PYTHONPATH=src python tools/llamacpp_breakdown.py
"""

from __future__ import annotations

from shardwise.analyses.serving_pcie_breakdown import llama_cpp_breakdowns


def main() -> None:
    head = f"{'pair':30} {'side':6} {'tok/mb':>6} {'mbs':>4} {'compute ms':>10} {'comm ms':>9} {'send ms':>8}"
    print(head + f" {'stages ms':>24} {'pred t/s':>9} {'meas t/s':>9} {'error':>7}")
    for b in llama_cpp_breakdowns():
        stages = "/".join(f"{x * 1e3:.2f}" for x in b.stages_s)
        print(
            f"{b.pair:30} {b.side:6} {b.tokens_per_micro_batch:6d} {b.micro_batches:4d} {b.compute_s * 1e3:10.3f} "
            f"{b.comm_s * 1e3:9.3f} {b.send_s * 1e3:8.3f} {stages:>24} {b.predicted_tokens_per_s:9.1f} "
            f"{b.measured_tokens_per_s:9.1f} {b.error:+7.1%}"
        )


if __name__ == "__main__":
    main()
