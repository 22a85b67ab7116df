"""Narayanan et al. 2021 Fig. 16: throughput per GPU of the 91B GPT at (t, p) = (8, 8) on 64 A100
against the micro-batch size, for two global batches. The paper finds micro-batch 2 best: larger
micro-batches run larger, better-shaped GEMMs and pay the per-micro-batch costs (fp32 gradient
accumulation, pipeline sends and syncs) fewer times, but leave a larger pipeline bubble.

    python examples/microbatch_trend.py

The 91B model is 72 layers of hidden 10240 with 80 heads (91.2e9 parameters: Table 1's 76B shape,
deeper; the paper gives only the parameter count), Megatron-LM of 2021 (`--framework
megatron-lm-2021`), fp16, full recomputation, standard attention.
"""

from __future__ import annotations

from shardwise import presets
from shardwise.engines.training import estimate_training_step
from shardwise.specs import Plan, Scenario


def main() -> None:
    model = presets.model("gpt3-175b", layers=72, hidden=10240, heads=80)
    cluster = presets.system("dgx-a100", nodes=8)
    flags = presets.framework("megatron-lm-2021")
    flags.pop("zero_stage")
    print("TFLOP/s per GPU (Eq. 3), GPT 91B, (t, p) = (8, 8), 64 A100")
    print("batch   " + "".join(f"  mb={mb:<5d}" for mb in (1, 2, 4, 8)) + "  best")
    for batch in (128, 512):
        rates = {}
        for mb in (1, 2, 4, 8):
            plan = Plan(
                tp=8,
                pp=8,
                dp=1,
                global_batch=batch,
                micro_batch=mb,
                recompute="full",
                precision="fp16",
                **flags,  # the 2021 preset: no FlashAttention, the score matrix materialised
            )
            rates[mb] = float(estimate_training_step(Scenario(model, cluster, plan)).hardware_tflops_per_gpu)
        best = max(rates, key=rates.__getitem__)
        print(f"{batch:<8d}" + "".join(f"  {r:8.1f}" for r in rates.values()) + f"  mb={best}")


if __name__ == "__main__":
    main()
