"""What each side of a llama.cpp pair of `analyses.serving_pcie` is made of, to see which term a
ratio's error comes from (issue #37): per side, one micro-batch's compute, TP communication and
sends on the stage that sets the pace, the micro-batches, the predicted and the measured tokens/s.

Sides: "layer" (`-sm layer`, its stages' costs with the sends; the scheduler of the build's year),
"tensor" (`-sm tensor`, as `engines.llamacpp_tensor` prices it) and "row" (`-sm row`: one GPU's
forward, the products' share moved off the main GPU, the copies). Printed by
`tools/llamacpp_breakdown.py`; nothing here is fitted.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from shardwise.analyses import serving_pcie as sp
from shardwise.engines.forward import ForwardStages
from shardwise.engines.llamacpp import layer_gemm_s, row_split_copies_s
from shardwise.engines.llamacpp_tensor import tensor_split_stages
from shardwise.engines.serving import compute_precision, plan_for_serving, serving_scenario
from shardwise.specs import Scenario
from shardwise.specs.serving import ServingWorkload


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


def _workload(pair: sp.Pair) -> ServingWorkload:
    runtime = "graphs" if pair.tokens == 0 else "cpp-eager"
    return ServingWorkload(max(pair.tokens, 1), 1, 1, pair.weights, "bf16", runtime)


def _chunk(pair: sp.Pair) -> tuple[int, int]:
    """(tokens per micro-batch, micro-batches) of the pair's workload."""
    if pair.tokens == 0:
        return 1, 1
    chunk = min(pair.ubatch, pair.tokens)
    return chunk, -(-pair.tokens // chunk)


def breakdown(pair: sp.Pair) -> list[SideBreakdown]:
    """The layer split's and the other side's breakdown of one llama.cpp pair."""
    if pair.engine != "llama.cpp":
        raise ValueError(f"{pair.key}: only llama.cpp pairs are broken down here")
    tp_v, layer_v, _ = sp._measured(pair)
    model, wl = sp.pair_model(pair), _workload(pair)
    chunk, micro = _chunk(pair)
    decode, prompt = (1, 0) if pair.tokens == 0 else (0, chunk)
    context = pair.context if pair.tokens == 0 else max(pair.tokens, 1)

    def stages(tp: int, pp: int) -> tuple[Scenario, ForwardStages]:
        scn = serving_scenario(Scenario(model, sp._cluster(pair), plan_for_serving(tp, pp)), wl)
        return scn, sp._stages(scn, wl, decode, prompt, context)

    _, fs = stages(1, pair.gpus)
    _, compute, _ = fs.slowest(pair.gpus)
    per = tuple(float(x) for x in fs.per_stage)
    out = [
        SideBreakdown(pair.key, "layer", chunk, micro, float(compute), 0.0, float(fs.send_s),
                      per if pair.gpus > 2 else (per[0], per[2]), sp.throughput(pair, 1, pair.gpus), layer_v)
    ]  # fmt: skip
    if pair.split == "-sm row":
        one = serving_scenario(Scenario(model, sp._cluster(replace(pair, gpus=1)), plan_for_serving(1, 1)), wl)
        fs1 = sp._stages(one, wl, decode, prompt, context)
        cluster = sp._cluster(pair)
        precision = compute_precision(one, pair.weights)
        gemm = model.layers * float(layer_gemm_s(model, cluster, wl, chunk, precision))
        copies = model.layers * float(row_split_copies_s(model, chunk, pair.gpus, cluster, pair.weights))
        main = float(fs1.per_stage[0]) - (1.0 - 1.0 / pair.gpus) * gemm
        out.append(SideBreakdown(pair.key, "row", chunk, micro, main, copies, 0.0, (main + copies,),
                                 sp.throughput(pair, pair.gpus, 1, True), tp_v))  # fmt: skip
        return out
    scn, fs = stages(pair.gpus, 1)
    fs = tensor_split_stages(fs, scn, chunk, 1.0 if pair.tokens == 0 else 1.0 / micro)
    whole = float(fs.per_stage[0])
    out.append(SideBreakdown(pair.key, "tensor", chunk, micro, float(fs.compute[0]), float(fs.tp_comm[0]), 0.0,
                             (whole,), sp.throughput(pair, pair.gpus, 1), tp_v))  # fmt: skip
    return out


def llama_cpp_breakdowns() -> list[SideBreakdown]:
    """Every llama.cpp pair of `analyses.serving_pcie.PAIRS`, both sides."""
    return [side for pair in sp.PAIRS if pair.engine == "llama.cpp" for side in breakdown(pair)]
