"""Narayanan et al. 2021 Fig. 16: throughput per GPU of the 91B GPT at (t, p) = (8, 8) on 64 A100
against the micro-batch size, for two global batches. The paper finds micro-batch 2 best: larger
micro-batches run larger, better-shaped GEMMs and pay the per-micro-batch costs (fp32 gradient
accumulation, pipeline sends and syncs) fewer times, but leave a larger pipeline bubble.

    python examples/microbatch_trend.py           # the figure's trend
    python examples/microbatch_trend.py --costs   # what a sequence costs the slowest stage, by part
    python examples/microbatch_trend.py --gemms   # the 91B layer's linear GEMMs by shape

The 91B model is the one the paper's own script for the figure runs (NVIDIA/Megatron-LM
examples/sc21/run_figure_16.sh, added in de7dc40f of 2021-08-10): 32 layers of hidden 15360 with
128 heads (91.4e9 parameters with the 51,200-token vocabulary), sequence 2048, `--DDP-impl local`,
every layer recomputed (`--checkpoint-activations` at de7dc40f, `--activations-checkpoint-method
uniform` from 6985e589 of 2021-08-18), fp16 (CONFIG.sh), Megatron-LM of 2021 (`--framework
megatron-lm-2021`), standard attention.

`--costs` splits one sequence's time on the fullest middle stage into what grows with the tokens
and what a stage pays once per micro-batch (docs/model.md, "How large the micro-batch effect
is"), for the 91B layout at batch 512 and for BLOOM-176B under Megatron-DeepSpeed (tp 4, pp 12,
dp 8, bf16, batch 2048): the linear layers' GEMMs (forward, its
recomputation, input and weight gradients: the tile and wave model of `physics.gemm` at M = b s
rows), the rest of the layers' kernels with their exposed TP collectives, the weight-gradient
accumulation (`physics.microbatch`, once per micro-batch), the pipeline sends and syncs (once per
micro-batch), then the step's bubble and time. `--gemms` gives the rate the tile model prices
each of the 91B layer's four linear GEMMs at, forward, input gradient and weight gradient.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from shardwise import presets
from shardwise.engines.training import estimate_training_step
from shardwise.engines.training_stages import micro_batch_stages, stage_sends_per_micro_batch_s
from shardwise.physics.compute import layer_times
from shardwise.physics.flops import layer_forward
from shardwise.physics.microbatch import plan_accumulate_bytes
from shardwise.physics.topology import placement
from shardwise.specs import Model, Plan, Scenario
from shardwise.specs.hardware import Cluster
from shardwise.specs.plan_choices import Recompute

MICRO_BATCHES = (1, 2, 4, 8)


def fig16() -> tuple[Model, Cluster, Callable[[int, int], Plan]]:
    """The 91B model on 8 DGX A100 and its plan at (global batch, micro-batch): the shape of
    Megatron-LM's examples/sc21/run_figure_16.sh (NLS=32, HS=15360, NAH=128)."""
    model = presets.model("gpt3-175b", layers=32, hidden=15360, heads=128)
    cluster = presets.system("dgx-a100", nodes=8)
    flags = presets.framework("megatron-lm-2021")
    flags.pop("zero_stage")

    def plan(batch: int, mb: int) -> Plan:
        # the 2021 preset: no FlashAttention, the score matrix materialised
        return Plan(tp=8, pp=8, dp=1, global_batch=batch, micro_batch=mb, recompute="full", precision="fp16", **flags)

    return model, cluster, plan


def deepspeed_176b() -> tuple[Model, Cluster, Callable[[int, int], Plan]]:
    """BLOOM-176B under Megatron-DeepSpeed on 48 DGX A100 (docs/model.md's DeepSpeed section)."""
    model = presets.model("bloom-176b")
    cluster = presets.system("dgx-a100", nodes=48)
    flags = presets.framework("megatron-deepspeed")
    flags.pop("zero_stage")

    def plan(batch: int, mb: int) -> Plan:
        return Plan(tp=4, pp=12, dp=8, global_batch=batch, micro_batch=mb, recompute="full", precision="bf16", **flags)

    return model, cluster, plan


def stage_parts_s(scn: Scenario) -> dict[str, float]:
    """Seconds per micro-batch on the fullest middle stage: its layers' linear GEMMs, their other
    kernels and exposed TP collectives, the weight-gradient accumulation and the pipeline sends."""
    model, plan, gpu = scn.model, scn.plan, scn.cluster.gpu
    fwd = layer_forward(model, plan.micro_batch, plan.tp, plan.sequence_parallel, plan.bytes_per_element)
    acc = plan_accumulate_bytes(plan)
    fused = plan.grad_accumulation_fusion
    with_acc = layer_times(fwd, gpu, plan.precision, plan.flash_attention, fused, plan.attention_kernel, False, acc)
    no_acc = layer_times(fwd, gpu, plan.precision, plan.flash_attention, fused, plan.attention_kernel, False, 0.0)
    forwards = 2.0 if plan.recompute == Recompute.FULL else 1.0  # full recomputation: the forward again
    gemms = sum(forwards * g.forward_s + g.input_grad_s + g.weight_grad_s for g in no_acc.linears)
    accumulation = sum(a.weight_grad_s - b.weight_grad_s for a, b in zip(with_acc.linears, no_acc.linears, strict=True))
    stages, sends = micro_batch_stages(scn)
    layers = float(scn.split.middle_max)
    crosses = placement(plan, scn.cluster.gpus_per_node)["pp"] < plan.pp
    send = stage_sends_per_micro_batch_s(scn, sends.across_s if crosses else sends.within_s)
    middle = stages.middle
    tp = float(middle.tp_forward_s + middle.tp_backward_s)
    return {
        "GEMMs": layers * float(gemms),
        "other kernels": float(middle.total_s) - tp - layers * float(gemms + accumulation),
        "TP collectives": tp,
        "accumulation": layers * float(accumulation),
        "sends, syncs": float(send),
    }


def trend() -> None:
    model, cluster, plan = fig16()
    print("TFLOP/s per GPU (Eq. 3), GPT 91B, (t, p) = (8, 8), 64 A100")
    print("batch   " + "".join(f"  mb={mb:<5d}" for mb in MICRO_BATCHES) + "  best")
    for batch in (128, 512):
        rates = {}
        for mb in MICRO_BATCHES:
            rates[mb] = float(estimate_training_step(Scenario(model, cluster, plan(batch, mb))).hardware_tflops_per_gpu)
        best = max(rates, key=rates.__getitem__)
        print(f"{batch:<8d}" + "".join(f"  {r:8.1f}" for r in rates.values()) + f"  mb={best}")


def costs() -> None:
    for title, layout, batch in (
        ("GPT 91B, Megatron-LM 2021, tp 8 pp 8, batch 512", fig16, 512),
        ("BLOOM 176B, Megatron-DeepSpeed, tp 4 pp 12 dp 8, batch 2048", deepspeed_176b, 2048),
    ):
        model, cluster, plan = layout()
        print(f"{title}: ms per sequence on the fullest middle stage")
        print(f"{'':20s}" + "".join(f"  mb={mb:<5d}" for mb in MICRO_BATCHES))
        rows: dict[str, list[float]] = {}
        for mb in MICRO_BATCHES:
            scn = Scenario(model, cluster, plan(batch, mb))
            for name, seconds in stage_parts_s(scn).items():
                rows.setdefault(name, []).append(seconds / mb)
            est = estimate_training_step(scn)
            sequences = batch / scn.plan.dp  # one replica's
            rows.setdefault("bubble (per seq.)", []).append(float(est.breakdown.pp_bubble_s) / sequences)
            rows.setdefault("step (s)", []).append(float(est.step_time_s) / 1e3)
        for name, values in rows.items():
            print(f"{name:20s}" + "".join(f"  {1e3 * v:8.2f}" for v in values))
        print()


def gemm_rates() -> dict[int, list[tuple[str, str, float, float, float]]]:
    """Per micro-batch size: each linear GEMM of one 91B layer at tp 8 (its name, M x N x K) and
    the TFLOP/s the tile model prices its forward, input gradient and weight gradient at (the
    weight gradient without the accumulation, which `--costs` shows apart)."""
    model, cluster, plan = fig16()
    p, gpu = plan(512, 1), cluster.gpu
    out = {}
    for mb in MICRO_BATCHES:
        fwd = layer_forward(model, mb, p.tp, p.sequence_parallel, p.bytes_per_element)
        fused = p.grad_accumulation_fusion
        times = layer_times(fwd, gpu, p.precision, p.flash_attention, fused, p.attention_kernel, False, 0.0)
        rows = []
        for name, g, t in zip(("QKV", "projection", "MLP up", "MLP down"), fwd.gemms, times.linears, strict=False):
            flops = 2.0 * float(g.m) * float(g.n) * float(g.k)
            shape = f"{int(g.m)} x {int(g.n)} x {int(g.k)}"
            seconds = (t.forward_s, t.input_grad_s, t.weight_grad_s)
            rows.append((name, shape, *(flops / float(x) / 1e12 for x in seconds)))
        out[mb] = rows
    return out


def gemms() -> None:
    print("GPT 91B at tp 8 on A100: TFLOP/s of each linear GEMM (M x N x K), forward / input grad / weight grad")
    for mb, rows in gemm_rates().items():
        for name, shape, f, d, w in rows:
            print(f"mb={mb:<2d} {name:11s} {shape:22s} {f:6.1f} {d:6.1f} {w:6.1f}")


def main() -> None:
    if sys.argv[1:] == ["--costs"]:
        costs()
    elif sys.argv[1:] == ["--gemms"]:
        gemms()
    elif sys.argv[1:]:
        print("usage: python examples/microbatch_trend.py [--costs | --gemms]", file=sys.stderr)
        raise SystemExit(2)
    else:
        trend()


if __name__ == "__main__":
    main()
