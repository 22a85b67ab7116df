"""Experts split by tensor parallelism or spread by expert parallelism: Qwen3-30B-A3B (128
experts of width 768, 8 per token) trained on 8 GPUs, on NVLink (DGX H100) and on PCIe (8 x L40S,
P2P off as the L40S grants no peer access: NCCL stages every transfer through host memory).
Both plans run the attention the same way (tp = 4 with sequence parallelism, dp = 2); only the
experts differ:

- TP for the experts (etp = tp = 4, Megatron-Core's default): every rank holds 1/4 of every
  expert; each MoE layer all-gathers its routed token copies over the 4 TP ranks and
  reduce-scatters the outputs (Megatron-Core's all-to-all dispatcher gathers after the
  permutation: 8 copies of h per token, 3/4 of them from other ranks), and each expert GEMM is
  768 / 4 = 192 columns wide.
- EP (ep = 8, etp = 1): every rank holds 16 whole experts and runs them on the tokens routed to
  them; each token travels as 8 copies (one per chosen expert), 7/8 of them to other GPUs, out
  and back: 7 h per token each way.

With 8 experts per token both move about the same bytes per token, but EP keeps the GEMMs
whole and sends over all 8 GPUs' links at once; TP cuts every expert into slivers. EP wins on
NVLink and by more on PCIe, where the all-gathered copies cost most.

    python examples/moe_ep_vs_tp.py                       # the table
    python examples/moe_ep_vs_tp.py --plot moe.png        # and step time against micro-batch
"""

from __future__ import annotations

import argparse

from shardwise import presets
from shardwise.engines.result import TrainingEstimate
from shardwise.engines.training import estimate_training_step
from shardwise.specs import Plan, Scenario

PLANS = {
    "experts by TP (etp=4)": {"ep": 1, "etp": 4},
    "experts by EP (ep=8, etp=1)": {"ep": 8, "etp": 1},
}
SYSTEMS = {"NVLink (dgx-h100)": "dgx-h100", "PCIe (l40s-8x)": "l40s-8x"}
MICRO_BATCHES = (1, 2, 4, 8)


def estimate(system: str, plan: dict[str, int], micro_batch: int) -> TrainingEstimate:
    model = presets.model("qwen3-30b-a3b", seq_len=4096)
    flags = presets.framework("megatron-core")
    flags.pop("zero_stage")
    p = Plan(tp=4, dp=2, sequence_parallel=True, global_batch=64, micro_batch=micro_batch, zero_stage=1, **plan)
    p = p.with_(**flags)
    return estimate_training_step(Scenario(model, presets.system(system), p))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plot", help="write step time against micro-batch to this image")
    args = parser.parse_args()
    print("Qwen3-30B-A3B, 8 GPUs, global batch 64 x 4096 tokens, bf16, micro-batch 1")
    print(f"{'system':<20}{'plan':<28}{'step':>8}{'compute':>9}{'TP comm':>9}{'EP a2a':>8}")
    for sys_label, system in SYSTEMS.items():
        for plan_label, plan in PLANS.items():
            est = estimate(system, plan, 1)
            b = est.breakdown
            print(
                f"{sys_label:<20}{plan_label:<28}{float(est.step_time_s):7.2f}s{float(b.compute_s):8.2f}s"
                f"{float(b.tp_comm_s):8.2f}s{float(b.ep_comm_s):7.2f}s"
            )
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=False)
        for ax, (sys_label, system) in zip(axes, SYSTEMS.items(), strict=True):
            for plan_label, plan in PLANS.items():
                steps = [float(estimate(system, plan, mb).step_time_s) for mb in MICRO_BATCHES]
                ax.plot(MICRO_BATCHES, steps, marker="o", label=plan_label)
            ax.set_xscale("log", base=2)
            ax.set_xticks(MICRO_BATCHES, [str(m) for m in MICRO_BATCHES])
            ax.set_xlabel("micro-batch (sequences of 4096 tokens)")
            ax.set_ylabel("step time (s)")
            ax.set_title(sys_label)
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        fig.suptitle("Qwen3-30B-A3B on 8 GPUs: experts by TP or by EP (shardwise)")
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
