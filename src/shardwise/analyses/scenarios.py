"""The brief's scenarios (Sections 4 and 5 of the Russian article), each as a runnable
experiment with a figure and a two-line finding computed from the model (nothing hard-coded).

Common setting unless a scenario says otherwise: the brief's model (hidden 4096, 96 layers),
8 A100-SXM4-80GB, TP=8 against PP=8, NVLink (nvlink3) or PCIe Gen4 (pcie4) inside the server,
sequences of 2048 tokens, micro-batch 1, bf16, FlashAttention.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from shardwise import presets
from shardwise.analyses.crossover import run_crossover
from shardwise.analyses.experiment import LinkSpec, brief_experiment
from shardwise.engines.forward import estimate_forward
from shardwise.engines.training import estimate_training_step, layer_times_s, pipeline_makespan_s
from shardwise.specs import Model, Plan, Scenario

LINKS = {"NVLink": "nvlink3", "PCIe": "pcie4"}


@dataclass(frozen=True)
class ScenarioReport:
    name: str
    title: str  # the brief's claim, in one line
    finding: str  # two lines, from the model's numbers
    numbers: dict[str, float]
    figure: Any  # a matplotlib Figure, or None when plots were not asked for


def _cluster(link: str, gpus: int = 8) -> Any:
    return presets.system("dgx-a100").with_(intra_node_link=presets.link(LINKS[link]), gpus_per_node=gpus)


def _model(**changes: Any) -> Model:
    return presets.model("brief", **changes)


def _train(model: Model, link: str, **plan: Any) -> Any:
    return estimate_training_step(Scenario(model, _cluster(link), Plan(**plan)))


def small_batch(plot: bool) -> ScenarioReport:
    """4.1: at batch < 4 the all-reduce per layer makes TP worse than PP."""
    batches = [1, 2, 4]
    est = {(plan, b): _train(_model(), "NVLink", global_batch=b, **{plan: 8}) for plan in ("tp", "pp") for b in batches}
    tp1, pp1 = float(est[("tp", 1)].step_time_s), float(est[("pp", 1)].step_time_s)
    bubble = float(est[("pp", 1)].breakdown.pp_bubble_s / est[("pp", 1)].step_time_s)
    comm = float(est[("tp", 1)].breakdown.tp_comm_s / est[("tp", 1)].step_time_s)
    finding = (
        f"Training on NVLink at batch 1, TP=8 takes {tp1:.2f} s per step and PP=8 {pp1:.2f} s: with one "
        f"micro-batch PP idles {bubble:.0%} of the step,\nwhile TP's all-reduces are {comm:.0%} of its step. "
        f"The claim fails: small batches hurt PP (bubble) more than TP (all-reduce)."
    )
    fig = None
    if plot:
        from shardwise import plots

        cats = [f"{p.upper()}=8, batch {b}" for p in ("tp", "pp") for b in batches]
        parts = {
            k: np.array([float(est[(p, b)].breakdown.as_dict()[k]) for p in ("tp", "pp") for b in batches])
            for k in ("compute", "tp_comm", "pp_p2p", "pp_bubble", "optimizer")
        }
        fig = plots.stacked_bars(
            cats, parts, "training step time (s)", "Very small batch (brief 4.1): where a step's time goes, NVLink"
        )
    return ScenarioReport(
        "small-batch",
        "Very small batch: TP worse than PP below batch 4 (4.1)",
        finding,
        {"tp_batch1_s": tp1, "pp_batch1_s": pp1, "pp_bubble_share": bubble, "tp_comm_share": comm},
        fig,
    )


def slow_interconnect(plot: bool) -> ScenarioReport:
    """4.2: over PCIe TP's all-reduce costs ~20x more and TP becomes impractical."""
    exp = brief_experiment().with_(links=(LinkSpec.parse("PCIe-class=pcie4"),), batch=8)
    values = np.geomspace(4e9, 900e9, 41)
    res = run_crossover(exp, "bandwidth", values)
    at = res.crossings[0].at if res.crossings else float("nan")
    pcie = _train(_model(), "PCIe", tp=8, global_batch=8)
    nv = _train(_model(), "NVLink", tp=8, global_batch=8)
    pp = _train(_model(), "PCIe", pp=8, global_batch=8)
    ratio = float(pcie.breakdown.tp_comm_s / nv.breakdown.tp_comm_s)
    finding = (
        f"At batch 8, TP=8's all-reduces take {ratio:.1f}x longer on PCIe Gen4 than on NVLink, and TP=8 "
        f"needs {at / 1e9:.0f} GB/s per direction to match PP=8;\nover PCIe its step is "
        f"{float(pcie.step_time_s / pp.step_time_s):.1f}x PP=8's. The claim holds, "
        f"except at batch 1 where PP's bubble is larger still."
    )
    fig = None
    if plot:
        from shardwise import plots

        fig = plots.crossover_figure(
            res,
            "Slow interconnect (brief 4.2): batch 8, link bandwidth swept",
            "PCIe-class latency (2 µs per step); line rate per direction",
            "training step time (s)",
        )
        ax = fig.axes[0]
        for label, bw in (("PCIe Gen4", 31.5), ("NVLink3 (A100)", 300)):
            ax.axvline(bw, color="gray", ls=":", lw=1)
            ax.annotate(
                label,
                (bw, 1),
                xycoords=("data", "axes fraction"),
                xytext=(3, -12),
                textcoords="offset points",
                rotation=90,
                va="top",
                fontsize=8,
            )
    return ScenarioReport(
        "slow-interconnect",
        "Slow interconnect: over PCIe TP is almost always worse (4.2)",
        finding,
        {"tp_pp_equal_bandwidth_bytes_per_s": at, "pcie_over_nvlink_tp_comm": ratio},
        fig,
    )


def thin_layers(plot: bool) -> ScenarioReport:
    """4.3: with thin layers (hidden 512) TP gains little and its all-reduces eat the gain."""
    hidden = np.array([512, 1024, 2048, 4096, 8192, 16384])
    share, ratio = [], []
    for h in hidden:
        model = _model(hidden=int(h), heads=max(int(h) // 128, 8), ffn_hidden=4 * int(h))
        tp = _train(model, "NVLink", tp=8, global_batch=8)
        pp = _train(model, "NVLink", pp=8, global_batch=8)
        share.append(float(tp.breakdown.tp_comm_s / tp.step_time_s))
        ratio.append(float(tp.step_time_s / pp.step_time_s))
    finding = (
        f"At batch 8 on NVLink, TP=8's exposed communication is {share[0]:.0%} of its step at hidden 512 and "
        f"{share[-1]:.0%} at 16384;\nTP=8 is {ratio[0]:.1f}x slower than PP=8 on thin layers and "
        f"{1 / ratio[-1]:.1f}x faster on wide ones. The claim holds."
    )
    fig = None
    if plot:
        from shardwise import plots

        fig = plots.lines(
            hidden,
            {"TP=8 communication share of its step": np.array(share), "time(TP=8) / time(PP=8)": np.array(ratio)},
            "hidden size",
            "fraction / ratio",
            "Thin vs wide layers (brief 4.3): batch 8, NVLink, 96 layers",
            logx=True,
            hline=(1.0, "TP = PP"),
        )
    return ScenarioReport(
        "thin-layers",
        "Thin layers: TP's all-reduce overhead eats its gain (4.3)",
        finding,
        {"tp_comm_share_h512": share[0], "tp_over_pp_h512": ratio[0], "tp_over_pp_h16384": ratio[-1]},
        fig,
    )


def _decode(link: str, plan: dict[str, int], context: int) -> Any:
    scn = Scenario(_model(), _cluster(link), Plan(global_batch=1, **plan))
    return estimate_forward(scn, q_len=1, kv_len=context)


def batch1_inference(plot: bool) -> ScenarioReport:
    """4.4: serving a chatbot at batch 1, TP's per-layer all-reduce adds latency; PP can do better."""
    ctx = 2048
    runs = {(p, link): _decode(link, {p: 8}, ctx) for p in ("tp", "pp") for link in LINKS}
    ms = {k: float(v.latency_s) * 1e3 for k, v in runs.items()}
    tp_comm = float(runs[("tp", "NVLink")].tp_comm_s / runs[("tp", "NVLink")].latency_s)
    finding = (
        f"Decoding one token at batch 1 (2048 tokens of context): TP=8 {ms[('tp', 'NVLink')]:.1f} ms on NVLink, "
        f"{ms[('tp', 'PCIe')]:.1f} ms on PCIe; PP=8 {ms[('pp', 'NVLink')]:.1f} ms.\nEach token reads every "
        f"weight: TP reads 1/8 per GPU in parallel, PP reads all of them one stage after another; TP's "
        f"all-reduces are {tp_comm:.0%} of its time. The claim fails: TP has the lower latency."
    )
    fig = None
    if plot:
        from shardwise import plots

        cats = [f"{p.upper()}=8, {link}" for p in ("tp", "pp") for link in LINKS]
        parts = {
            k: np.array([float(runs[(p, link)].as_dict()[k]) * 1e3 for p in ("tp", "pp") for link in LINKS])
            for k in ("compute", "tp_comm", "pp_p2p", "pp_bubble")
        }
        fig = plots.stacked_bars(
            cats,
            parts,
            "time per output token (ms)",
            "Batch-1 inference (brief 4.4): one decode step, 2048 tokens of context",
            "compute is memory-bound here: reading the weights and the KV cache; PP's 'bubble' is "
            "the 7 stages idle while one works",
        )
    return ScenarioReport(
        "batch1-inference",
        "Batch-1 inference: PP beats TP's per-layer all-reduce latency (4.4)",
        finding,
        {f"{p}_{link}_ms": v for (p, link), v in ms.items()},
        fig,
    )


def shallow_model(plot: bool) -> ScenarioReport:
    """5: with few layers (< 10) the pipeline has few stages and a large bubble; PP loses to TP."""
    exp = brief_experiment().with_(links=(LinkSpec.parse("NVLink=nvlink3"),), model=_model(layers=8))
    res = run_crossover(exp, "batch", np.arange(1, 65, dtype=float))
    tp, pp = (s.time_s for s in res.series)
    gain = tp / pp
    deep = run_crossover(
        brief_experiment().with_(links=(LinkSpec.parse("NVLink=nvlink3"),)), "batch", np.arange(1, 65, dtype=float)
    )
    crossing = deep.crossings[0].at if deep.crossings else float("nan")
    finding = (
        f"With 8 layers (one per stage), TP=8 beats PP=8 at every batch up to 64 (PP/TP time "
        f"{1 / gain[0]:.1f}x at batch 1, {1 / gain[-1]:.2f}x at 64);\nwith 96 layers PP=8 takes over from "
        f"batch {crossing:g}. The claim holds: shallow models leave the pipeline nothing to overlap."
    )
    fig = None
    if plot:
        from shardwise import plots

        fig = plots.crossover_figure(
            res,
            "Shallow model (brief 5): 8 layers, TP=8 vs PP=8, NVLink",
            "one layer per pipeline stage; training step",
            "training step time (s)",
        )
    return ScenarioReport(
        "shallow-model",
        "Shallow models (< 10 layers): PP loses to TP (5)",
        finding,
        {"pp_over_tp_batch1": float(1 / gain[0]), "pp_over_tp_batch64": float(1 / gain[-1])},
        fig,
    )


def unbalanced_layers(plot: bool) -> ScenarioReport:
    """5: one layer k times heavier than the others makes its stage the bottleneck."""
    batch, p = 16, 8
    model = _model()
    heavy = np.array([1, 2, 4, 6, 8, 10, 12, 16], dtype=float)
    tp_base = _train(model, "NVLink", tp=8, global_batch=batch)
    pp_plan = Plan(pp=p, global_batch=batch)
    pp_base = estimate_training_step(Scenario(model, _cluster("NVLink"), pp_plan))
    tp_layer = sum(layer_times_s(Scenario(model, _cluster("NVLink"), Plan(tp=8, global_batch=batch))))
    pp_layer = sum(layer_times_s(Scenario(model, _cluster("NVLink"), pp_plan)))
    c = float(pp_base.step_time_s - pp_base.breakdown.optimizer_s - pp_base.breakdown.dp_comm_s) / (batch + p - 1)
    extra = (heavy - 1) * pp_layer  # the heavy layer's extra work, on stage 0
    tp_time = float(tp_base.step_time_s) + batch * (heavy - 1) * tp_layer
    pp_equal = pipeline_makespan_s(c + extra, c, c, p, batch) + float(pp_base.breakdown.optimizer_s)
    # rebalanced: stages get unequal layer counts so each does total / p of the work, unless the
    # heavy layer alone is more than that
    c_bal = np.maximum((c * p + extra) / p, heavy * pp_layer)
    pp_balanced = pipeline_makespan_s(c_bal, c_bal, c_bal, p, batch) + float(pp_base.breakdown.optimizer_s)
    k = int(np.flatnonzero(heavy == 10)[0])
    finding = (
        f"One layer 10x heavier (batch 16, NVLink): PP=8 with 12 layers per stage slows from "
        f"{pp_equal[0]:.2f} s to {pp_equal[k]:.2f} s (its stage does 21 layers' work), TP=8 only from "
        f"{tp_time[0]:.2f} s to {tp_time[k]:.2f} s;\nmoving layers off the heavy stage brings PP back to "
        f"{pp_balanced[k]:.2f} s. The claim holds for equal splits; balancing the stages removes most of it."
    )
    fig = None
    if plot:
        from shardwise import plots

        fig = plots.lines(
            heavy,
            {"TP=8": tp_time, "PP=8, 12 layers per stage": pp_equal, "PP=8, layers rebalanced": pp_balanced},
            "work of the heavy layer (x a normal layer)",
            "training step time (s)",
            "Unbalanced layers (brief 5): one layer k x heavier, batch 16, NVLink",
        )
    return ScenarioReport(
        "unbalanced-layers",
        "Unbalanced layers: the heavy stage becomes the bottleneck (5)",
        finding,
        {
            "pp_equal_k10_s": float(pp_equal[k]),
            "tp_k10_s": float(tp_time[k]),
            "pp_rebalanced_k10_s": float(pp_balanced[k]),
        },
        fig,
    )


def wide_layers(plot: bool) -> ScenarioReport:
    """5: a layer too wide for one GPU's memory cannot be pipelined; only TP splits it."""
    h, layers = 24576, 8
    model = _model(hidden=h, heads=h // 128, ffn_hidden=4 * h, layers=layers)
    gpus = np.array([1, 2, 4, 8, 16, 32, 64])
    mem_pp, mem_tp = [], []
    for g in gpus:
        pp = min(int(g), layers)
        tp = min(int(g), 8)
        cluster = presets.system("dgx-a100", nodes=max(1, int(g) // 8)).with_(gpus_per_node=min(int(g), 8))
        for out, plan in (
            (mem_pp, Plan(pp=pp, dp=int(g) // pp, global_batch=64, recompute="full")),
            (mem_tp, Plan(tp=tp, pp=int(g) // tp, global_batch=64, recompute="full")),
        ):
            out.append(float(estimate_training_step(Scenario(model, cluster, plan)).memory.total_bytes))
    gpu_bytes = float(presets.gpu("a100-sxm4-80gb").memory_bytes)
    layer_state = 216 * h * h  # 12 h^2 parameters x (2 + 4 + 12) bytes: weights, fp32 gradients, Adam
    fits_tp = gpus[np.array(mem_tp) <= gpu_bytes]
    finding = (
        f"One layer of hidden {h} needs {layer_state / 1e9:.0f} GB to train (216 h^2 bytes of weights, gradients "
        f"and Adam state): pipelining {layers} such layers bottoms out at one layer per GPU,\n"
        f"{min(mem_pp) / 1e9:.0f} GB however many GPUs are added; TP=8 splits the layer itself and fits an "
        f"80 GB A100 from {int(fits_tp[0]) if len(fits_tp) else 0} GPUs (TP=8 x PP). The claim holds."
    )
    fig = None
    if plot:
        from shardwise import plots

        fig = plots.lines(
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
            hline=(gpu_bytes / 1e9, "A100 80 GB"),
            note="full recomputation, ZeRO-0; ZeRO-3 could shard the state across data-parallel ranks too",
        )
    return ScenarioReport(
        "wide-layers",
        "Layers too wide for one GPU: PP cannot help, TP must (5)",
        finding,
        {"layer_state_bytes": float(layer_state), "pp_min_bytes": min(mem_pp), "tp_min_bytes": min(mem_tp)},
        fig,
    )


def ttft(plot: bool) -> ScenarioReport:
    """5: PP raises time to first token (the prompt crosses the stages one after another)."""
    prompts = np.array([128, 256, 512, 1024, 2048, 4096, 8192])
    series = {}
    for p in ("tp", "pp"):
        for link in LINKS:
            scn = Scenario(_model(seq_len=8192), _cluster(link), Plan(global_batch=1, **{p: 8}))
            series[f"{p.upper()}=8, {link}"] = np.array(
                [float(estimate_forward(scn, q_len=int(n)).latency_s) * 1e3 for n in prompts]
            )
    i = int(np.flatnonzero(prompts == 2048)[0])
    tpn, ppn, tpp = series["TP=8, NVLink"][i], series["PP=8, NVLink"][i], series["TP=8, PCIe"][i]
    finding = (
        f"Time to first token for a 2048-token prompt at batch 1: TP=8 {tpn:.0f} ms on NVLink, PP=8 {ppn:.0f} ms "
        f"(the prompt crosses 8 stages in turn);\nover PCIe TP=8 needs {tpp:.0f} ms and the gap closes. "
        f"The claim holds on NVLink; over PCIe TP loses its advantage."
    )
    fig = None
    if plot:
        from shardwise import plots

        fig = plots.lines(
            prompts,
            series,
            "prompt length (tokens)",
            "time to first token (ms)",
            "Time to first token (brief 5): one prompt, prefill latency",
            logx=True,
            logy=True,
        )
    return ScenarioReport(
        "ttft",
        "Latency-bound time to first token: PP raises TTFT, TP lowers it (5)",
        finding,
        {"tp_nvlink_ms": float(tpn), "pp_nvlink_ms": float(ppn), "tp_pcie_ms": float(tpp)},
        fig,
    )


SCENARIOS: dict[str, Callable[[bool], ScenarioReport]] = {
    "small-batch": small_batch,
    "slow-interconnect": slow_interconnect,
    "thin-layers": thin_layers,
    "batch1-inference": batch1_inference,
    "shallow-model": shallow_model,
    "unbalanced-layers": unbalanced_layers,
    "wide-layers": wide_layers,
    "ttft": ttft,
}


def run(name: str, out_dir: str | Path | None = None) -> ScenarioReport:
    """Run one scenario; with `out_dir`, also write its figure there as NAME.png."""
    report = SCENARIOS[name](out_dir is not None)
    if out_dir is not None and report.figure is not None:
        from shardwise import plots

        plots.save(report.figure, Path(out_dir) / f"{name}.png")
    return report
