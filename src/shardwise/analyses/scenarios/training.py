"""The brief's training scenarios (Sections 4.1-4.3 and 5): small batch, slow interconnect, thin
layers, shallow models, unbalanced layers, layers too wide for one GPU."""

from __future__ import annotations

import numpy as np

from shardwise import presets
from shardwise.analyses.crossover import run_crossover
from shardwise.analyses.experiment import brief_experiment
from shardwise.analyses.scenarios.common import (
    ScenarioReport,
    brief_cluster,
    brief_model,
    chart,
    train_step,
    verdict,
    wide_model,
)
from shardwise.engines.pipeline import pipeline_makespan_s
from shardwise.engines.result import tp_comm_name
from shardwise.engines.training import estimate_training_step, layer_times_s
from shardwise.presets import parse_link_spec
from shardwise.specs import Plan, Scenario


def small_batch(plot: bool) -> ScenarioReport:
    """4.1: below batch 4 the all-reduce of every layer makes TP worse than PP."""
    batches = [1, 2, 3, 4]
    runs = {
        (p, s, b): train_step(brief_model(seq_len=s), "NVLink", global_batch=b, **{p: 8})
        for p in ("tp", "pp")
        for s in (2048, 128)
        for b in batches
    }
    t = {k: float(v.step_time_s) for k, v in runs.items()}
    holds = all(t[("pp", s, b)] < t[("tp", s, b)] for s in (2048, 128) for b in batches[:3])
    bubble = float(runs[("pp", 2048, 1)].breakdown.pp_bubble_s) / t[("pp", 2048, 1)]
    comm = {s: float(runs[("tp", s, 1)].breakdown.tp_comm_s) / t[("tp", s, 1)] for s in (2048, 128)}
    finding = (
        f"At batch 1 on NVLink TP=8 takes {t[('tp', 2048, 1)]:.3g} s and PP=8 {t[('pp', 2048, 1)]:.3g} s "
        f"with 2048-token "
        f"sequences ({t[('tp', 128, 1)] * 1e3:.0f} vs {t[('pp', 128, 1)] * 1e3:.0f} ms with 128 tokens): "
        f"one micro-batch "
        f"leaves PP idle {bubble:.0%} of the step,\nwhile TP's all-reduces, which carry b s h activations and shrink "
        f"with the batch except for their latency, are {comm[2048]:.0%} ({comm[128]:.0%} at 128 tokens) of its step. "
        + verdict(holds, "small batches hurt PP (its bubble) more than TP")
    )
    fig = None
    if plot:
        cats = [f"{p.upper()}=8, batch {b}" for p in ("tp", "pp") for b in batches]
        parts = {
            k: np.array([float(runs[(p, 2048, b)].breakdown.as_dict()[k]) for p in ("tp", "pp") for b in batches])
            for k in ("compute", "tp_comm", "pp_p2p", "pp_bubble", "optimizer")
        }
        fig = chart(
            "stacked_bars",
            cats,
            parts,
            "training step time (s)",
            "Very small batch (brief 4.1): where a step's time goes, NVLink, 2048-token sequences",
            tp_comm=tp_comm_name([runs[k].scenario.plan.tp for k in runs], [runs[k].scenario.plan.cp for k in runs]),
        )
    return ScenarioReport(
        "small-batch",
        "Very small batch: TP worse than PP below batch 4 (4.1)",
        finding,
        {
            "tp_batch1_s": t[("tp", 2048, 1)],
            "pp_batch1_s": t[("pp", 2048, 1)],
            "pp_bubble_share": bubble,
            "tp_comm_share": comm[2048],
            "tp_comm_share_128": comm[128],
        },
        holds,
        fig,
    )


def slow_interconnect(plot: bool) -> ScenarioReport:
    """4.2: over PCIe TP's all-reduce is ~20x slower and TP is almost always worse."""
    exp = brief_experiment().with_(links=(parse_link_spec("PCIe-class=pcie4"),), batch=8)
    # the figure: both links' latencies and protocols, so that each mark sits on its own link's
    # curve (review 36: the NVLink3 mark sat on the PCIe-class curve, which crosses at 179 GB/s
    # where the NVLink-class one crosses at 109)
    both = exp.with_(links=(parse_link_spec("NVLink-class=nvlink3"), *exp.links))
    res = run_crossover(both, "bandwidth", np.geomspace(4e9, 900e9, 41))
    pcie_changes = res.winner_changes("PCIe-class")
    at = pcie_changes[0].at if pcie_changes else float("nan")
    nv_tp, pcie_tp = (
        train_step(brief_model(), "NVLink", tp=8, global_batch=8),
        train_step(brief_model(), "PCIe", tp=8, global_batch=8),
    )
    slower = float(pcie_tp.breakdown.tp_comm_s / nv_tp.breakdown.tp_comm_s)
    batches = np.arange(1, 33, dtype=float)
    pcie = run_crossover(exp, "batch", batches)
    winners = pcie.winners("PCIe-class")
    pp_wins = float(np.mean([w == "pp=8" for w in winners]))
    tp_at = ", ".join(f"{b:g}" for b, w in zip(batches, winners, strict=True) if w == "tp=8") or "none"
    holds = bool(pp_wins >= 0.8)
    finding = (
        f"TP=8's all-reduces take {slower:.1f}x longer on PCIe Gen4 than on NVLink (the brief says ~20x); "
        f"at batch 8 TP=8 needs {at / 1e9:.0f} GB/s per direction to match PP=8,\nand over PCIe PP=8 is "
        f"faster at {pp_wins:.0%} of the batches from 1 to 32 (TP=8 only at batch {tp_at}, where PP's bubble "
        f"is larger still). " + verdict(holds)
    )
    fig = None
    if plot:
        fig = chart(
            "crossover_figure",
            res,
            "Slow interconnect (brief 4.2): batch 8, link bandwidth swept",
            "NVLink-class: NVLink3's latency (1 µs per step) and protocol; PCIe-class: PCIe Gen4's (2 µs); "
            "bandwidth is the line rate per direction, swept for both; dotted: each link's own bandwidth",
            "training step time (s)",
            markers=(("PCIe Gen4 (PCIe-class)", 31.5), ("NVLink3, A100 (NVLink-class)", 300)),
            log_y=True,
        )
    return ScenarioReport(
        "slow-interconnect",
        "Slow interconnect: over PCIe TP is almost always worse (4.2)",
        finding,
        {
            "tp_pp_equal_bandwidth_bytes_per_s": at,
            "pcie_over_nvlink_tp_comm": slower,
            "pcie_batches_pp_faster": float(pp_wins),
        },
        holds,
        fig,
    )


def thin_layers(plot: bool) -> ScenarioReport:
    """4.3: with thin layers (hidden 512) TP gains little and its all-reduces eat the gain."""
    hidden = np.array([512, 1024, 2048, 4096, 8192, 16384])
    share, ratio, fits = [], [], []
    for h in hidden:
        tp = train_step(wide_model(int(h)), "NVLink", tp=8, global_batch=8)
        pp = train_step(wide_model(int(h)), "NVLink", pp=8, global_batch=8)
        share.append(float(tp.breakdown.tp_comm_s / tp.step_time_s))
        ratio.append(float(tp.step_time_s / pp.step_time_s))
        fits.append(bool(tp.fits_in_memory and pp.fits_in_memory))
    too_big = [int(h) for h, f in zip(hidden, fits, strict=True) if not f]
    holds = ratio[0] > 1 and share[0] > share[-1]
    finding = (
        f"At batch 8 on NVLink TP=8's exposed all-reduces are {share[0]:.0%} of its step at hidden 512 "
        f"and {share[-1]:.0%} "
        f"at 16384; TP=8 is {ratio[0]:.1f}x slower than PP=8 on thin layers and {1 / ratio[-1]:.1f}x faster on wide "
        f"ones\n(times only: from hidden {too_big[0] if too_big else '-'} a 96-layer model no longer fits 8 A100s). "
        + verdict(holds)
    )
    fig = None
    if plot:
        fig = chart(
            "two_panels",
            hidden,
            {"TP=8 exposed communication / its step": np.array(share)},
            {"time(TP=8) / time(PP=8)": np.array(ratio)},
            "hidden size",
            ("share of TP=8's step", "ratio (< 1: TP faster)"),
            "Thin vs wide layers (brief 4.3): batch 8, NVLink, 96 layers",
            hline_right=1.0,
            missing=~np.array(fits),
            missing_label="a plan does not fit 8 A100s' memory there (times only)",
        )
    return ScenarioReport(
        "thin-layers",
        "Thin layers: TP's all-reduce overhead eats its gain (4.3)",
        finding,
        {"tp_comm_share_h512": share[0], "tp_over_pp_h512": ratio[0], "tp_over_pp_h16384": ratio[-1]},
        holds,
        fig,
    )


def shallow_model(plot: bool) -> ScenarioReport:
    """5: with few layers (< 10) the pipeline has few stages and a large bubble; PP loses to TP."""
    layers, batches = 8, np.arange(1, 65, dtype=float)
    exp = brief_experiment().with_(links=(parse_link_spec("NVLink=nvlink3"),), model=brief_model(layers=layers))
    res = run_crossover(exp, "batch", batches)
    tp, pp = (s.time_s for s in res.series)
    holds = bool(np.all(tp < pp))
    last = train_step(brief_model(layers=layers), "NVLink", pp=8, global_batch=64)
    bubble = float(last.breakdown.pp_bubble_s / last.step_time_s)
    # the output layer's share of the last stage: one layer vs one layer + the 51,200-word projection
    layer_s = sum(
        layer_times_s(Scenario(brief_model(layers=layers), brief_cluster("NVLink"), Plan(pp=8, global_batch=64)))
    )
    per_mb = float(last.breakdown.compute_s + last.breakdown.tp_comm_s) / 64
    finding = (
        f"With {layers} layers (one per stage) TP=8 is faster than PP=8 at {np.mean(tp < pp):.0%} of the "
        f"batches from 1 to "
        f"{int(batches[-1])} (PP/TP {pp[0] / tp[0]:.1f}x at batch 1, {pp[-1] / tp[-1]:.2f}x at {int(batches[-1])}); at "
        f"{int(batches[-1])} the bubble is only {bubble:.0%}:\nPP loses because its last stage runs one layer plus the "
        f"output layer, {per_mb / layer_s:.1f}x the work of the others. " + verdict(holds)
    )
    fig = None
    if plot:
        fig = chart(
            "crossover_figure",
            res,
            f"Shallow model (brief 5): {layers} layers, TP=8 vs PP=8, NVLink",
            "one layer per pipeline stage; training step",
            "training step time (s)",
        )
    return ScenarioReport(
        "shallow-model",
        "Shallow models (< 10 layers): PP loses to TP (5)",
        finding,
        {
            "pp_over_tp_batch1": float(pp[0] / tp[0]),
            "pp_over_tp_batch64": float(pp[-1] / tp[-1]),
            "last_stage_over_layer": per_mb / layer_s,
        },
        holds,
        fig,
    )


def best_partition(costs: np.ndarray, stages: int) -> np.ndarray:
    """The stage sums of `costs` (per layer, in order) cut into `stages` contiguous non-empty groups
    so that the slowest stage is as fast as it can be (dynamic programming over the cut points).
    Under 1F1B the step is m max_j c_j + (sum_j c_j - max_j c_j) (`pipeline_makespan_s`) and the
    sum is the same for every cut, so the cut of the smallest maximum is the fastest step; the even
    split is one of the cuts tried, so this is never slower than it."""
    n = len(costs)
    prefix = np.concatenate([[0.0], np.cumsum(costs)])
    best = np.full((stages + 1, n + 1), np.inf)  # best[s, i]: smallest max over s groups of the first i layers
    cut = np.zeros((stages + 1, n + 1), dtype=int)
    best[0, 0] = 0.0
    for s in range(1, stages + 1):
        for i in range(s, n + 1):
            j = np.arange(s - 1, i)  # the last group is layers j..i-1
            worst = np.maximum(best[s - 1, j], prefix[i] - prefix[j])
            k = int(np.argmin(worst))
            best[s, i], cut[s, i] = worst[k], j[k]
    sums, i = [], n
    for s in range(stages, 0, -1):
        j = cut[s, i]
        sums.append(prefix[i] - prefix[j])
        i = j
    return np.array(sums[::-1])


def unbalanced_layers(plot: bool) -> ScenarioReport:
    """5: one layer k times heavier than the others makes its stage the bottleneck."""
    batch, p, model = 16, 8, brief_model()
    per_stage = model.layers // p
    heavy = np.array([1, 2, 4, 6, 8, 10, 12, 16], dtype=float)
    cluster = brief_cluster("NVLink")
    tp_base = train_step(model, "NVLink", tp=8, global_batch=batch)
    pp_plan = Plan(pp=p, global_batch=batch)
    pp_base = estimate_training_step(Scenario(model, cluster, pp_plan))
    pp_layer = float(sum(layer_times_s(Scenario(model, cluster, pp_plan))))
    tp_layer_compute = float(tp_base.breakdown.compute_s) / batch / model.layers  # compute only: comm is not heavier
    c = float(pp_base.step_time_s - pp_base.breakdown.optimizer_s - pp_base.breakdown.dp_comm_s) / (batch + p - 1)
    tail = float(pp_base.breakdown.optimizer_s)
    tp_time = float(tp_base.step_time_s) + batch * (heavy - 1) * tp_layer_compute
    pp_equal = pipeline_makespan_s(c + (heavy - 1) * pp_layer, c, c, p, batch) + tail
    other = c - per_stage * pp_layer  # per stage, what is not a transformer layer (sends, embedding/head average)
    pp_balanced = []
    for k in heavy:
        costs = np.full(model.layers, pp_layer)
        costs[0] = k * pp_layer
        stage = best_partition(costs, p) + other  # each stage at its own time, not all at the slowest's
        middle = stage[1:-1]
        span = pipeline_makespan_s(stage[0], middle.max(), stage[-1], p, batch, c_middle_sum=middle.sum())
        pp_balanced.append(float(span) + tail)
    pp_balanced = np.array(pp_balanced)
    i = int(np.flatnonzero(heavy == 10)[0])
    holds = pp_equal[i] / pp_equal[0] > tp_time[i] / tp_time[0]
    recovered = (pp_equal[i] - pp_balanced[i]) / (pp_equal[i] - pp_equal[0])
    finding = (
        f"One layer 10x heavier (batch 16, NVLink): PP=8 with {per_stage} layers per stage slows from "
        f"{pp_equal[0]:.2f} s to "
        f"{pp_equal[i]:.2f} s (its stage does {per_stage - 1 + 10} layers' work), TP=8 only from {tp_time[0]:.2f} s to "
        f"{tp_time[i]:.2f} s;\nre-cutting the stages (whole layers, fewer on the heavy stage) brings PP back to "
        f"{pp_balanced[i]:.2f} s. "
        + verdict(holds)
        + (" Balancing the stages removes most of the penalty." if recovered > 0.5 else "")
    )
    fig = None
    if plot:
        fig = chart(
            "lines",
            heavy,
            {"TP=8": tp_time, f"PP=8, {per_stage} layers per stage": pp_equal, "PP=8, layers rebalanced": pp_balanced},
            "work of the heavy layer (x a normal layer)",
            "training step time (s)",
            "Unbalanced layers (brief 5): one layer k x heavier, batch 16, NVLink",
        )
    return ScenarioReport(
        "unbalanced-layers",
        "Unbalanced layers: the heavy stage becomes the bottleneck (5)",
        finding,
        {
            "pp_equal_k10_s": float(pp_equal[i]),
            "tp_k10_s": float(tp_time[i]),
            "pp_rebalanced_k10_s": float(pp_balanced[i]),
            "rebalanced_over_equal_max": float(np.max(pp_balanced / pp_equal)),  # over every k: <= 1
        },
        bool(holds),
        fig,
    )


def wide_layers(plot: bool) -> ScenarioReport:
    """5: a layer too wide for one GPU's memory cannot be pipelined; of TP and PP only TP splits it
    (ZeRO-3/FSDP, sharding its state over data-parallel ranks, is the other way: review 51 #14)."""
    h, layers = 24576, 8
    model = wide_model(h, layers=layers)
    gpus = np.array([1, 2, 4, 8, 16, 32, 64])
    mem_pp, mem_tp = [], []
    for g in gpus:
        pp, tp = min(int(g), layers), min(int(g), 8)
        cluster = presets.system("dgx-a100", nodes=max(1, int(g) // 8)).with_(gpus_per_node=min(int(g), 8))
        for out, plan in (
            (mem_pp, Plan(pp=pp, dp=int(g) // pp, global_batch=64, recompute="full")),
            (mem_tp, Plan(tp=tp, pp=int(g) // tp, global_batch=64, recompute="full")),
        ):
            out.append(float(estimate_training_step(Scenario(model, cluster, plan)).memory.total_bytes))
    gpu_bytes = float(presets.gpu("a100-sxm4-80gb").memory_bytes)
    layer_state = 216 * h * h  # 12 h^2 parameters x (2 + 4 + 12) bytes: weights, fp32 gradients, Adam
    fits_tp = gpus[np.array(mem_tp) <= gpu_bytes]
    holds = min(mem_pp) > gpu_bytes and len(fits_tp) > 0
    finding = (
        f"One layer of hidden {h} needs {layer_state / 1e9:.0f} GB to train (216 h^2 bytes of weights, gradients and "
        f"Adam state): pipelining {layers} such layers bottoms out at one layer per GPU,\n{min(mem_pp) / 1e9:.0f} GB "
        f"however many GPUs are added; TP=8 splits the layer itself and fits an 80 GB A100 from "
        f"{int(fits_tp[0]) if len(fits_tp) else '-'} GPUs (TP=8 x PP): of TP and PP only TP helps (ZeRO-3/FSDP, not "
        f"priced here, shards the layer's state over 8 data-parallel ranks instead, {layer_state / 8e9:.0f} GB each). "
        + verdict(holds)
    )
    fig = None
    if plot:
        fig = chart(
            "lines",
            gpus,
            {
                "PP only (pp = GPUs up to 8 layers, dp beyond)": np.array(mem_pp) / 1e9,
                "TP first (tp = GPUs up to 8, then pp)": np.array(mem_tp) / 1e9,
            },
            "GPUs",
            "memory per GPU (GB)",
            f"Layers too wide for one GPU (brief 5): {layers} layers of hidden {h}",
            logx=True,
            logy=True,
            # the preset's memory (GiB, as nvidia-smi reports it) in the axis's GB, not the datasheet's "80 GB"
            hline=(gpu_bytes / 1e9, f"A100 (datasheet 80 GB): {gpu_bytes / 2**30:.2f} GiB = {gpu_bytes / 1e9:.1f} GB"),
            note="full recomputation, ZeRO-0; ZeRO-3 could shard the state across data-parallel ranks too",
        )
    return ScenarioReport(
        "wide-layers",
        "Layers too wide for one GPU: of TP and PP, only TP can split them (5)",
        finding,
        {
            k: round(float(v))
            for k, v in (
                ("layer_state_bytes", layer_state),
                ("pp_min_bytes", min(mem_pp)),
                ("tp_min_bytes", min(mem_tp)),
            )
        },
        bool(holds),
        fig,
    )
