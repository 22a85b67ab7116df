"""What each side of a llama.cpp pair of `analyses.serving_pcie` is made of, to see which term a
ratio's error comes from (issue #37): per side, one micro-batch's compute, TP communication and
sends on the stage that sets the pace, the micro-batches, the predicted and the measured tokens/s.

Sides: "layer" (`-sm layer`, its stages' costs with the sends; the scheduler of the build's year),
"tensor" (`-sm tensor`, as `engines.llamacpp_tensor` prices it) and "row" (`-sm row`: one GPU's
forward, the products' share moved off the main GPU, the copies); for a layer split over k GPUs
against fewer (`serving_pcie.LAYER_SCALING`), "k GPUs" and the base's "b GPUs". Printed by
`tools/llamacpp_breakdown.py` (`--layer-scaling`: every such pair; `--wrong`: the pairs whose
direction `validate inference_scaling` gets wrong); nothing here is fitted.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from shardwise.analyses import serving_pcie as sp


@dataclass(frozen=True)
class SideBreakdown:
    """One side of a pair: one micro-batch's terms (seconds; `stages_s` each stage's whole cost,
    sends included), the micro-batches of the workload, tokens/s predicted and measured."""

    pair: str
    side: str  # "layer", "tensor" or "row"
    tokens_per_micro_batch: int
    micro_batches: int
    compute_s: float  # the slowest stage's (tensor: every GPU's; row: the main GPU's forward less the moved share)
    comm_s: float  # TP all-reduces and the logits' read back (tensor), the copies (row), 0 (layer)
    send_s: float  # per boundary between stages (layer)
    stages_s: tuple[float, ...]
    predicted_tokens_per_s: float
    measured_tokens_per_s: float

    @property
    def error(self) -> float:
        return self.predicted_tokens_per_s / self.measured_tokens_per_s - 1.0


def breakdown(pair: sp.Pair) -> list[SideBreakdown]:
    """The layer split's and the other side's breakdown of one llama.cpp pair, from the stages and
    terms `analyses.serving_pcie.throughput` prices it with."""
    if pair.engine != "llama.cpp":
        raise ValueError(f"{pair.key}: only llama.cpp pairs are broken down here")
    tp_v, layer_v, _ = sp._measured(pair)
    chunk, micro = sp.pair_chunk(pair)
    fs = sp.llama_cpp_stages(pair, 1, pair.gpus)
    _, compute, _ = fs.slowest(pair.gpus)
    per = tuple(float(x) for x in fs.per_stage)
    out = [
        SideBreakdown(pair.key, "layer", chunk, micro, float(compute), 0.0, float(fs.send_s),
                      per if pair.gpus > 2 else (per[0], per[2]), sp.throughput(pair, 1, pair.gpus), layer_v)
    ]  # fmt: skip
    if pair.split == "-sm row":
        main, copies = sp.row_split_terms_of(pair, pair.gpus)
        out.append(SideBreakdown(pair.key, "row", chunk, micro, main, copies, 0.0, (main + copies,),
                                 sp.throughput(pair, pair.gpus, 1, True), tp_v))  # fmt: skip
        return out
    fs = sp.llama_cpp_stages(pair, pair.gpus, 1)
    whole = float(fs.per_stage[0])
    out.append(SideBreakdown(pair.key, "tensor", chunk, micro, float(fs.compute[0]), float(fs.tp_comm[0]), 0.0,
                             (whole,), sp.throughput(pair, pair.gpus, 1), tp_v))  # fmt: skip
    return out


def llama_cpp_breakdowns() -> list[SideBreakdown]:
    """Every llama.cpp pair of `analyses.serving_pcie.PAIRS`, both sides."""
    return [side for pair in sp.PAIRS if pair.engine == "llama.cpp" for side in breakdown(pair)]


def layer_scaling_breakdown(pair: sp.Pair) -> list[SideBreakdown]:
    """Both sides of a `serving_pcie.LAYER_SCALING` pair: the layer split over `pair.gpus` and over
    `pair.base_gpus` (one GPU: its whole forward, no send), from the stages and scheduler
    `analyses.serving_pcie.throughput` prices them with."""
    by = {int(r["num_gpus"]): float(r["value"]) for r in sp.serving_rows() if r["comparison_group"] == pair.group}
    out = []
    for k in (pair.gpus, pair.base_gpus):
        side = replace(pair, gpus=k)
        chunk, micro = sp.pair_chunk(side)
        fs = sp.llama_cpp_stages(side, 1, k)
        _, compute, _ = fs.slowest(k)
        per = tuple(float(x) for x in fs.per_stage)
        stages = per[:1] if k == 1 else (per[0], per[2]) if k == 2 else per
        send = float(fs.send_s) if k > 1 else 0.0
        name = f"{k} GPU{'s' if k > 1 else ''}"
        out.append(SideBreakdown(pair.key, name, chunk, micro, float(compute), 0.0, send, stages,
                                 sp.throughput(side, 1, k), by[k]))  # fmt: skip
    return out


def layer_scaling_breakdowns() -> list[SideBreakdown]:
    """Every `serving_pcie.LAYER_SCALING` pair, both sides."""
    return [side for pair in sp.LAYER_SCALING for side in layer_scaling_breakdown(pair)]


def wrong_direction_breakdowns() -> list[SideBreakdown]:
    """Both sides of every llama.cpp pair on PCIe whose direction (gain or no gain)
    `validate inference_scaling` gets wrong (`analyses.serving_scaling.scaling_rows`)."""
    from shardwise.analyses.serving_scaling import pcie_rows

    wrong = {r.key for r in pcie_rows() if not r.direction_right}
    out = [side for pair in sp.PAIRS if pair.key in wrong and pair.engine == "llama.cpp" for side in breakdown(pair)]
    return out + [side for pair in sp.LAYER_SCALING if pair.key in wrong for side in layer_scaling_breakdown(pair)]
