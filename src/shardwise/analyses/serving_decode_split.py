"""Which part of a TensorRT-LLM serving row is priced wrong: its prefill or its decode steps, and
within a decode step which term (issue #37, the long-output bias). A diagnostic: nothing it finds
is shipped, and its one-parameter fits only rank the candidate terms.

Every TensorRT-LLM row of `validate inference` is priced as one full batch of B sequences
(`analyses.serving_tp_breakdown.side`): a prefill of the whole batch, T_pre, then O decode steps
of T_dec each (attention over the batch's mean context, the GEMMs and element-wise kernels, the
all-reduces), tokens/s = B O / (T_pre + O T_dec). With p = T_pre / (T_pre + O T_dec) the share of
the priced time spent in prefill, a prefill priced (1 + y) times too fast and decode steps
(1 + x) times too fast give the row's error e = predicted / measured - 1 as

    1 + e = p (1 + y) + (1 - p)(1 + x)           (so e ~ p y + (1 - p) x)

`prefill_decode_split` solves e = p y + (1 - p) x by least squares over each model, GPU and TP
size's ten lengths (their p runs from 1% to 93%): y and x are what the rows say of the prefill and
of the decode step. `decode_candidates` adds one candidate term to the decode step (its one
parameter fitted over every row, optionally with one prefill factor for all) and prices every row
again,

    1 + e' = (1 + e) / (p (1 + y) + (1 - p)(1 + dT / T_dec)),

the candidates being the decode step's KV-cache attention slower by a factor (a decode attention
kernel below the HBM bandwidth priced, growing with the context: FlashInfer, Ye et al. 2025,
arXiv 2501.01005; split-KV's reduction, paged-KV gathers), its GEMMs (and its all-reduces) slower
by a factor, a host cost per sequence and step (an executor's per-request work), a fixed cost per
step, the whole step slower by a factor, and the decode batch padded to the next batch size
trtllm-bench captures a CUDA graph for (`cuda_graph_batch_sizes`: `get_settings` asks for padding up
to `max_batch_size`, tensorrt_llm/bench/benchmark/utils/general.py @0171265e; the sizes are
`CudaGraphConfig._generate_cuda_graph_batch_sizes` of tensorrt_llm/llmapi/llm_args.py: 1, 2, 4, the
multiples of 8 to 128, the powers of 2 from 256 below `max_batch_size`, and `max_batch_size`; the
padded rows priced as the same step at the padded batch with no context, its parameter the share of
that cost that is real: 1 if the padding is on, 0 if the key trtllm-bench passes, `padding_enabled`,
is not the one `CudaGraphConfig` reads, docs/serving.md). A term that is the missing physics lowers the
error's spread on every model; one that only trades one model's error for another's is not it.
`tools/serving_tp_breakdown.py --decode` prints both; docs/serving.md ("Long outputs: the decode
step's share") reads them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class RowShare:
    """One TensorRT-LLM row's priced prefill share and decode step (seconds), and its error."""

    row: str
    group: str  # model, GPU and TP size: the row id less its lengths
    model: str
    batch: int
    attention_s: float  # a decode step's part that grows with the context
    gemm_s: float  # GEMMs, element-wise kernels, the output layer
    allreduce_s: float
    tpot_s: float
    prefill_share: float  # p
    error: float  # predicted / measured - 1
    padded_batch: int = 0  # the CUDA graph's batch the decode step runs at (`cuda_graph_batch_sizes`)
    padding_s: float = 0.0  # what the padded rows add to a decode step


def cuda_graph_batch_sizes(max_batch_size: int) -> list[int]:
    """The decode batch sizes trtllm-bench captures CUDA graphs for with padding on (module
    docstring; llm_args.py `CudaGraphConfig._generate_cuda_graph_batch_sizes`)."""
    sizes = [1, 2, 4] + [8 * i for i in range(1, 17)]
    sizes += [2**i for i in range(8, math.floor(math.log(max_batch_size, 2)))]
    sizes = sorted(s for s in sizes if s <= max_batch_size)
    return sizes if sizes and sizes[-1] == max_batch_size else [*sizes, max_batch_size]


def padded_batch(batch: int, max_batch_size: int) -> int:
    """The captured batch size a decode step of `batch` sequences is padded to."""
    return next(s for s in cuda_graph_batch_sizes(max_batch_size) if s >= batch)


def row_shares() -> list[RowShare]:
    """`RowShare` of every TensorRT-LLM row `validate inference` prices."""
    from dataclasses import replace

    from shardwise.analyses.serving_tp_breakdown import _workload, side
    from shardwise.analyses.serving_validation import _scenario, inference_rows, modelled
    from shardwise.engines.serving import estimate_serving

    out = []
    for row in inference_rows():
        if not (modelled(row) and row["framework"].startswith("TensorRT-LLM")):
            continue
        b = side(row)
        scn, wl = _scenario(row), _workload(row)
        padded = padded_batch(b.batch, b.max_batch_size)
        # the padded rows: the step with no context at the padded batch less the same at the batch
        bare = [
            float(estimate_serving(scn, replace(wl, input_len=1, output_len=2, batch=n)).tpot_s)
            for n in (b.batch, padded)
        ]
        out.append(
            RowShare(
                row=b.row,
                group=b.row.removeprefix("TRTLLM-").rsplit("-", 1)[0],
                model=row["model"],
                batch=b.batch,
                attention_s=b.decode_attention_s,
                gemm_s=b.decode_gemm_s,
                allreduce_s=b.decode_allreduce_s,
                tpot_s=b.tpot_s,
                prefill_share=b.prefill_share,
                error=b.error,
                padded_batch=padded,
                padding_s=bare[1] - bare[0],
            )
        )
    return out


@dataclass(frozen=True)
class GroupSplit:
    """What one model, GPU and TP size's rows say: prefill priced (1 + y) and decode (1 + x) too fast."""

    group: str
    prefill: float  # y
    decode: float  # x
    rows: int
    residual: float  # root-mean-square of e - (p y + (1 - p) x)


def prefill_decode_split(shares: list[RowShare]) -> list[GroupSplit]:
    """Least-squares y and x of e = p y + (1 - p) x per group (module docstring)."""
    out = []
    for group in dict.fromkeys(s.group for s in shares):
        rows = [s for s in shares if s.group == group]
        p = np.array([s.prefill_share for s in rows])
        e = np.array([s.error for s in rows])
        a = np.stack([p, 1.0 - p], axis=1)
        (y, x), *_ = np.linalg.lstsq(a, e, rcond=None)
        residual = float(np.sqrt(np.mean((e - a @ np.array([y, x])) ** 2)))
        out.append(GroupSplit(group, float(y), float(x), len(rows), residual))
    return out


# candidate decode-step terms: (unit of the parameter, seconds added to a step given the rows' arrays)
Term = Callable[[dict[str, np.ndarray], float], np.ndarray]
CANDIDATES: dict[str, tuple[str, Term]] = {
    "attention slower": ("fraction", lambda r, a: a * r["attention"]),
    "GEMMs slower": ("fraction", lambda r, g: g * r["gemm"]),
    "GEMMs and all-reduces slower": ("fraction", lambda r, g: g * (r["gemm"] + r["allreduce"])),
    "host per sequence": ("us per sequence and step", lambda r, c: c * 1e-6 * r["batch"]),
    "fixed per step": ("ms per step", lambda r, f: f * 1e-3 + 0.0 * r["tpot"]),
    "whole step slower": ("fraction", lambda r, d: d * r["tpot"]),
    "CUDA-graph batch padding": ("share of its cost", lambda r, s: s * r["padding"]),
}


@dataclass(frozen=True)
class Candidate:
    """One candidate decode term fitted over every row and what the rows' errors become."""

    name: str
    unit: str
    value: float  # its fitted parameter, in `unit` (NaN: no term)
    prefill: float  # the one prefill factor fitted with it (0 when held as priced)
    mape: float  # mean |e'| over every row
    mape_by_model: dict[str, float]
    bias: float  # mean e'


def repriced_errors(shares: list[RowShare], added_s: np.ndarray, prefill: float) -> np.ndarray:
    """e' of every row with `added_s` seconds on its decode step and its prefill (1 + `prefill`)
    times as long (module docstring)."""
    e = np.array([s.error for s in shares])
    p = np.array([s.prefill_share for s in shares])
    tpot = np.array([s.tpot_s for s in shares])
    return (1.0 + e) / (p * (1.0 + prefill) + (1.0 - p) * (1.0 + added_s / tpot)) - 1.0


def _arrays(shares: list[RowShare]) -> dict[str, np.ndarray]:
    return {
        "attention": np.array([s.attention_s for s in shares]),
        "gemm": np.array([s.gemm_s for s in shares]),
        "allreduce": np.array([s.allreduce_s for s in shares]),
        "batch": np.array([s.batch for s in shares], dtype=float),
        "tpot": np.array([s.tpot_s for s in shares]),
        "padding": np.array([s.padding_s for s in shares]),
    }


def _candidate(shares: list[RowShare], name: str, unit: str, value: float, prefill: float, e: np.ndarray) -> Candidate:
    models = np.array([s.model for s in shares])
    by_model = {m: float(np.mean(np.abs(e[models == m]))) for m in dict.fromkeys(models)}
    return Candidate(name, unit, value, prefill, float(np.mean(np.abs(e))), by_model, float(np.mean(e)))


def decode_candidates(shares: list[RowShare], prefill_free: bool = False) -> list[Candidate]:
    """No term, then each of `CANDIDATES` with its parameter fitted by least squares on e' over
    every row (and, `prefill_free`, one prefill factor y for all rows beside it)."""
    from scipy.optimize import least_squares

    r = _arrays(shares)
    zero = np.zeros(len(shares))
    y = float(least_squares(lambda q: repriced_errors(shares, zero, q[0]), [0.0]).x[0]) if prefill_free else 0.0
    out = [_candidate(shares, "none", "", float("nan"), y, repriced_errors(shares, zero, y))]
    for name, (unit, term) in CANDIDATES.items():

        def residuals(q: np.ndarray, term: Term = term) -> np.ndarray:
            return repriced_errors(shares, term(r, q[0]), q[1] if prefill_free else 0.0)

        fit = least_squares(residuals, [0.1, 0.0])
        value, y = float(fit.x[0]), float(fit.x[1]) if prefill_free else 0.0
        out.append(_candidate(shares, name, unit, value, y, residuals(fit.x)))
    return out
