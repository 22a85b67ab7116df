#!/usr/bin/env python3
"""One context-parallel rank's ring attention as PyTorch runs it, timed on one GPU.

torchtitan's context parallelism is PyTorch's `context_parallel`
(torch/distributed/tensor/experimental/_attention.py, later _context_parallel/_attention.py):
the sequence is split head-tail (rank r holds chunks r and 2 cp - 1 - r of 2 cp), and every
layer runs `_templated_ring_attention`: step 0 a causal flash call on the rank's own keys, then
cp - 1 non-causal calls, all queries on the first half of the received keys (i <= rank) or the
second half of the queries on all of them (i > rank), each merged into an fp32 output with the
sigmoid/log-sigmoid update (`_SDPAMerger`). The backward (`_templated_ring_attention_backward`)
calls the flash backward per step and adds dQ, dK, dV into fp32 buffers (`_partial_update`
re-concatenates a whole tensor to update half of it).

This script reproduces one rank's forward and backward with those same aten calls, the same
layouts (queries a transposed view of (b, s, h, d) memory, keys and values made contiguous in
(b, h, s, d)) and the same bookkeeping, but takes the other ranks' keys and values from memory
instead of the network (the communication is overlapped with the steps in the real ring). It
times, per layer of one rank, the flash kernels alone and the whole ring, so that
`physics.attention` (the kernel's speed against its shape) and its eager bookkeeping can be
checked against a GPU. The ring's FLOPs: 4 b h s_l^2 d / 2 per layer forward (cp steps of half a
square each), the backward 2.5 times that.

    python3 tools/ring_bench.py --out "$OUT" --budget-s 240           # on the GPU
    python3 tools/ring_bench.py --device cpu --quick --out /tmp/rb    # tiny sizes, wall clock

Writes ring.csv (a row per case, rank and pass) and clocks.csv (nvidia-smi samples while the
largest case runs for --sustain-s seconds, to see the clock the GPU holds under attention).
Needs only torch and the standard library.
"""

from __future__ import annotations

import argparse
import csv
import functools
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

# (tokens per rank s_l, cp): the 8k cp 2 case and 32k tokens per rank at cp 2, 4, 8 (64k-262k)
FULL_CASES = ((4096, 2), (16384, 2), (32768, 2), (32768, 4), (32768, 8))
QUICK_CASES = ((32, 2), (32, 4))
FULL_SHAPE = (1, 32, 128)  # batch, query heads (Llama-3-8B after repeat_kv), head dim
QUICK_SHAPE = (1, 2, 16)
FIELDS = ("s_local", "cp", "rank", "pass", "what", "time_s", "reps", "flops", "tflops", "device", "dtype")


def head_tail_chunks(rank: int, cp: int) -> tuple[int, int]:
    """The two of 2 cp chunks a rank holds (PyTorch's round-robin / head-tail load balance)."""
    return rank, 2 * cp - 1 - rank


def ring_flops(batch: int, heads: int, s_local: int, head_dim: int, cp: int, backward: bool = False) -> float:
    """One rank's attention FLOPs in one layer: cp steps of half an s_l x s_l square (4 b h d per
    score element), the backward 2.5 times the forward (FlashAttention-2, Dao 2023, Sec. 4)."""
    forward = 4.0 * batch * heads * head_dim * s_local * s_local / 2 * cp
    return forward * (2.5 if backward else 1.0)


class Flash:
    """The flash attention aten ops PyTorch's ring calls (the CPU build has its own pair)."""

    def __init__(self, device: str):
        self.cuda = device.startswith("cuda")

    def forward(self, q, k, v, causal: bool):
        if self.cuda:
            out, lse, cq, ck, mq, mk, seed, offset, _ = torch.ops.aten._scaled_dot_product_flash_attention(
                q, k, v, 0.0, causal
            )
            return out, lse, (cq, ck, mq, mk, seed, offset)
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal)
        return out, lse, None

    def backward(self, dout, q, k, v, out, lse, causal: bool, rest):
        if self.cuda:
            cq, ck, mq, mk, seed, offset = rest
            return torch.ops.aten._scaled_dot_product_flash_attention_backward(
                dout, q, k, v, out, lse, cq, ck, mq, mk, 0.0, causal, seed, offset
            )
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(dout, q, k, v, out, lse, 0.0, causal)


def _step_inputs(i: int, rank: int, q, k, v):
    """(q, k, v, partial) of ring step i on a rank (`_templated_ring_attention`)."""
    if i == 0:
        return q, k, v, False
    if i <= rank:
        return q, k.chunk(2, dim=2)[0], v.chunk(2, dim=2)[0], False
    return q.chunk(2, dim=2)[1], k, v, True


def _partial_update(original, new, idx: int, add: bool):
    chunks = list(original.chunk(2, dim=2))
    if add:
        chunks[idx] += new
    else:
        chunks[idx] = new
    return torch.cat(chunks, dim=2)


def ring_forward(flash: Flash, q, kvs, rank: int, bookkeeping: bool = True):
    """(out, lse, per-step saved state) of one rank's forward; kvs[j] = (k, v) of rank j."""
    cp = len(kvs)
    out = lse = None
    lse_dtype = torch.float32
    saved = []
    for i in range(cp):
        k, v = kvs[(rank - i) % cp]
        if bookkeeping and i < cp - 1:
            torch.cat([k.flatten(), v.flatten()])  # the send buffer the ring builds every step
        qi, ki, vi, partial = _step_inputs(i, rank, q, k, v)
        block_out, block_lse, rest = flash.forward(qi, ki, vi, causal=i == 0)
        saved.append(rest)
        if not bookkeeping:
            continue
        lse_dtype = block_lse.dtype
        block_out, block_lse = block_out.float(), block_lse.float().unsqueeze(-1)
        if out is None:
            out, lse = block_out, block_lse
            continue
        o_old = out.chunk(2, dim=2)[1] if partial else out
        l_old = lse.chunk(2, dim=2)[1] if partial else lse
        o_new = o_old - torch.sigmoid(block_lse - l_old) * (o_old - block_out)
        l_new = l_old - torch.nn.functional.logsigmoid(l_old - block_lse)
        if partial:
            out, lse = _partial_update(out, o_new, 1, False), _partial_update(lse, l_new, 1, False)
        else:
            out, lse = o_new, l_new
    if not bookkeeping:
        return None, None, saved
    return out.to(q.dtype), lse.squeeze(-1).to(lse_dtype), saved


def ring_backward(flash: Flash, dout, q, kvs, out, lse, rank: int, saved, acc, bookkeeping: bool = True):
    """dQ of one rank (fp32), adding its dK, dV into acc[j] (fp32, the gradients of rank j's keys
    and values that travel the ring; `zero_grads`) as `_templated_ring_attention_backward` does."""
    cp = len(kvs)
    dq = torch.zeros_like(q, dtype=torch.float32)
    for i in range(cp):
        src = (rank - i) % cp
        k, v = kvs[src]
        if bookkeeping and i < cp - 1:
            torch.cat([k.flatten(), v.flatten()])
        qi, ki, vi, partial = _step_inputs(i, rank, q, k, v)
        o_i, do_i, l_i = (out, dout, lse)
        if partial:  # the second half of the queries: its output, gradient and log-sum-exp
            o_i, do_i, l_i = out.chunk(2, dim=2)[1], dout.chunk(2, dim=2)[1], lse.chunk(2, dim=2)[1].contiguous()
        dq_, dk_, dv_ = flash.backward(do_i, qi, ki, vi, o_i, l_i, i == 0, saved[i])
        if not bookkeeping:
            continue
        dk, dv = acc[src]
        if 0 < i <= rank:
            dk, dv = _partial_update(dk, dk_, 0, True), _partial_update(dv, dv_, 0, True)
        else:
            dk += dk_
            dv += dv_
        acc[src] = (dk, dv)
        torch.cat([dk.flatten(), dv.flatten()])  # the dK, dV send buffer
        if partial:
            dq = _partial_update(dq, dq_, 1, True)
        else:
            dq += dq_
    return dq


def zero_grads(kvs) -> dict:
    """fp32 dK, dV of every rank's keys and values (what the ring accumulates and passes on)."""
    return {j: (torch.zeros_like(k, dtype=torch.float32), torch.zeros_like(v, dtype=torch.float32))
            for j, (k, v) in enumerate(kvs)}  # fmt: skip


def make_inputs(s_local: int, cp: int, shape: tuple[int, int, int], device: str, dtype, seed: int = 0):
    """Queries of every rank (transposed views of (b, s, h, d) memory, as torchtitan's attention
    passes them) and keys and values of every rank (contiguous (b, h, s, d), as the ring makes them)."""
    b, h, d = shape
    g = torch.Generator(device="cpu").manual_seed(seed)

    def one():
        return torch.randn(b, s_local, h, d, generator=g).to(device=device, dtype=dtype).transpose(1, 2)

    qs = [one() for _ in range(cp)]
    kvs = [(one().contiguous(), one().contiguous()) for _ in range(cp)]
    return qs, kvs


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(fn, device: str, target_s: float, deadline: float) -> tuple[float, int]:
    """Median seconds of fn() after one warm-up call, and the repetitions."""
    fn()
    _sync(device)
    t0 = time.perf_counter()
    fn()
    _sync(device)
    first = time.perf_counter() - t0
    reps = max(1, min(10, int(target_s / max(first, 1e-6)), int((deadline - time.perf_counter()) / max(first, 1e-6))))
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), reps


def run_case(s_local: int, cp: int, shape, device: str, dtype, target_s: float, deadline: float) -> list[dict]:
    """Rows of the two end ranks (rank 0 runs every step after the first on half its queries,
    rank cp - 1 on half the received keys): forward and backward, kernels alone and the ring."""
    qs, kvs = make_inputs(s_local, cp, shape, device, dtype)
    rows = []
    for rank in sorted({0, cp - 1}):
        rows += _rank_rows(Flash(device), qs[rank], kvs, rank, shape, target_s, deadline)
    return rows


def _rank_rows(flash: Flash, q, kvs, rank: int, shape, target_s: float, deadline: float) -> list[dict]:
    b, h, d = shape
    cp, s_local, device = len(kvs), q.shape[2], str(q.device)
    out, lse, saved = ring_forward(flash, q, kvs, rank)
    dout = torch.randn_like(out.transpose(1, 2)).transpose(1, 2)
    acc = zero_grads(kvs)
    fwd = functools.partial(ring_forward, flash, q, kvs, rank)
    bwd = functools.partial(ring_backward, flash, dout, q, kvs, out, lse, rank, saved, acc)
    passes = {
        ("fwd", "kernels"): functools.partial(fwd, bookkeeping=False),
        ("fwd", "ring"): fwd,
        ("bwd", "kernels"): functools.partial(bwd, bookkeeping=False),
        ("bwd", "ring"): bwd,
    }
    rows = []
    for (which, what), fn in passes.items():
        if time.perf_counter() > deadline:
            break
        t, reps = timed(fn, device, target_s, deadline)
        flops = ring_flops(b, h, s_local, d, cp, backward=which == "bwd")
        rows.append(dict(s_local=s_local, cp=cp, rank=rank, **{"pass": which}, what=what, time_s=t, reps=reps,
                         flops=flops, tflops=flops / t / 1e12, device=device, dtype=str(q.dtype)))  # fmt: skip
    return rows


def smi_sample() -> dict[str, Any]:
    query = "clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu"
    try:
        text = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits", "-i", "0"],
                              capture_output=True, text=True, timeout=10).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return {}
    values = [x.strip() for x in text.strip().split(",")]
    return dict(zip(query.split(","), values, strict=False)) if len(values) == 5 else {}


def sustain(case, shape, device: str, dtype, seconds: float, out: Path) -> None:
    """Run the case's backward ring for `seconds`, sampling the GPU clock and power each second."""
    s_local, cp = case
    flash = Flash(device)
    qs, kvs = make_inputs(s_local, cp, shape, device, dtype)
    q = qs[cp - 1]
    o, lse, saved = ring_forward(flash, q, kvs, cp - 1)
    dout = torch.randn_like(o)
    acc = zero_grads(kvs)
    with open(out / "clocks.csv", "w", newline="") as f:
        writer = None
        t_end = time.perf_counter() + seconds
        last = 0.0
        while time.perf_counter() < t_end:
            ring_backward(flash, dout, q, kvs, o, lse, cp - 1, saved, acc)
            _sync(device)
            if time.perf_counter() - last >= 1.0:
                last = time.perf_counter()
                row = {"t_s": round(seconds - (t_end - last), 2), **smi_sample()}
                writer = writer or csv.DictWriter(f, fieldnames=list(row))
                if f.tell() == 0:
                    writer.writeheader()
                writer.writerow(row)
                f.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="out")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a CPU check of every path)")
    parser.add_argument("--budget-s", type=float, default=240.0)
    parser.add_argument("--sustain-s", type=float, default=20.0)
    args = parser.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.exit(2, "ring_bench.py: error: --device cuda: no CUDA device; use --device cpu\n")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cases, shape = (QUICK_CASES, QUICK_SHAPE) if args.quick else (FULL_CASES, FULL_SHAPE)
    dtype = torch.float32 if args.device == "cpu" else torch.bfloat16
    deadline = time.perf_counter() + args.budget_s - (0 if args.quick else args.sustain_s)
    with open(out / "ring.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        for case in cases:
            for row in run_case(*case, shape, args.device, dtype, 0.02 if args.quick else 1.0, deadline):
                writer.writerow(row)
                f.flush()
                print(f"s_l={row['s_local']} cp={row['cp']} rank={row['rank']} {row['pass']} {row['what']}: "
                      f"{row['time_s'] * 1e3:.2f} ms, {row['tflops']:.1f} TFLOP/s")  # fmt: skip
            if args.device.startswith("cuda"):
                torch.cuda.empty_cache()
    if args.device.startswith("cuda") and args.sustain_s > 0:
        sustain(cases[-1], shape, args.device, dtype, args.sustain_s, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
