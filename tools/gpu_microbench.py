#!/usr/bin/env python3
"""Micro-benchmarks of one GPU for shardwise's cost model (docs/gpu_microbench.md).

Six sections, in order of value: gemm, attn, host, elementwise, optim, memory. Each writes one CSV
under --out (a row per measurement, flushed as it is measured); device.json describes the machine.
A global time budget is shared out between the sections; when it is spent the script writes what
it has, prints the summary and exits 0. Needs only torch, numpy and the standard library.

    python3 tools/gpu_microbench.py --out "$OUT" --budget-s 270
    python3 tools/gpu_microbench.py --device cpu --quick          # every section, tiny sizes
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import ctypes
import gc
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

torch: Any = None  # imported by a worker only (the parent process never touches the GPU)
SECTIONS = ("gemm", "attn", "host", "elementwise", "optim", "memory")
# Share of the remaining budget each section gets when it starts (rescaled over the sections left).
SHARES = {"gemm": 0.28, "attn": 0.22, "host": 0.12, "elementwise": 0.22, "optim": 0.08, "memory": 0.08}
FATAL_CUDA = ("illegal memory access", "unspecified launch failure", "device-side assert", "misaligned address")
GEMM_OPS = ("fwd", "dgrad", "wgrad")
# op -> (a stored transposed, b stored transposed, expression); weight w[N,K], activation x[M,K], dy[M,N]
GEMM_LAYOUT = {"fwd": (False, True, "x[M,K] @ w[N,K].T"), "dgrad": (False, False, "dy[M,N] @ w[N,K]"),
               "wgrad": (True, False, "dy[M,N].T @ x[M,K]")}  # fmt: skip
ATTN_FLOP_MODEL = "fwd=4*b*s^2*hq*d (x0.5 causal); bwd=2.5*fwd; fwd+bwd=3.5*fwd"
# AdamW in fp32: read param, grad, exp_avg, exp_avg_sq (16 B); write param, exp_avg, exp_avg_sq (12 B)
ADAMW_BYTES_PER_PARAM = 28


# ---------------------------------------------------------------------------------------------
# Sizes


@dataclass(frozen=True)
class Llama:
    """One transformer layer's shape (Llama-3 naming)."""

    name: str
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    head_dim: int


@dataclass(frozen=True)
class Sizes:
    gemm_models: tuple[Llama, ...]
    gemm_tokens: tuple[int, ...]
    gemm_tps: tuple[int, ...]
    gemm_peak_dim: int
    gemm_target_s: float
    attn_seqs: tuple[int, ...]
    attn_tokens: int
    attn_heads: tuple[int, int, int]  # q heads, kv heads, head dim
    attn_target_s: float
    attn_full_max_seq: int  # longer sequences: causal only (what training runs)
    tiny_ops: int
    layer: Llama
    layer_tokens: tuple[int, ...]
    layer_seq: int
    ew_tokens: int
    vocab: int
    copy_bytes: int
    optim_shape: tuple[int, int, int, int, int]  # hidden, ffn, kv dim, vocab, layers
    memory_tokens: int
    max_reps: int


LLAMA3_8B = Llama("llama3-8b", 4096, 14336, 32, 8, 128)
LLAMA3_70B = Llama("llama3-70b", 8192, 28672, 64, 8, 128)

FULL = Sizes(
    gemm_models=(LLAMA3_8B, LLAMA3_70B),
    gemm_tokens=(64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384),
    gemm_tps=(1, 2, 4, 8),
    gemm_peak_dim=8192,
    gemm_target_s=0.015,
    attn_seqs=(1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072),
    attn_tokens=32768,
    attn_heads=(32, 8, 128),
    attn_target_s=0.1,
    attn_full_max_seq=32768,
    tiny_ops=10_000,
    layer=LLAMA3_8B,
    layer_tokens=(256, 512, 1024, 2048, 4096, 8192),
    layer_seq=4096,
    ew_tokens=8192,
    vocab=128256,
    copy_bytes=2 << 30,  # 2 GiB read + 2 GiB written
    optim_shape=(1536, 5376, 384, 32000, 32),  # 291 tensors, 1.08e9 parameters
    memory_tokens=8192,
    max_reps=50,
)
QUICK = Sizes(
    gemm_models=(Llama("tiny", 256, 512, 4, 2, 64),),
    gemm_tokens=(64, 128),
    gemm_tps=(1, 2),
    gemm_peak_dim=256,
    gemm_target_s=0.001,
    attn_seqs=(128, 256),
    attn_tokens=512,
    attn_heads=(4, 2, 32),
    attn_target_s=0.005,
    attn_full_max_seq=128,
    tiny_ops=500,
    layer=Llama("tiny-layer", 128, 256, 4, 2, 32),
    layer_tokens=(32, 64),
    layer_seq=64,
    ew_tokens=256,
    vocab=1000,
    copy_bytes=4 << 20,
    optim_shape=(64, 128, 16, 256, 4),
    memory_tokens=64,
    max_reps=5,
)


# ---------------------------------------------------------------------------------------------
# Run context, CSV sinks, timing


class BudgetSpent(Exception):
    """The section's (or the run's) time is up."""


@dataclass
class Ctx:
    device: str  # where tensors go
    cuda: bool  # whether timings use CUDA events and the CUDA-only measurements run
    sizes: Sizes
    out: Path
    t_end: float
    compile_timeout_s: float
    deadline: float = math.inf
    fatal: str = ""
    flush_buf: Any = None
    gqa_native: bool = False
    info: dict = field(default_factory=dict)
    summary: dict = field(default_factory=dict)

    def left_s(self) -> float:
        return min(self.deadline, self.t_end) - time.perf_counter()

    def check(self) -> None:
        if self.fatal:
            raise BudgetSpent(f"CUDA context lost: {self.fatal}")
        if self.left_s() <= 0:
            raise BudgetSpent("time budget spent")

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()


class Sink:
    """One CSV file; every row is flushed as it is written and kept for the summary."""

    def __init__(self, path: Path, fields: list[str], append: bool = False):
        self.fields = [*fields, "status", "error"]
        self.rows: list[dict] = []
        header = not (append and path.exists() and path.stat().st_size > 0)
        self._file = path.open("a" if append else "w", newline="")
        self._writer = csv.DictWriter(self._file, fieldnames=self.fields, extrasaction="ignore")
        if header:
            self._writer.writeheader()
        self._file.flush()

    def row(self, **values) -> dict:
        values.setdefault("status", "ok")
        clean = {k: (_fmt(v) if isinstance(v, float) else v) for k, v in values.items()}
        self._writer.writerow(clean)
        self._file.flush()
        self.rows.append(values)
        return values

    def ok(self) -> list[dict]:
        return [r for r in self.rows if r.get("status") == "ok"]

    def close(self) -> None:
        self._file.close()


def columns(names: str) -> list[str]:
    return names.split(",")


def _fmt(x: float) -> str:
    return f"{x:.6g}"


def attempt(ctx: Ctx, sink: Sink, base: dict, fn) -> dict | None:
    """Run one measurement; a failure becomes an `error` row and the run goes on."""
    ctx.check()
    try:
        values = fn()
    except BudgetSpent:
        raise
    except Exception as exc:
        message = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        if any(s in message for s in FATAL_CUDA):
            ctx.fatal = message
        sink.row(**base, status="error", error=message)
        free_memory(ctx)
        return None
    return sink.row(**base, **values)


def free_memory(ctx: Ctx) -> None:
    gc.collect()
    if ctx.cuda:
        with contextlib.suppress(Exception):
            torch.cuda.empty_cache()


def measure(ctx: Ctx, fn, *, target_s: float, min_reps: int = 3, max_reps: int | None = None, flush=False) -> dict:
    """Median time of fn() (CUDA events on a GPU, wall clock on a CPU) after a warm-up.

    The first call (allocations, cuBLAS heuristics, cuDNN plans) is not counted; the second gives
    the estimate that sets the number of repetitions (target_s of timed work, capped by the time
    left). With flush, a 256 MiB buffer is overwritten before every repetition so that no operand
    is still in L2."""
    max_reps = max_reps or ctx.sizes.max_reps
    t0 = time.perf_counter()
    fn()
    ctx.sync()
    first_s = time.perf_counter() - t0
    estimate_s = first_s if first_s > 0.2 else _time_reps(ctx, fn, 1, flush)[0]
    min_reps = 1 if estimate_s > 1.0 else min_reps  # a call over a second varies little
    reps = max(min_reps, min(max_reps, int(target_s / max(estimate_s, 1e-7))))
    left_s = ctx.left_s()
    if math.isfinite(left_s):
        reps = max(1, min(reps, int(0.9 * left_s / max(estimate_s, 1e-7))))
    times = _time_reps(ctx, fn, reps, flush)
    return {"time_s": statistics.median(times), "min_s": min(times), "reps": reps}


def _time_reps(ctx: Ctx, fn, reps: int, flush: bool) -> list[float]:
    if not ctx.cuda:
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return times
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    gpu_sleep(ctx, 1e-3)  # let the host queue work ahead so that launch gaps are not timed
    for start, end in zip(starts, ends, strict=True):
        if flush and ctx.flush_buf is not None:
            ctx.flush_buf.zero_()
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends, strict=True)]


def gpu_sleep(ctx: Ctx, seconds: float) -> None:
    """Keep the GPU busy for about `seconds` (torch.cuda._sleep spins for a number of clock cycles)."""
    if ctx.cuda:
        with contextlib.suppress(Exception):
            torch.cuda._sleep(int(seconds * ctx.info.get("sm_clock_hz", 2e9)))


def predict_too_long(ctx: Ctx, predicted_s: float, runs: int = 3) -> bool:
    return predicted_s * runs > ctx.left_s()


# ---------------------------------------------------------------------------------------------
# Device description


SMI_FIELDS = (
    "name,driver_version,memory.total,memory.used,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,"
    "power.draw,power.limit,temperature.gpu,pstate"
)


SMI_FIELDS_MINIMAL = "name,memory.total,memory.used,clocks.sm,clocks.max.sm"
_SMI = {"broken": False}  # set after a timeout: nvidia-smi is not asked again in this process


def nvidia_smi() -> dict:
    """The first GPU's nvidia-smi fields (units as nvidia-smi prints them: MiB, MHz, W, C); a field
    set this driver refuses falls back to a minimal one; {"error": ...} without nvidia-smi."""
    if _SMI["broken"]:
        return {"error": "skipped: nvidia-smi timed out before"}
    result: dict = {}
    for fields in (SMI_FIELDS, SMI_FIELDS_MINIMAL):
        try:
            proc = subprocess.run(
                ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits", "-i", "0"],
                capture_output=True,
                text=True,
                timeout=10,
            )
        except subprocess.TimeoutExpired:
            _SMI["broken"] = True
            return {"error": "nvidia-smi timed out"}
        except Exception as exc:
            return {"error": f"{type(exc).__name__}: {exc}"[:200]}
        if proc.returncode == 0 and proc.stdout.strip():
            values = [v.strip() for v in proc.stdout.strip().splitlines()[0].split(",")]
            return dict(zip(fields.split(","), values, strict=False))
        result = {"error": (proc.stdout + proc.stderr).strip()[:200]}
    return result


def cublaslt_version() -> int | None:
    """cublasLtGetVersion() of the libcublasLt this process has loaded (read from /proc/self/maps)."""
    try:
        paths = {line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines() if "libcublasLt" in line}
        lib = ctypes.CDLL(sorted(paths)[0])
        lib.cublasLtGetVersion.restype = ctypes.c_size_t
        return int(lib.cublasLtGetVersion())
    except Exception:
        return None


def describe_device(ctx: Ctx) -> dict:
    """Versions, the CPU, and on a GPU its properties and nvidia-smi's clocks and power."""
    info: dict = {
        "device": ctx.device,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "quick": ctx.sizes is QUICK,
    }
    with contextlib.suppress(Exception):
        import numpy

        info["numpy"] = numpy.__version__
    if not ctx.cuda:
        return info
    a = torch.randn(256, 256, device=ctx.device, dtype=torch.bfloat16)
    (a @ a).sum().item()  # loads cuBLAS(Lt), whose version is read below
    props = torch.cuda.get_device_properties(0)
    info.update(
        name=props.name,
        capability=f"{props.major}.{props.minor}",
        sm_count=props.multi_processor_count,
        total_memory_bytes=props.total_memory,
        l2_cache_bytes=getattr(props, "L2_cache_size", None),
        cuda=torch.version.cuda,
        cudnn=_try(torch.backends.cudnn.version),
        cublaslt=cublaslt_version(),
        nccl=_try(lambda: ".".join(map(str, torch.cuda.nccl.version()))),
        bf16_reduced_precision_reduction=_try(
            lambda: torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction
        ),
        smi=nvidia_smi(),
    )
    max_mhz = _float(info["smi"].get("clocks.max.sm"))
    info["sm_clock_hz"] = (max_mhz or 1980.0) * 1e6
    return info


def context_memory_stages(ctx: Ctx, smi_before: dict) -> list[dict]:
    """GPU memory in use before this process touches CUDA (nvidia-smi), after the context exists,
    after the first cuBLAS GEMM (handle and workspace) and after the first SDPA call."""
    stages = [("before_init", None, None, None, smi_before.get("memory.used"))]
    torch.cuda.init()
    torch.zeros(1, device=ctx.device)
    stages.append(_memory_stage(ctx, "after_init"))
    a = torch.randn(1024, 1024, device=ctx.device, dtype=torch.bfloat16)
    (a @ a).sum().item()
    stages.append(_memory_stage(ctx, "after_first_matmul"))
    with contextlib.suppress(Exception):
        q = torch.randn(1, 8, 256, 128, device=ctx.device, dtype=torch.bfloat16)
        torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True).sum().item()
    stages.append(_memory_stage(ctx, "after_first_sdpa"))
    return [dict(zip(STAGE_KEYS, s, strict=True)) for s in stages]


STAGE_KEYS = ("stage", "free_bytes", "total_bytes", "reserved_bytes", "smi_used_mib")


def _memory_stage(ctx: Ctx, stage: str) -> tuple:
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    return (stage, free, total, torch.cuda.memory_reserved(), nvidia_smi().get("memory.used"))


def _cpu_model() -> str:
    with contextlib.suppress(Exception):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def _try(fn):
    try:
        return fn()
    except Exception:
        return None


def _float(text) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


# ---------------------------------------------------------------------------------------------
# 1. GEMM


def layer_gemms(model: Llama, tp: int) -> list[tuple[str, int, int]]:
    """(layer, N, K) of the four linear layers of one transformer layer split Megatron-style over tp
    ranks: qkv and fc1 (gate and up fused) column-parallel, proj and fc2 row-parallel."""
    d = model.head_dim
    return [
        ("qkv", (model.heads + 2 * model.kv_heads) * d // tp, model.hidden),
        ("proj", model.hidden, model.heads * d // tp),
        ("fc1", 2 * model.ffn // tp, model.hidden),
        ("fc2", model.hidden, model.ffn // tp),
    ]


def gemm_mnk(op: str, tokens: int, n_out: int, k_in: int) -> tuple[int, int, int]:
    """The GEMM (m, n, k: output rows, output columns, reduction) of a linear layer y = x w^T with
    x[M,K], w[N,K]: forward y[M,N]; input gradient dx = dy w, [M,K]; weight gradient dw = dy^T x, [N,K]."""
    return {"fwd": (tokens, n_out, k_in), "dgrad": (tokens, k_in, n_out), "wgrad": (n_out, k_in, tokens)}[op]


def gemm_cases(sizes: Sizes) -> list[dict]:
    """Every layer GEMM, small token counts first (where the model errs most)."""
    cases = []
    for tokens in sizes.gemm_tokens:
        for model in sizes.gemm_models:
            for tp in sizes.gemm_tps:
                for layer, n_out, k_in in layer_gemms(model, tp):
                    for op in GEMM_OPS:
                        m, n, k = gemm_mnk(op, tokens, n_out, k_in)
                        cases.append(dict(model=model.name, layer=layer, tp=tp, tokens=tokens, op=op, m=m, n=n, k=k))
    return cases


class GemmBench:
    """Flat operand buffers, viewed at each shape (no allocation inside the timings)."""

    def __init__(self, ctx: Ctx, cases: list[dict], peak_dim: int):
        self.ctx = ctx
        sq = peak_dim * peak_dim
        size_a = max([sq] + [c["m"] * c["k"] for c in cases])
        size_b = max([sq] + [c["n"] * c["k"] for c in cases])
        size_c = max([sq] + [c["m"] * c["n"] for c in cases])
        kw = dict(device=ctx.device, dtype=torch.bfloat16)
        self.a = torch.randn(size_a, **kw)
        self.b = torch.randn(size_b, **kw)
        self.c = torch.empty(size_c, **kw)
        self.a8 = self.b8 = self.scale = None

    def enable_fp8(self) -> None:
        self.a8 = self.a.to(torch.float8_e4m3fn)
        self.b8 = self.b.to(torch.float8_e4m3fn)
        self.scale = torch.ones((), device=self.ctx.device, dtype=torch.float32)

    def bf16(self, op: str, m: int, n: int, k: int):
        a_t, b_t, _ = GEMM_LAYOUT[op]
        a = self.a[: m * k].view(k, m).t() if a_t else self.a[: m * k].view(m, k)
        b = self.b[: n * k].view(n, k).t() if b_t else self.b[: n * k].view(k, n)
        c = self.c[: m * n].view(m, n)
        return lambda: torch.mm(a, b, out=c)

    def fp8(self, m: int, n: int, k: int, fast_accum: bool):
        """cuBLASLt FP8 takes only a[m,k] row-major times b[n,k]^T ("TN"); Transformer Engine makes
        the transposed copies it needs for dgrad and wgrad with its cast-transpose kernels, and
        accumulates the forward GEMM in fast mode, dgrad and wgrad in split (2x) accumulation
        (transformer_engine/pytorch/module/base.py: _2X_ACC_FPROP False, _2X_ACC_DGRAD/WGRAD True)."""
        a = self.a8[: m * k].view(m, k)
        b = self.b8[: n * k].view(n, k).t()
        s = self.scale
        return lambda: torch._scaled_mm(a, b, scale_a=s, scale_b=s, out_dtype=torch.bfloat16, use_fast_accum=fast_accum)


GEMM_FIELDS = columns("dtype,kind,model,layer,tp,tokens,op,m,n,k,layout,flops,time_s,min_s,reps,tflops,frac_of_peak")


def run_gemm(ctx: Ctx, sink: Sink) -> None:
    sz = ctx.sizes
    cases = gemm_cases(sz)
    bench = GemmBench(ctx, cases, sz.gemm_peak_dim)
    fp8 = ctx.cuda and hasattr(torch, "float8_e4m3fn") and hasattr(torch, "_scaled_mm")
    if fp8:
        try:
            bench.enable_fp8()
        except Exception as exc:
            sink.row(dtype="fp8", kind="setup", status="error", error=f"{type(exc).__name__}: {exc}"[:300])
            fp8 = False
    peak: dict[str, float] = {}
    d = sz.gemm_peak_dim
    for dtype in ("bf16", "fp8") if fp8 else ("bf16",):
        fn = bench.bf16("fwd", d, d, d) if dtype == "bf16" else bench.fp8(d, d, d, fast_accum=True)
        base = dict(dtype=dtype, kind="peak", op="square", m=d, n=d, k=d, flops=2 * d**3, layout="a[m,k] @ b[n,k].T")
        row = attempt(ctx, sink, base, lambda fn=fn: _gemm_values(ctx, fn, 2 * d**3, None, target_s=0.2))
        if row:
            peak[dtype] = row["tflops"]
    if "fp8" not in peak:
        fp8 = False
    for case in cases:
        m, n, k = case["m"], case["n"], case["k"]
        flops = 2 * m * n * k
        kernels = [("bf16", bench.bf16(case["op"], m, n, k), GEMM_LAYOUT[case["op"]][2])]
        if fp8:
            fast = case["op"] == "fwd"
            kernels.append(("fp8", bench.fp8(m, n, k, fast), f"fp8 a[m,k] @ b[n,k].T fast_accum={fast}"))
        for dtype, fn, layout in kernels:
            base = dict(dtype=dtype, kind="layer", layout=layout, flops=flops, **case)
            p = peak.get(dtype)
            attempt(ctx, sink, base, lambda fn=fn, p=p, f=flops: _gemm_values(ctx, fn, f, p, sz.gemm_target_s))
    del bench
    free_memory(ctx)


def _gemm_values(ctx: Ctx, fn, flops: int, peak_tflops: float | None, target_s: float) -> dict:
    t = measure(ctx, fn, target_s=target_s, flush=ctx.cuda)
    tflops = flops / t["time_s"] / 1e12
    return {**t, "tflops": tflops, "frac_of_peak": tflops / peak_tflops if peak_tflops else ""}


# ---------------------------------------------------------------------------------------------
# 2. Attention


ATTN_FIELDS = columns(
    "backend,causal,mode,batch,seq,heads_q,heads_kv,head_dim,gqa,flops,flop_model,time_s,min_s,reps,tflops"
)


def attn_flops(batch: int, seq: int, heads_q: int, head_dim: int, causal: bool, mode: str) -> float:
    """FLOPs of attention: QK^T and PV, 2*b*hq*s^2*d each, half of it under a causal mask; the
    backward pass counted as 2.5 times the forward (FlashAttention-2, Dao 2023, §4)."""
    fwd = 4 * batch * seq * seq * heads_q * head_dim * (0.5 if causal else 1.0)
    return fwd * (3.5 if mode == "fwd+bwd" else 1.0)


def run_attn(ctx: Ctx, sink: Sink) -> None:
    sz = ctx.sizes
    F = torch.nn.functional
    from torch.nn.attention import SDPBackend, sdpa_kernel

    hq, hkv, d = sz.attn_heads
    backends = [b for b in ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION") if hasattr(SDPBackend, b)]
    rate: dict[tuple, float] = {}  # last TFLOP/s per (backend, causal, mode), to skip what cannot finish
    for seq in sz.attn_seqs:
        batch = max(1, sz.attn_tokens // seq)
        for name in backends:
            backend = getattr(SDPBackend, name)
            gqa = _gqa_mode(ctx, backend)
            try:
                ctx.check()
                kw = dict(device=ctx.device, dtype=torch.bfloat16, requires_grad=True)
                q = torch.randn(batch, hq, seq, d, **kw)
                k = torch.randn(batch, hkv if gqa == "native" else hq, seq, d, **kw)
                v = torch.randn_like(k, requires_grad=True)
                dout = torch.randn_like(q)
            except BudgetSpent:
                raise
            except Exception as exc:
                sink.row(backend=name, seq=seq, batch=batch, status="error", error=f"{type(exc).__name__}: {exc}"[:300])
                free_memory(ctx)
                continue
            for causal in (True, False) if seq <= sz.attn_full_max_seq else (True,):
                for mode in ("fwd", "fwd+bwd"):
                    flops = attn_flops(batch, seq, hq, d, causal, mode)
                    base = dict(backend=name, causal=causal, mode=mode, batch=batch, seq=seq, heads_q=hq, heads_kv=hkv,
                                head_dim=d, gqa=gqa, flops=flops, flop_model=ATTN_FLOP_MODEL)  # fmt: skip
                    key = (name, causal, mode)
                    if predict_too_long(ctx, flops / (rate.get(key, 100.0 if ctx.cuda else 0.01) * 1e12)):
                        sink.row(**base, status="skipped", error="predicted to exceed the time left")
                        continue

                    def fn(causal=causal, mode=mode, q=q, k=k, v=v, dout=dout, backend=backend, gqa=gqa):
                        with sdpa_kernel([backend]):
                            extra = {"enable_gqa": True} if gqa == "native" and hkv != hq else {}
                            o = F.scaled_dot_product_attention(q, k, v, is_causal=causal, **extra)
                            if mode == "fwd+bwd":
                                torch.autograd.grad(o, (q, k, v), dout)

                    row = attempt(ctx, sink, base, lambda fn=fn, flops=flops: _attn_values(ctx, fn, flops))
                    if row:
                        rate[key] = row["tflops"]
            del q, k, v, dout
            free_memory(ctx)


def _gqa_mode(ctx: Ctx, backend) -> str:
    """'native' if this backend takes fewer kv heads (enable_gqa=True), else 'expanded' (kv repeated
    to the q heads before the timing, as HF's repeat_kv does)."""
    from torch.nn.attention import sdpa_kernel

    try:
        kw = dict(device=ctx.device, dtype=torch.bfloat16)
        q = torch.randn(1, 4, 128, 64, **kw, requires_grad=True)
        k = torch.randn(1, 2, 128, 64, **kw, requires_grad=True)
        with sdpa_kernel([backend]):
            torch.nn.functional.scaled_dot_product_attention(q, k, k, is_causal=True, enable_gqa=True).sum().backward()
        return "native"
    except Exception:
        return "expanded"


def _attn_values(ctx: Ctx, fn, flops: float) -> dict:
    t = measure(ctx, fn, target_s=ctx.sizes.attn_target_s, min_reps=2, max_reps=20)
    return {**t, "tflops": flops / t["time_s"] / 1e12}


# ---------------------------------------------------------------------------------------------
# The eager Llama layer (host overhead and memory sections)


def rms_norm_hf(x, w, eps: float = 1e-5):
    """HF LlamaRMSNorm / torchtitan's eager RMSNorm: x * rsqrt(mean(x^2) + eps) * w, in fp32."""
    xf = x.float()
    return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope(x, cos, sin):
    """HF apply_rotary_pos_emb."""
    return x * cos + rotate_half(x) * sin


def rope_tables(ctx: Ctx, seq: int, head_dim: int):
    inv = 1.0 / (500000.0 ** (torch.arange(0, head_dim, 2, device=ctx.device).float() / head_dim))
    angles = torch.outer(torch.arange(seq, device=ctx.device).float(), inv)
    emb = torch.cat((angles, angles), dim=-1)
    return emb.cos().to(torch.bfloat16), emb.sin().to(torch.bfloat16)


def make_layer(ctx: Ctx, cfg: Llama) -> dict:
    h, d = cfg.hidden, cfg.head_dim
    shapes = {
        "norm1": (h,),
        "w_qkv": ((cfg.heads + 2 * cfg.kv_heads) * d, h),
        "w_o": (h, cfg.heads * d),
        "norm2": (h,),
        "w_fc1": (2 * cfg.ffn, h),
        "w_fc2": (h, cfg.ffn),
    }
    params = {}
    for name, shape in shapes.items():
        p = torch.ones(shape) if len(shape) == 1 else torch.randn(shape) * 0.02
        params[name] = p.to(device=ctx.device, dtype=torch.bfloat16).requires_grad_()
    return params


def layer_forward(ctx: Ctx, cfg: Llama, p: dict, x, cos, sin):
    """One Llama layer written as torchtitan/HF write it in eager PyTorch."""
    F = torch.nn.functional
    b, s, _ = x.shape
    hq, hkv, d = cfg.heads, cfg.kv_heads, cfg.head_dim
    y = rms_norm_hf(x, p["norm1"])
    q, k, v = F.linear(y, p["w_qkv"]).split([hq * d, hkv * d, hkv * d], dim=-1)
    q = rope(q.view(b, s, hq, d).transpose(1, 2), cos, sin)
    k = rope(k.view(b, s, hkv, d).transpose(1, 2), cos, sin)
    v = v.view(b, s, hkv, d).transpose(1, 2)
    if ctx.gqa_native:
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    else:
        k, v = k.repeat_interleave(hq // hkv, dim=1), v.repeat_interleave(hq // hkv, dim=1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    x = x + F.linear(a.transpose(1, 2).reshape(b, s, hq * d), p["w_o"])
    gate, up = F.linear(rms_norm_hf(x, p["norm2"]), p["w_fc1"]).chunk(2, dim=-1)
    return x + F.linear(F.silu(gate) * up, p["w_fc2"])


def layer_step(ctx: Ctx, cfg: Llama, p: dict, tokens: int, seq_max: int):
    """A closure running the layer's forward and backward on `tokens` tokens (batch x seq)."""
    seq = min(tokens, seq_max)
    batch = max(1, tokens // seq)
    x = torch.randn(batch, seq, cfg.hidden, device=ctx.device, dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn_like(x)
    cos, sin = rope_tables(ctx, seq, cfg.head_dim)
    params = list(p.values())

    def step():
        for t in params:
            t.grad = None  # optimizer.zero_grad(set_to_none=True)
        x.grad = None
        layer_forward(ctx, cfg, p, x, cos, sin).backward(dy)

    return step, batch, seq


def layer_flops(cfg: Llama, batch: int, seq: int) -> float:
    """Forward + backward FLOPs: 6 per weight per token (Kaplan et al. 2020) plus causal attention."""
    linear = sum(n * k for _, n, k in layer_gemms(cfg, 1))
    return 6 * batch * seq * linear + attn_flops(batch, seq, cfg.heads, cfg.head_dim, True, "fwd+bwd")


# ---------------------------------------------------------------------------------------------
# 3. Host / launch overhead


HOST_FIELDS = columns(
    "kind,name,tokens,batch,seq,n_ops,wall_s,host_issue_s,gpu_s,graph_s,kernel_sum_s,kernel_busy_s,kernel_span_s,"
    "n_kernels,n_memops,flops,tflops,host_gap_s"
)


def run_host(ctx: Ctx, sink: Sink) -> None:
    sz = ctx.sizes
    dev = ctx.device
    one = torch.zeros(1, device=dev)
    small = torch.randn(64, 64, device=dev)
    ga = torch.randn(1, device=dev, requires_grad=True)
    tiny = {
        "add_ (1 element, in place)": lambda: one.add_(1),
        "add (1 element, new tensor)": lambda: one + 1,
        "mm 64x64 fp32": lambda: torch.mm(small, small),
        "mul with autograd (1 element)": lambda: ga * 2,
    }
    n = sz.tiny_ops
    for name, fn in tiny.items():
        attempt(ctx, sink, dict(kind="tiny_op", name=name, n_ops=n), lambda fn=fn: _tiny_op(ctx, fn, n))
    cfg = sz.layer
    params = make_layer(ctx, cfg)
    for tokens in sz.layer_tokens:
        attempt(ctx, sink, dict(kind="layer", name=f"{cfg.name} eager fwd+bwd", tokens=tokens),
                lambda tokens=tokens: _layer_host(ctx, cfg, params, tokens))  # fmt: skip
        free_memory(ctx)
    if ctx.cuda:  # last: a failed stream capture can leave the context unusable
        for name, fn in tiny.items():
            if "autograd" not in name:
                base = dict(kind="tiny_op_graph", name=name, n_ops=200)
                attempt(ctx, sink, base, lambda fn=fn: {"graph_s": _graph_time(ctx, fn, 200)})


def _tiny_op(ctx: Ctx, fn, n: int) -> dict:
    """Wall time per op over n back-to-back ops; host issue time per op while the GPU sleeps (no
    back-pressure); GPU time per op from CUDA events around the n ops (gaps included)."""
    for _ in range(100):
        fn()
    ctx.sync()
    t0 = time.perf_counter()
    if ctx.cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
    for _ in range(n):
        fn()
    if ctx.cuda:
        end.record()
    ctx.sync()
    values = {"wall_s": (time.perf_counter() - t0) / n}
    if not ctx.cuda:
        return values
    values["gpu_s"] = start.elapsed_time(end) / 1e3 / n
    burst = 256  # fewer than the launch queue holds
    gpu_sleep(ctx, 0.05)
    t0 = time.perf_counter()
    for _ in range(burst):
        fn()
    values["host_issue_s"] = (time.perf_counter() - t0) / burst
    ctx.sync()
    return values


def _graph_time(ctx: Ctx, fn, n: int) -> float:
    """GPU time per op of n ops captured in one CUDA graph and replayed: no launch cost."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(n):
            fn()
    g.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        g.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / (5 * n)


def _layer_host(ctx: Ctx, cfg: Llama, params: dict, tokens: int) -> dict:
    """Eager wall time per fwd+bwd (iterations back to back), the host's issue time while the GPU
    sleeps, and the kernels of one iteration from torch.profiler: their count and summed duration.
    host_gap_s = wall - kernel sum: the time the GPU waits for the host."""
    step, batch, seq = layer_step(ctx, cfg, params, tokens, ctx.sizes.layer_seq)
    flops = layer_flops(cfg, batch, seq)
    t = measure(ctx, step, target_s=0.3, min_reps=3, max_reps=ctx.sizes.max_reps)
    n = max(1, t["reps"])
    ctx.sync()
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    ctx.sync()
    wall = (time.perf_counter() - t0) / n
    values = {"batch": batch, "seq": seq, "n_ops": n, "wall_s": wall, "gpu_s": t["time_s"], "flops": flops,
              "tflops": flops / wall / 1e12}  # fmt: skip
    if ctx.cuda:
        gpu_sleep(ctx, max(0.05, 3 * wall))
        t0 = time.perf_counter()
        step()
        values["host_issue_s"] = time.perf_counter() - t0
        ctx.sync()
        values.update(_profile_kernels(ctx, step))
        if "kernel_sum_s" in values:
            values["host_gap_s"] = wall - values["kernel_sum_s"]
    return values


def _profile_kernels(ctx: Ctx, fn) -> dict:
    """Kernels of one call of fn from torch.profiler (CUPTI): count, summed and merged busy time."""
    from torch.profiler import ProfilerActivity, profile

    try:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        events = [e for e in prof.events() if str(getattr(e, "device_type", "")).endswith("CUDA")]
    except Exception as exc:
        return {"error": f"profiler: {type(exc).__name__}: {exc}"[:200]}
    mem = [e for e in events if "memcpy" in e.name.lower() or "memset" in e.name.lower()]
    kernels = [e for e in events if e not in mem]
    spans = sorted((e.time_range.start, e.time_range.end) for e in kernels)
    busy, last = 0.0, -math.inf
    for start, end in spans:
        busy += max(0.0, end - max(start, last))
        last = max(last, end)
    return {
        "n_kernels": len(kernels),
        "n_memops": len(mem),
        "kernel_sum_s": sum(e - s for s, e in spans) / 1e6,
        "kernel_busy_s": busy / 1e6,
        "kernel_span_s": (spans[-1][1] - spans[0][0]) / 1e6 if spans else 0.0,
    }


# ---------------------------------------------------------------------------------------------
# 4. Element-wise and memory-bound work


EW_FIELDS = columns("op,pass,dtype,tokens,width,bytes,bytes_model,time_s,min_s,reps,bytes_per_s,frac_of_copy,compiled")


def elementwise_ops(ctx: Ctx) -> list[tuple]:
    """(name, dtype, fn, inputs needing gradients, width, fwd bytes, bwd bytes or None, bytes model)."""
    sz = ctx.sizes
    F = torch.nn.functional
    M, cfg, V = sz.ew_tokens, sz.layer, sz.vocab
    h, ffn, hq, hkv, d = cfg.hidden, cfg.ffn, cfg.heads, cfg.kv_heads, cfg.head_dim
    bf = torch.bfloat16

    def t(*shape, dtype=bf, grad=True):
        return torch.randn(*shape, device=ctx.device, dtype=dtype).requires_grad_(grad)

    x, r, w, b = t(M, h), t(M, h), t(h), t(h)
    n = M * h
    ops = [
        ("rmsnorm_hf", bf, lambda: rms_norm_hf(x, w), [x, w], h, 4 * n, 6 * n, "fwd r+w x; bwd r x,dy w dx"),
        ("rmsnorm_residual_eager", bf, lambda: _rms_res(x, r, w), [x, r, w], h, 8 * n, 8 * n,
         "fwd r x,r w h,y; bwd r dy,dh,h w dx"),
        ("layer_norm", bf, lambda: F.layer_norm(x, (h,), w, b), [x, w, b], h, 4 * n, 6 * n,
         "fwd r+w x; bwd r x,dy w dx"),
        ("residual_add", bf, lambda: x + r, [], h, 6 * n, None, "fwd r x,r w y (bwd passes the gradient on)"),
        ("dropout_p0.1", bf, lambda: F.dropout(x, 0.1, training=True), [x], h, 5 * n, 5 * n,
         "fwd r x w y,mask(1 B); bwd r dy,mask w dx"),
    ]  # fmt: skip
    if hasattr(F, "rms_norm"):
        ops.insert(1, ("rms_norm_fused", bf, lambda: F.rms_norm(x, (h,), w, 1e-5), [x, w], h, 4 * n, 6 * n,
                       "fwd r+w x; bwd r x,dy w dx"))  # fmt: skip
    q, k = t(1, hq, M, d), t(1, hkv, M, d)
    cos, sin = rope_tables(ctx, M, d)
    nr = M * (hq + hkv) * d
    ops.append(("rope_hf_q_and_k", bf, lambda: (rope(q, cos, sin), rope(k, cos, sin)), [q, k], (hq + hkv) * d,
                4 * nr, 4 * nr, "fwd r+w q,k; bwd r+w dq,dk"))  # fmt: skip
    ga, ua = t(M, ffn), t(M, ffn)
    ops.append(("swiglu", bf, lambda: F.silu(ga) * ua, [ga, ua], ffn, 6 * M * ffn, 10 * M * ffn,
                "fwd r a,b w y; bwd r a,b,dy w da,db"))  # fmt: skip
    targets = torch.randint(0, V, (M,), device=ctx.device)
    for dtype, size in ((bf, 2), (torch.float32, 4)):
        logits = t(M, V, dtype=dtype)
        ops.append((f"cross_entropy_v{V}", dtype, lambda lg=logits: F.cross_entropy(lg, targets), [logits], V,
                    size * M * V, 2 * size * M * V, "fwd r logits; bwd r logits w dlogits"))  # fmt: skip
    return ops


def _rms_res(x, r, w):
    h = x + r
    return rms_norm_hf(h, w), h


def run_elementwise(ctx: Ctx, sink: Sink) -> None:
    copy_bw = _copy_bandwidth(ctx, sink)
    ctx.summary["copy_bytes_per_s"] = copy_bw
    ops = elementwise_ops(ctx)
    for name, dtype, fn, grads, width, fwd_bytes, bwd_bytes, model in ops:
        _measure_op(ctx, sink, name, dtype, fn, grads, width, fwd_bytes, bwd_bytes, model, copy_bw, False)
    del ops
    free_memory(ctx)


def _copy_bandwidth(ctx: Ctx, sink: Sink) -> float | None:
    """Device-to-device copy of copy_bytes: read and write, 2 x copy_bytes moved."""
    nbytes = ctx.sizes.copy_bytes
    src = torch.randn(nbytes // 2, device=ctx.device, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    base = dict(op="copy", dtype="bfloat16", tokens="", width="", bytes=2 * nbytes, bytes_model="r+w src",
                compiled=False, **{"pass": "fwd"})  # fmt: skip
    row = attempt(ctx, sink, base, lambda: _bw_values(ctx, lambda: dst.copy_(src), 2 * nbytes, None, 0.2))
    return row["bytes_per_s"] if row else None


def _measure_op(ctx, sink, name, dtype, fn, grads, width, fwd_bytes, bwd_bytes, model, copy_bw, compiled) -> None:
    """Forward alone; backward alone (torch.autograd.grad on a retained graph: no accumulation)."""
    base = dict(op=name, dtype=str(dtype).replace("torch.", ""), tokens=ctx.sizes.ew_tokens, width=width,
                bytes_model=model, compiled=compiled)  # fmt: skip
    attempt(ctx, sink, {**base, "pass": "fwd", "bytes": fwd_bytes},
            lambda: _bw_values(ctx, fn, fwd_bytes, copy_bw, 0.05))  # fmt: skip
    if bwd_bytes is None:
        return

    def backward_values():
        out = fn()
        outs = out if isinstance(out, tuple) else (out,)
        douts = [torch.randn_like(o) for o in outs]
        return _bw_values(
            ctx, lambda: torch.autograd.grad(outs, grads, douts, retain_graph=True), bwd_bytes, copy_bw, 0.05
        )

    attempt(ctx, sink, {**base, "pass": "bwd", "bytes": bwd_bytes}, backward_values)


def _bw_values(ctx: Ctx, fn, nbytes: int, copy_bw: float | None, target_s: float) -> dict:
    t = measure(ctx, fn, target_s=target_s, min_reps=3)
    bw = nbytes / t["time_s"]
    return {**t, "bytes_per_s": bw, "frac_of_copy": bw / copy_bw if copy_bw else ""}


COMPILED_OPS = ("rmsnorm_residual", "swiglu")
COMPILE_SLACK_S = 25.0  # a compile worker's start and timings, on top of --compile-timeout-s


def run_compiled(ctx: Ctx, sink: Sink, name: str) -> None:
    """One torch.compile'd op (residual + RMSNorm, or SwiGLU) in its own worker: the parent kills it
    if compiling and timing it takes longer than --compile-timeout-s + COMPILE_SLACK_S, and a
    compile (forward and backward) longer than --compile-timeout-s is reported, not timed."""
    sz = ctx.sizes
    F = torch.nn.functional
    M, h, ffn = sz.ew_tokens, sz.layer.hidden, sz.layer.ffn
    n = M * h

    def t(*shape):
        return torch.randn(*shape, device=ctx.device, dtype=torch.bfloat16, requires_grad=True)

    if name == "rmsnorm_residual":
        fn, args, width = _rms_res, (t(M, h), t(M, h), t(h)), h
        fwd_bytes, bwd_bytes, model = 8 * n, 8 * n, "fwd r x,r w h,y; bwd r dy,dh,h w dx"
    else:
        fn, args, width = (lambda a, b: F.silu(a) * b), (t(M, ffn), t(M, ffn)), ffn
        fwd_bytes, bwd_bytes, model = 6 * M * ffn, 10 * M * ffn, "fwd r a,b w y; bwd r a,b,dy w da,db"
    base = dict(op=name, dtype="bfloat16", tokens=M, width=width, bytes_model=model, compiled=True)
    base["pass"] = "compile"
    import torch._functorch.config as functorch_config

    functorch_config.donated_buffer = False  # donated buffers forbid retain_graph, which the backward timing needs
    t0 = time.perf_counter()
    try:
        compiled = torch.compile(fn, dynamic=False)
        _compile_warmup(ctx, compiled, args)
    except Exception as exc:
        sink.row(**base, time_s=time.perf_counter() - t0, status="error", error=f"{type(exc).__name__}: {exc}"[:300])
        return
    compile_s = time.perf_counter() - t0
    if compile_s > ctx.compile_timeout_s:
        sink.row(**base, time_s=compile_s, status="skipped", error=f"compile took {compile_s:.0f} s, over the time box")
        return
    sink.row(**base, time_s=compile_s, reps=1)
    _measure_op(ctx, sink, name, torch.bfloat16, lambda: compiled(*args), list(args), width, fwd_bytes, bwd_bytes,
                model, ctx.summary.get("copy_bytes_per_s"), True)  # fmt: skip


def _compile_warmup(ctx: Ctx, compiled, args) -> None:
    out = compiled(*args)
    outs = out if isinstance(out, tuple) else (out,)
    torch.autograd.grad(outs, args, [torch.ones_like(o) for o in outs])
    ctx.sync()


# ---------------------------------------------------------------------------------------------
# 5. Optimizer step


OPTIM_FIELDS = columns("variant,n_params,n_tensors,bytes,bytes_model,time_s,min_s,reps,wall_s,bytes_per_s,frac_of_copy")


def llama_like_shapes(hidden: int, ffn: int, kv_dim: int, vocab: int, layers: int) -> list[tuple[int, ...]]:
    """A Llama model's parameter list: embedding; per layer two norms, q, k, v, o, gate, up, down;
    final norm; output layer (9 * layers + 3 tensors)."""
    h = hidden
    per_layer = [(h,), (h, h), (kv_dim, h), (kv_dim, h), (h, h), (h,), (ffn, h), (ffn, h), (h, ffn)]
    return [(vocab, h), *per_layer * layers, (h,), (vocab, h)]


def run_optim(ctx: Ctx, sink: Sink) -> None:
    shapes = llama_like_shapes(*ctx.sizes.optim_shape)
    params = [torch.nn.Parameter(torch.empty(s, device=ctx.device).normal_(0, 0.02)) for s in shapes]
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    n_params = sum(p.numel() for p in params)
    nbytes = ADAMW_BYTES_PER_PARAM * n_params
    copy_bw = ctx.summary.get("copy_bytes_per_s")
    for variant, kw in (("fused", {"fused": True}), ("foreach", {"foreach": True}), ("for-loop", {"foreach": False})):
        base = dict(variant=variant, n_params=n_params, n_tensors=len(params), bytes=nbytes,
                    bytes_model="28 B/param: r param,grad,m,v; w param,m,v (fp32)")  # fmt: skip
        attempt(ctx, sink, base, lambda kw=kw: _adamw_values(ctx, params, kw, nbytes, copy_bw))
        free_memory(ctx)


def _adamw_values(ctx: Ctx, params: list, kw: dict, nbytes: int, copy_bw: float | None) -> dict:
    opt = torch.optim.AdamW(params, lr=1e-5, weight_decay=0.1, **kw)
    try:
        opt.step()  # creates exp_avg and exp_avg_sq
        t = measure(ctx, opt.step, target_s=0.2, min_reps=3, max_reps=10)
        ctx.sync()
        t0 = time.perf_counter()
        for _ in range(t["reps"]):
            opt.step()
        ctx.sync()
        wall = (time.perf_counter() - t0) / t["reps"]
    finally:
        opt.state.clear()
        del opt
    bw = nbytes / t["time_s"]
    return {**t, "wall_s": wall, "bytes_per_s": bw, "frac_of_copy": bw / copy_bw if copy_bw else ""}


# ---------------------------------------------------------------------------------------------
# 6. Memory


MEMORY_FIELDS = columns(
    "stage,tokens,free_bytes,total_bytes,smi_used_mib,param_bytes,allocated_bytes,reserved_bytes,max_allocated_bytes,"
    "max_reserved_bytes,peak_over_base_bytes,reserved_over_allocated"
)


def run_memory(ctx: Ctx, sink: Sink) -> None:
    for stage in ctx.info.get("memory_stages", []):
        sink.row(**stage)
    if not ctx.cuda:
        sink.row(stage="layer", status="skipped", error="CUDA allocator statistics need a GPU")
        return
    cfg, tokens = ctx.sizes.layer, ctx.sizes.memory_tokens
    free_memory(ctx)
    params = make_layer(ctx, cfg)
    param_bytes = sum(p.numel() * p.element_size() for p in params.values())
    for run in (1, 2):
        attempt(ctx, sink, dict(stage=f"layer_fwd_bwd_run{run}", tokens=tokens, param_bytes=param_bytes),
                lambda: _layer_memory(ctx, cfg, params, tokens))  # fmt: skip


def _layer_memory(ctx: Ctx, cfg: Llama, params: dict, tokens: int) -> dict:
    step, _, _ = layer_step(ctx, cfg, params, tokens, ctx.sizes.layer_seq)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    step()
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    peak_alloc, peak_res = torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()
    return {
        "free_bytes": free,
        "total_bytes": total,
        "smi_used_mib": nvidia_smi().get("memory.used"),
        "allocated_bytes": torch.cuda.memory_allocated(),
        "reserved_bytes": torch.cuda.memory_reserved(),
        "max_allocated_bytes": peak_alloc,
        "max_reserved_bytes": peak_res,
        "peak_over_base_bytes": peak_alloc - base,
        "reserved_over_allocated": peak_res / peak_alloc,
    }


# ---------------------------------------------------------------------------------------------
# Summary


def summary_lines(tables: dict[str, list[dict]]) -> list[str]:
    """A short text digest of the CSVs (rows as read_rows returns them)."""
    ok = {name: [r for r in rows if r.get("status") == "ok"] for name, rows in tables.items()}
    lines = []
    lines += _gemm_summary(ok["gemm"]) if "gemm" in ok else []
    lines += _attn_summary(ok["attn"]) if "attn" in ok else []
    lines += _host_summary(ok["host"]) if "host" in ok else []
    lines += _elementwise_summary(ok["elementwise"]) if "elementwise" in ok else []
    for r in ok.get("optim", []):
        lines.append(f"optim AdamW {r['variant']}: {_num(r['time_s'], 1e3, '.1f')} ms/step (wall "
                     f"{_num(r['wall_s'], 1e3, '.1f')}), {_num(r['bytes_per_s'], 1e-9, '.0f')} GB/s, "
                     f"{_num(r['n_params'], 1e-9, '.2f')}e9 params in {r['n_tensors']} tensors")  # fmt: skip
    for r in ok.get("memory", []):
        if _is_num(r.get("max_allocated_bytes")):
            peak = _num(r["max_allocated_bytes"], 2**-30, ".2f")
            lines.append(f"memory {r['stage']} M={r['tokens']}: peak allocated {peak}"
                         f" GiB, reserved {_num(r['max_reserved_bytes'], 2**-30, '.2f')} GiB "
                         f"(x{_num(r['reserved_over_allocated'], 1, '.3f')})")  # fmt: skip
        elif _is_num(r.get("free_bytes")):
            used = r["total_bytes"] - r["free_bytes"]
            reserved = _num(r["reserved_bytes"], 2**-20, ".0f")
            lines.append(f"memory {r['stage']}: GPU used {_num(used, 2**-20, '.0f')} MiB (torch reserved "
                         f"{reserved} MiB, nvidia-smi {r['smi_used_mib']} MiB)")  # fmt: skip
        elif r["stage"] == "before_init":
            lines.append(f"memory before_init: nvidia-smi {r['smi_used_mib']} MiB")
    for name, rows in tables.items():
        bad = [r for r in rows if r.get("status") != "ok"]
        if bad:
            first = bad[0]
            lines.append(f"{name}: {len(bad)} rows not ok, e.g. {first['status']}: {str(first.get('error'))[:150]}")
    return lines


def _is_num(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _num(x, scale: float, spec: str) -> str:
    return format(x * scale, spec) if _is_num(x) else "-"


def _median(values) -> float:
    values = [v for v in values if _is_num(v)]
    return statistics.median(values) if values else float("nan")


def _gemm_summary(rows: list[dict]) -> list[str]:
    peak = {r["dtype"]: r["tflops"] for r in rows if r["kind"] == "peak"}
    lines = ["gemm peak (square): " + ", ".join(f"{k} {v:.0f} TFLOP/s" for k, v in peak.items())]
    for dtype in peak:
        layer = [r for r in rows if r["kind"] == "layer" and r["dtype"] == dtype]
        tokens = sorted({r["tokens"] for r in layer})
        if not tokens:
            continue
        lines.append(f"gemm {dtype} median fraction of peak by tokens M (all models, TPs, layers, ops):")
        lines.append("  M      " + " ".join(f"{m:>6}" for m in tokens))
        for op in GEMM_OPS:
            fr = [_median(r["frac_of_peak"] for r in layer if r["tokens"] == m and r["op"] == op) for m in tokens]
            lines.append(f"  {op:<6} " + " ".join(f"{f:6.2f}" for f in fr))
        for tp in sorted({r["tp"] for r in layer}):
            fr = [_median(r["frac_of_peak"] for r in layer if r["tokens"] == m and r["tp"] == tp) for m in tokens]
            lines.append(f"  tp={tp:<3} " + " ".join(f"{f:6.2f}" for f in fr))
    return lines


def _attn_summary(rows: list[dict]) -> list[str]:
    lines = ["attn TFLOP/s (causal fwd / causal fwd+bwd / full fwd+bwd) by seq:"]
    for backend in sorted({r["backend"] for r in rows}):
        cells = []
        for seq in sorted({r["seq"] for r in rows if r["backend"] == backend}):
            got = {(r["causal"], r["mode"]): r["tflops"] for r in rows if r["backend"] == backend and r["seq"] == seq}
            vals = [got.get(key) for key in ((True, "fwd"), (True, "fwd+bwd"), (False, "fwd+bwd"))]
            cells.append(f"{seq}:" + "/".join(_num(v, 1, ".0f") for v in vals))
        gqa = {r["gqa"] for r in rows if r["backend"] == backend}
        lines.append(f"  {backend} ({','.join(sorted(gqa))} gqa): " + " ".join(cells))
    return lines


def _host_summary(rows: list[dict]) -> list[str]:
    lines = []
    graph = {r["name"]: r["graph_s"] for r in rows if r["kind"] == "tiny_op_graph"}
    for r in rows:
        if r["kind"] == "tiny_op":
            lines.append(f"host {r['name']}: wall {_num(r['wall_s'], 1e6, '.1f')} us/op, issue "
                         f"{_num(r['host_issue_s'], 1e6, '.1f')}, gpu {_num(r['gpu_s'], 1e6, '.1f')}, graph "
                         f"{_num(graph.get(r['name']), 1e6, '.2f')}")  # fmt: skip
    layers = [r for r in rows if r["kind"] == "layer"]
    if layers:
        lines.append("host eager layer fwd+bwd, ms (gap = wall - kernel sum):")
        lines.append("       M    wall     gpu   issue kernels  n_kern     gap TFLOP/s")
        for r in layers:
            keys = ("wall_s", "gpu_s", "host_issue_s", "kernel_sum_s")
            cells = [f"{_num(r[k], 1e3, '.2f'):>7}" for k in keys]
            lines.append(f"  {r['tokens']:>6} {' '.join(cells)} {r['n_kernels']!s:>7} "
                         f"{_num(r['host_gap_s'], 1e3, '.2f'):>7} {_num(r['tflops'], 1, '.1f'):>7}")  # fmt: skip
    return lines


def _elementwise_summary(rows: list[dict]) -> list[str]:
    copy = next((r["bytes_per_s"] for r in rows if r["op"] == "copy"), None)
    lines = [f"elementwise: copy {_num(copy, 1e-9, '.0f')} GB/s; op dtype pass: GB/s (fraction of copy) [time]"]
    for r in rows:
        if r["op"] != "copy" and r["pass"] != "compile":
            tag = " compiled" if r["compiled"] is True else ""
            lines.append(f"  {r['op']}{tag} {r['dtype']} {r['pass']}: {_num(r['bytes_per_s'], 1e-9, '.0f')} "
                         f"({_num(r['frac_of_copy'], 1, '.2f')}) [{_num(r['time_s'], 1e6, '.0f')} us]")  # fmt: skip
    lines += [f"  compile {r['op']}: {_num(r['time_s'], 1, '.1f')} s" for r in rows if r["pass"] == "compile"]
    return lines


# ---------------------------------------------------------------------------------------------
# Main


RUNNERS = {"gemm": (run_gemm, GEMM_FIELDS), "attn": (run_attn, ATTN_FIELDS), "host": (run_host, HOST_FIELDS),
           "elementwise": (run_elementwise, EW_FIELDS), "optim": (run_optim, OPTIM_FIELDS),
           "memory": (run_memory, MEMORY_FIELDS)}  # fmt: skip
WORKER_GRACE_S = 20.0  # a worker still running this long after its deadline is killed


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        """One line on stderr, exit status 2 (no usage block)."""
        self.exit(2, f"{self.prog}: error: {message}\n")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = _Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT") or "out", help="output folder (default $OUT or ./out)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: cuda if available")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a functional test)")
    parser.add_argument(
        "--sections", default=",".join(SECTIONS), help="comma-separated subset of " + ",".join(SECTIONS)
    )
    parser.add_argument("--budget-s", type=float, default=300.0, help="wall-time budget from start, all sections")
    parser.add_argument("--compile-timeout-s", type=float, default=None,
                        help="time box of each torch.compile (default 60; 0 under --quick)")  # fmt: skip
    # Internal: one section in a worker process.
    parser.add_argument("--worker", choices=SECTIONS, help=argparse.SUPPRESS)
    parser.add_argument("--deadline-unix", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--t0-unix", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--side", help=argparse.SUPPRESS)
    parser.add_argument("--no-smi", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--compiled", choices=COMPILED_OPS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    chosen = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in SECTIONS]
    if unknown or not chosen:
        parser.error(f"--sections: unknown {','.join(unknown) or '(empty)'}; allowed: {','.join(SECTIONS)}")
    if args.budget_s < 0:
        parser.error(f"--budget-s: {args.budget_s} is negative; give seconds >= 0")
    args.sections = [s for s in SECTIONS if s in chosen]
    if args.compile_timeout_s is None:
        args.compile_timeout_s = 0.0 if args.quick else 60.0
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return run_worker(args) if args.worker else run_parent(args)


def run_parent(args: argparse.Namespace) -> int:
    """Each section in its own worker process, one after the other: a crash, a lost CUDA context or
    a hang in one section costs that section only; a worker past its deadline is killed."""
    t0 = time.time()
    t_end = t0 + args.budget_s
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    info: dict = {"argv": sys.argv[1:], "sections": args.sections, "budget_s": args.budget_s}
    if args.device != "cpu":
        info["smi_at_start"] = nvidia_smi()
    info["workers"] = {}
    info["clocks_after"] = {}
    write_json(out / "device.json", info)
    print(
        f"[{_since(t0)}] gpu_microbench: sections {','.join(args.sections)}, budget {args.budget_s:.0f} s", flush=True
    )
    with tempfile.TemporaryDirectory(prefix="gpu_microbench_") as side_dir:
        for i, name in enumerate(args.sections):
            left = t_end - time.time()
            if left <= 1.0:
                info["workers"][name] = {"note": "not run: budget spent"}
                print(f"[{_since(t0)}] {name}: not run (budget spent)", flush=True)
                continue
            shares = [SHARES[s] for s in args.sections[i:]]
            deadline = time.time() + left * shares[0] / sum(shares)
            _section(args, name, [], t0, deadline, deadline - time.time() + WORKER_GRACE_S, Path(side_dir), info)
            if name == "elementwise":
                _compiled_sections(args, t0, deadline, Path(side_dir), info)
    write_json(out / "device.json", info)
    print("== summary ==", flush=True)
    sinks = {name: read_rows(out / f"{name}.csv") for name in args.sections if (out / f"{name}.csv").exists()}
    for line in summary_lines(sinks):
        print(line, flush=True)
    names = ", ".join(["device.json", *(f"{n}.csv" for n in sinks)])
    print(f"[{_since(t0)}] wrote {names} to {out}", flush=True)
    return 0


def _section(args, name: str, extra: list[str], t0: float, deadline: float, timeout_s: float, side_dir: Path,
             info: dict) -> dict:  # fmt: skip
    """Run one worker and merge what it reports into device.json."""
    key = "/".join([name, *extra[1:]])
    side = side_dir / f"{key.replace('/', '_')}.json"
    status = _run_worker_process(args, name, extra, t0, deadline, timeout_s, side)
    result = json.loads(side.read_text()) if side.exists() else {}
    if "device" in result and "name" not in info:
        info.update(result.pop("device"))
    result.pop("device", None)
    info["clocks_after"][key] = result.pop("smi_after", None)
    info["workers"][key] = {**status, **result}
    write_json(Path(args.out) / "device.json", info)
    return status


def _compiled_sections(args, t0: float, deadline: float, side_dir: Path, info: dict) -> None:
    """Each torch.compile'd op in its own worker, killed past --compile-timeout-s + COMPILE_SLACK_S;
    a skipped or killed one leaves a `pass=compile` row that says why."""
    sink = Sink(Path(args.out) / "elementwise.csv", EW_FIELDS, append=True)
    why = "compile disabled (--compile-timeout-s 0)" if args.compile_timeout_s <= 0 else ""
    for op in COMPILED_OPS:
        box = min(args.compile_timeout_s + COMPILE_SLACK_S, deadline - time.time() + WORKER_GRACE_S)
        if not why and box < COMPILE_SLACK_S:
            why = "no time left in the section's budget"
        if why:
            sink.row(op=op, compiled=True, status="skipped", error=why, **{"pass": "compile"})
            continue
        status = _section(args, "elementwise", ["--compiled", op], t0, time.time() + box - 2, box, side_dir, info)
        if status["rc"] is None:
            sink.row(op=op, compiled=True, status="skipped", error=f"compile and timing over {box:.0f} s: killed",
                     **{"pass": "compile"})  # fmt: skip
            why = "an earlier compile was killed"
    sink.close()


def _run_worker_process(args, name: str, extra: list[str], t0: float, deadline: float, timeout_s: float,
                        side: Path) -> dict:  # fmt: skip
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", name, *extra, "--out", args.out,
           "--deadline-unix", repr(deadline), "--t0-unix", repr(t0), "--side", str(side),
           "--compile-timeout-s", repr(args.compile_timeout_s)]  # fmt: skip
    cmd += ["--quick"] if args.quick else []
    cmd += ["--device", args.device] if args.device else []
    cmd += ["--no-smi"] if _SMI["broken"] else []
    started = time.time()
    stderr_path = side.with_suffix(".stderr")
    with stderr_path.open("w") as stderr:  # library chatter stays out of the output tail (kept in device.json)
        proc = subprocess.Popen(cmd, stderr=stderr, start_new_session=True)  # own process group
        try:
            rc = proc.wait(timeout=timeout_s)
            note = "done" if rc == 0 else f"worker exited with status {rc}"
        except subprocess.TimeoutExpired:
            note = f"worker killed after {timeout_s:.0f} s"
            rc = None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # the worker, if still running, and any compile helpers it left
        proc.wait()
    stderr_tail = stderr_path.read_text(errors="replace")[-3000:]
    if note != "done":
        last = stderr_tail.strip().splitlines()[-1:] or [""]
        print(f"[{_since(t0)}] {' '.join([name, *extra])}: {note}; stderr: {last[0][:300]}", flush=True)
    return {"rc": rc, "elapsed_s": round(time.time() - started, 2), "note": note, "stderr_tail": stderr_tail}


def run_worker(args: argparse.Namespace) -> int:
    global torch
    warnings.filterwarnings("ignore")
    _SMI["broken"] = args.no_smi
    t0 = args.t0_unix or time.time()
    deadline = time.perf_counter() + ((args.deadline_unix or math.inf) - time.time())
    # GPU memory in use before this process creates a CUDA context (the memory section reports it)
    smi_before = nvidia_smi() if args.worker == "memory" and args.device != "cpu" else {}
    if args.compiled:  # compile in this process: no pool of compile workers competing for the CPU afterwards
        os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    import torch as torch_module

    torch = torch_module
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    name = args.worker
    side: dict = {}
    if device == "cuda" and not torch.cuda.is_available():
        print(f"[{_since(t0)}] {name}: --device cuda but no CUDA device is available", flush=True)
        return 2
    ctx = Ctx(device, device == "cuda", QUICK if args.quick else FULL, Path(args.out), deadline, args.compile_timeout_s)
    ctx.deadline = deadline
    try:
        if ctx.cuda and name == "memory":
            ctx.info["memory_stages"] = context_memory_stages(ctx, smi_before)  # first use of CUDA here
        side["device"] = ctx.info = {**describe_device(ctx), **ctx.info}
    except Exception as exc:
        side["device_error"] = f"{type(exc).__name__}: {exc}"[:300]
    if ctx.cuda:
        ctx.flush_buf = _try(lambda: torch.empty(64 << 20, device=ctx.device, dtype=torch.int32))
    ctx.gqa_native = _gqa_supported(ctx)
    ctx.summary["copy_bytes_per_s"] = _copy_bandwidth_measured(ctx.out)
    ctx.out.mkdir(parents=True, exist_ok=True)
    runner, fields = RUNNERS[name]
    if args.compiled:
        runner = lambda ctx, sink: run_compiled(ctx, sink, args.compiled)  # noqa: E731
        name = f"{name} (compiled {args.compiled})"
    sink = Sink(ctx.out / f"{args.worker}.csv", fields, append=bool(args.compiled))
    started = time.perf_counter()
    note = "done"
    try:
        ctx.check()
        runner(ctx, sink)
    except BudgetSpent as exc:
        note = f"stopped: {exc}"
    except Exception as exc:  # a bug in a section: keep its rows, say why it ended
        note = f"failed: {type(exc).__name__}: {exc}"[:300]
        sink.row(status="error", error=note)
        print(traceback.format_exc(limit=-4), flush=True)
    sink.close()
    side["note"] = note
    side["smi_after"] = nvidia_smi() if ctx.cuda else None
    if args.side:
        write_json(Path(args.side), side)
    ok = len(sink.ok())
    print(f"[{_since(t0)}] {name}: {ok}/{len(sink.rows)} rows ok in {time.perf_counter() - started:.1f} s ({note})",
          flush=True)  # fmt: skip
    return 0


def write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=1, default=str))


def read_rows(path: Path) -> list[dict]:
    """A CSV written by a Sink, numbers and booleans parsed back."""
    with path.open(newline="") as f:
        return [{k: _parse(v) for k, v in row.items()} for row in csv.DictReader(f)]


def _parse(text: str | None):
    if text in ("True", "False"):
        return text == "True"
    try:
        return int(text)
    except (TypeError, ValueError):
        pass
    try:
        return float(text)
    except (TypeError, ValueError):
        return text


def _copy_bandwidth_measured(out: Path) -> float | None:
    """The copy rate the elementwise section measured in this run, if it ran before."""
    with contextlib.suppress(Exception):
        for row in read_rows(out / "elementwise.csv"):
            if row["op"] == "copy" and row["status"] == "ok":
                return float(row["bytes_per_s"])
    return None


def _gqa_supported(ctx: Ctx) -> bool:
    """Whether SDPA (default backend choice) takes fewer kv heads than q heads (enable_gqa=True)."""
    try:
        kw = dict(device=ctx.device, dtype=torch.bfloat16, requires_grad=True)
        q, k = torch.randn(1, 4, 128, 64, **kw), torch.randn(1, 2, 128, 64, **kw)
        torch.nn.functional.scaled_dot_product_attention(q, k, k, is_causal=True, enable_gqa=True).sum().backward()
        return True
    except Exception:
        return False


def _since(t0: float) -> str:
    return f"{time.time() - t0:6.1f} s"


if __name__ == "__main__":
    sys.exit(main())
