#!/usr/bin/env python3
"""Long-context training as shardwise prices it, beside the long-sequence rows it can read.

Two tables, no GPU and no network:

1. NVIDIA NeMo's `performance_long_sequence.md` rows with context parallelism (Llama 2 7B on DGX
   H100, NeMo 24.03; Llama 3 8B on DGX B200, NeMo 25.04; FP8; 4K to 1M tokens). `validate public`
   skips them ("layout incomplete": the table states no micro-batch, and on B200 a data-parallel
   size that does not multiply out). Here they are priced with micro-batch 1 and dp = GPUs / (tp
   pp cp), a diagnostic reading of the table, not a validated row: the error's trend with the
   sequence length is what it shows (how much of the step is attention), not its level.
2. torchtitan's Llama 3.1 8B on one DGX H100 with context parallelism (PyTorch's
   `context_parallel`, FP8 through torchao, torch.compile), 8K at cp 2 and 64K-262K at cp 8, under
   each recomputation mode, with the memory call: which mode can run at all.

    PYTHONPATH=src python tools/long_context_check.py
    PYTHONPATH=src python tools/long_context_check.py --parts   # one step split by kind of work
"""

from __future__ import annotations

import argparse

from shardwise.analyses import public_moe
from shardwise.analyses.public_runs import measured_step_s, raw_rows, scenario_for, source_flops_per_step
from shardwise.engines.context_parallel import cp_step_s, micro_batch_view
from shardwise.engines.costs import layer_cost, plan_layer_times
from shardwise.engines.tp_overlap import tp_comm
from shardwise.engines.training import estimate_training_step
from shardwise.errors import SpecError
from shardwise.physics.attention_kernels import torch_ring_s
from shardwise.physics.collectives import Fabric
from shardwise.physics.topology import placement
from shardwise.requests.training import TrainingRequest
from shardwise.specs.plan import TORCH_RING_KERNELS

NEMO_LONG = "performance_long_sequence"
TORCHTITAN_CASES = ((8192, 2, 4), (65536, 8, 1), (131072, 8, 1), (262144, 8, 1))  # seq, cp, global batch
RECOMPUTE = ("none", "selective", "full")


def nemo_rows() -> list[str]:
    """One line per NeMo long-sequence row with its layout (micro-batch 1 assumed)."""
    lines = []
    for raw in raw_rows():
        if NEMO_LONG not in raw["source"] or not raw["tp"]:
            continue  # the "without CP" columns publish no layout
        row = dict(public_moe.resolved(raw))
        n, tp, pp, cp = (int(row[k]) for k in ("num_gpus", "tp", "pp", "cp"))
        row["mbs"], row["dp"] = "1", str(n // (tp * pp * cp))
        head = f"{row['id']} {row['model']:10s} {row['system']:9s} {int(row['seq_len']) // 1024:5d}K tp{tp} cp{cp:<2d}"
        try:
            scn = scenario_for(row)
            est = estimate_training_step(scn)
        except SpecError as exc:
            lines.append(f"{head} not priced: {exc}")
            continue
        meas = measured_step_s(row, source_flops_per_step(row, scn, float(est.model_flops_per_step)))
        pred = float(est.step_time_s)
        lines.append(f"{head} published {meas:7.2f} s  predicted {pred:7.2f} s  {100 * (pred / meas - 1):+6.1f}%")
    return lines


def torchtitan_rows() -> list[str]:
    """One line per (sequence, recomputation) of torchtitan's long-context Llama 3.1 8B."""
    lines = []
    for seq, cp, gbs in TORCHTITAN_CASES:
        for mode in RECOMPUTE:
            est = estimate_training_step(_request(seq, cp, gbs, "torchtitan-compile", mode).scenario())
            fits = "fits" if bool(est.fits_in_memory) else "does not fit"
            lines.append(f"{seq // 1024:4d}K cp{cp} recompute {mode:9s} {float(est.step_time_s):7.2f} s  {fits}")
    return lines


def _request(seq: int, cp: int, gbs: int, framework: str, recompute: str) -> TrainingRequest:
    """torchtitan's long-context Llama 3.1 8B on one DGX H100 in FP8."""
    return TrainingRequest(
        model="llama3.1-8b",
        system="dgx-h100",
        cp=cp,
        seq_len=seq,
        global_batch=gbs,
        framework=framework,
        precision="fp8",
        recompute=recompute,
    )


PARTS_CASES = ((8192, 2, 4), (65536, 8, 1), (262144, 8, 1))  # seq, cp, global batch


def step_parts(seq: int, cp: int, gbs: int, framework: str) -> dict[str, float]:
    """One step of torchtitan's Llama 3.1 8B (8 H100, FP8, full recomputation) split by kind of
    work, seconds: the layers' attention kernels forward and backward, PyTorch's ring bookkeeping
    (`physics.attention`), the attention rerun by full recomputation, the linear layers (GEMMs and
    FP8 casts; their rerun apart), the element-wise kernels, the CP communication left exposed,
    the host-bound wait, and the rest of the step (embedding, output layer, loss, optimizer, DP);
    then the attention kernels' priced rates, TFLOP/s per GPU."""
    scn = _request(seq, cp, gbs, framework, "full").scenario()
    est = estimate_training_step(scn)
    model, plan, gpu = scn.model, scn.plan, scn.cluster.gpu
    local = micro_batch_view(scn)
    fabric = Fabric.of(scn.cluster)
    place = placement(plan, scn.cluster.gpus_per_node)
    layer, fwd = layer_cost(
        local,
        tp_comm(local, fabric, place["tp"]),
        kv_len=model.seq_len,
        cp=plan.cp,
        cp_step=cp_step_s(scn, fabric, place),
    )
    lt = plan_layer_times(fwd, gpu, local.plan)  # the layer's kernels as layer_cost prices them
    torch_ring = plan.attention_kernel in TORCH_RING_KERNELS and plan.cp_comm == "p2p" and cp > 1
    ring_f, ring_b = (float(x) for x in torch_ring_s(fwd, gpu)) if torch_ring else (0.0, 0.0)
    n = model.layers * (gbs // (plan.dp * plan.micro_batch))  # layers x micro-batches per rank
    attn_f, attn_b = float(lt.attention_s) - ring_f, float(lt.attention_bwd_s) - ring_b
    linears_f = float(lt.gemm_s + lt.cast_f_s)
    linears_b = float(sum(g.input_grad_s + g.weight_grad_s for g in lt.linears) + lt.cast_b_s)
    parts = {
        "attention kernels, forward": n * attn_f,
        "attention kernels, backward": n * attn_b,
        "ring bookkeeping, forward": n * ring_f,
        "ring bookkeeping, backward": n * ring_b,
        "recompute: attention + ring": n * (attn_f + ring_f),
        "linears + FP8 casts, fwd + bwd": n * (linears_f + linears_b),
        "recompute: linears + casts": n * linears_f,
        "element-wise, fwd + bwd + recompute": n * float(2 * lt.elementwise_s + lt.elementwise_bwd_s),
        "CP (and TP) communication exposed": n * float(layer.tp_forward_s + layer.tp_backward_s),
        "host-bound wait": n * float(layer.host_wait_s),
    }
    # the layer's own forward, as the engine prices it, is the sum of its parts above
    assert abs(float(layer.compute_forward_s) - (attn_f + ring_f + linears_f + float(lt.elementwise_s))) < 1e-9
    parts["rest (embedding, output, loss, optimizer, DP)"] = float(est.step_time_s) - sum(parts.values())
    parts["step"] = float(est.step_time_s)
    # the rates the kernels are priced at: FLOPs per layer (the causal half counted once) over the
    # kernels' time, the backward on FlashAttention-2's count of 2.5 x the forward's
    worked = float(fwd.flash.flops * fwd.causal_fraction)
    parts["attention TFLOP/s forward"] = worked / attn_f / 1e12
    parts["attention TFLOP/s backward (2.5x)"] = 2.5 * worked / attn_b / 1e12
    return parts


def parts_table() -> None:
    for framework in ("torchtitan", "torchtitan-compile"):
        cases = [step_parts(seq, cp, gbs, framework) for seq, cp, gbs in PARTS_CASES]
        head = "".join(f"{seq // 1024:>6d}K cp{cp}" for seq, cp, _ in PARTS_CASES)
        print(f"\n{framework}, Llama 3.1 8B, 8 H100, FP8, full recomputation, seconds per step:")
        print(f"{'':46s}{head}")
        for key in cases[0]:
            print(f"{key:46s}" + "".join(f"{c[key]:11.3f}" for c in cases))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Long-context training as shardwise prices it (no GPU, no network).")
    parser.add_argument("--parts", action="store_true", help="split one torchtitan step by kind of work")
    if parser.parse_args(argv).parts:  # a wrong flag: argparse's one line and exit status 2
        parts_table()
        return
    print("NeMo performance_long_sequence.md, with CP (micro-batch 1 assumed):")
    print("\n".join(nemo_rows()))
    print("\ntorchtitan Llama 3.1 8B, 8 H100, FP8, torch.compile:")
    print("\n".join(torchtitan_rows()))


if __name__ == "__main__":
    main()
