#!/usr/bin/env python3
"""Eager PyTorch's GEMM call against Transformer Engine's, at a training layer's shapes, on one GPU.

docs/model.md ("Do PyTorch's own GEMMs run slower than Transformer Engine's on Hopper?"): a bias-free
nn.Linear runs `aten::mm` -> cublasGemmEx on PyTorch's cuBLAS handle (32 MiB workspace on sm90);
Transformer Engine runs cublasLtMatmul with a 32 MiB workspace and the heuristic's first algorithm.
This times every layer GEMM of `tools/gpu_microbench.py` (Llama-3 8B and 70B, TP 1-8, forward,
dgrad and wgrad) through three back ends, interleaved shape by shape so that clock drift falls on
all alike, with L2 flushed before each repetition:

    cublas    torch.mm, PyTorch's default (cublasGemmEx)
    cublaslt  torch.mm with torch.backends.cuda.preferred_blas_library("cublaslt") (pytorch#122106, 2024)
              and a 32 MiB cuBLASLt workspace (CUBLASLT_WORKSPACE_SIZE, set before torch loads):
              TE's call (one heuristic result, no epilogue)
    te        transformer_engine.pytorch.cpp_extensions.general_gemm, where TE is installed

    python3 tools/gemm_library_bench.py --out DIR [--budget-s 420]
    python3 tools/gemm_library_bench.py --device cpu --quick --out DIR   # the plumbing, tiny sizes

Writes DIR/gemm_library.csv (a row per back end and shape) and DIR/device.json (versions, including
the cuBLAS wheel's), and prints the median time ratio to `cublas` by op and token count. Run it
once with PyTorch's pip wheel and once in an NGC container: the first ratio is the library factor,
the second comparison the cuBLAS version's.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import statistics
import sys
import time
from importlib import metadata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_microbench import GEMM_LAYOUT, GEMM_OPS, LLAMA3_8B, LLAMA3_70B, gemm_mnk, layer_gemms

FIELDS = ["backend", "model", "layer", "tp", "tokens", "op", "m", "n", "k", "time_s", "reps", "tflops", "error"]
TE_LAYOUT = {"fwd": "TN", "dgrad": "NN", "wgrad": "NT"}  # transformer_engine/pytorch/module/linear.py
# TE's cuBLASLt workspace on Hopper, in KiB; read once by PyTorch at its first cuBLASLt call (the
# variable's name has changed between versions: both are set, unless the caller set them)
LT_WORKSPACE_KIB = "32768"


def linear_dims(op: str, m: int, n: int, k: int) -> tuple[int, int, int]:
    """(N, K, M) of the linear y[M,N] = x[M,K] w[N,K]^T whose GEMM `op` is (m, n, k): the inverse
    of gpu_microbench.gemm_mnk."""
    return {"fwd": (n, k, m), "dgrad": (k, n, m), "wgrad": (m, n, k)}[op]


def cases(quick: bool) -> list[dict]:
    models, tokens, tps = ((LLAMA3_8B, LLAMA3_70B), (4096, 8192, 16384), (1, 2, 4, 8))
    out = []
    for t in (64,) if quick else tokens:
        for model in models[:1] if quick else models:
            for tp in (8,) if quick else tps:
                for layer, n_out, k_in in layer_gemms(model, tp):
                    for op in GEMM_OPS:
                        m, n, k = gemm_mnk(op, t, n_out, k_in)
                        if quick:
                            m, n, k = m, max(8, n // 64), max(8, k // 64)
                        out.append(dict(model=model.name, layer=layer, tp=tp, tokens=t, op=op, m=m, n=n, k=k))
    return out


def backends(torch, device: str) -> dict:
    """name -> (setup, fn(op, m, n, k) -> callable)."""

    def operands(op, m, n, k):
        a_t, b_t, _ = GEMM_LAYOUT[op]
        kw = dict(device=device, dtype=torch.bfloat16)
        a = torch.randn(k, m, **kw).t() if a_t else torch.randn(m, k, **kw)
        b = torch.randn(n, k, **kw).t() if b_t else torch.randn(k, n, **kw)
        return a, b, torch.empty(m, n, **kw)

    def mm(op, m, n, k):
        a, b, c = operands(op, m, n, k)
        return lambda: torch.mm(a, b, out=c)

    def prefer(name):
        return lambda: torch.backends.cuda.preferred_blas_library(name)

    out = {"cublas": (prefer("cublas") if device == "cuda" else None, mm)}
    if device != "cuda":
        return out
    out["cublaslt"] = (prefer("cublaslt"), mm)
    try:
        from transformer_engine.pytorch.cpp_extensions import general_gemm
    except Exception:
        return out

    def te(op, m, n, k):
        # w[N,K], x[M,K], dy[M,N] of the linear whose GEMM (m, n, k) this is (gpu_microbench.gemm_mnk)
        big_n, big_k, big_m = linear_dims(op, m, n, k)
        kw = dict(device=device, dtype=torch.bfloat16)
        w, x, dy = (torch.randn(big_n, big_k, **kw), torch.randn(big_m, big_k, **kw), torch.randn(big_m, big_n, **kw))
        a, b = {"fwd": (w, x), "dgrad": (w, dy), "wgrad": (x, dy)}[op]
        kwargs = dict(out_dtype=torch.bfloat16, layout=TE_LAYOUT[op])
        try:
            general_gemm(a, b, **kwargs)
            return lambda: general_gemm(a, b, **kwargs)
        except TypeError:  # TE 2.0-2.x: the workspace is the third argument
            from transformer_engine.pytorch.module.base import get_workspace

            ws = get_workspace()
            return lambda: general_gemm(a, b, ws, **kwargs)

    out["te"] = (prefer("cublas"), te)
    return out


def time_fn(torch, device: str, fn, flush, target_s: float) -> tuple[float, int]:
    fn()
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    reps = max(3, min(50, int(target_s / max(time.perf_counter() - t0, 1e-6))))
    times = []
    for _ in range(reps):
        if flush is not None:
            flush.zero_()
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(times), reps


def versions(torch) -> dict:
    info = {"torch": torch.__version__, "cuda": torch.version.cuda, "env": {}}
    for var in ("CUBLAS_WORKSPACE_CONFIG", "CUBLASLT_WORKSPACE_SIZE", "TORCH_CUBLASLT_WORKSPACE_SIZE"):
        info["env"][var] = os.environ.get(var)
    for pkg in ("nvidia-cublas-cu12", "nvidia-cublas", "transformer_engine", "transformer-engine"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            info[pkg] = metadata.version(pkg)
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        info["sm"] = "{}.{}".format(*torch.cuda.get_device_capability(0))
    return info


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--quick", action="store_true", help="tiny shapes (for a CPU check)")
    ap.add_argument("--budget-s", type=float, default=420.0)
    args = ap.parse_args(argv)
    for var in ("CUBLASLT_WORKSPACE_SIZE", "TORCH_CUBLASLT_WORKSPACE_SIZE"):
        os.environ.setdefault(var, LT_WORKSPACE_KIB)
    try:
        import torch
    except ImportError:
        print("torch: not installed (this benchmark needs PyTorch)", file=sys.stderr)
        return 2

    if args.device == "cuda" and not torch.cuda.is_available():
        print("device: cuda is not available (use --device cpu --quick for a dry run)", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "device.json").write_text(json.dumps(versions(torch), indent=1) + "\n")
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=args.device) if args.device == "cuda" else None
    bks, rows, t_end = backends(torch, args.device), [], time.monotonic() + args.budget_s
    with open(args.out / "gemm_library.csv", "w", newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        w.writeheader()
        for case in cases(args.quick):
            if time.monotonic() > t_end:
                break
            for name, (setup, make) in bks.items():
                row = dict(backend=name, **case)
                try:
                    if setup is not None:
                        setup()
                    fn = make(case["op"], case["m"], case["n"], case["k"])
                    t, reps = time_fn(torch, args.device, fn, flush, 0.02)
                    row.update(time_s=t, reps=reps, tflops=2 * case["m"] * case["n"] * case["k"] / t / 1e12)
                except Exception as exc:  # one back end refusing a shape must not stop the others
                    row["error"] = f"{type(exc).__name__}: {exc}"[:200]
                rows.append(row)
                w.writerow(row)
                f.flush()
    print(summary(rows))
    return 0


def summary(rows: list[dict]) -> str:
    """Time over cublas's, by back end, op and token count: each distinct shape's ratio of median
    times (a shape is its op, M, N and K: one GEMM, whichever layers, passes or runs timed it), then
    the median over the distinct shapes, counted once each beside the timings they pool."""

    def shape(r: dict) -> tuple:
        return tuple(r[c] for c in ("op", "m", "n", "k"))

    times: dict[tuple, list[float]] = {}  # (backend, op, M, N, K) -> every time it took
    for r in rows:
        if r.get("time_s"):
            times.setdefault((r["backend"], *shape(r)), []).append(float(r["time_s"]))
    ratios: dict[tuple, list[float]] = {}  # (backend, op, tokens) -> one ratio per distinct shape
    timings: dict[tuple, int] = {}
    seen: set[tuple] = set()
    for r in rows:
        key, own = (r["backend"], r["op"], r["tokens"]), (r["backend"], *shape(r))
        base = times.get(("cublas", *shape(r)))
        if r["backend"] == "cublas" or not r.get("time_s") or not base:
            continue
        timings[key] = timings.get(key, 0) + 1
        if own not in seen:
            seen.add(own)
            ratios.setdefault(key, []).append(statistics.median(times[own]) / statistics.median(base))
    distinct = len({shape(r) for r in rows})
    lines = [f"{len(rows)} rows, {distinct} distinct shapes (op, M, N, K); time / cublas's time (median over shapes):"]
    for key in sorted(ratios):
        v, n = ratios[key], timings[key]
        counted = f"{len(v)} shape{'s' * (len(v) != 1)}" + (f", {n} timings" if n != len(v) else "")
        lines.append(f"  {key[0]:9s} {key[1]:6s} {key[2]:>6} tokens: {statistics.median(v):.3f} ({counted})")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
