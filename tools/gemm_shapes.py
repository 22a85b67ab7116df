"""The GEMM tile model (`physics.gemm`) against XLA's published GEMM shape table.

    python tools/gemm_shapes.py                 # the comparison, per GPU (H100, B200)
    python tools/gemm_shapes.py --rows          # also the 8 shapes predicted fastest and slowest
    python tools/gemm_shapes.py --import FILE   # rewrite data/public_gemm_shapes.csv from the
                                                # table (default_matmul_perf_table.txtpb)

The table (openxla/xla `xla/service/gpu/model/default_matmul_perf_table.txtpb`) holds, per GPU,
the measured rate of one XLA `dot` of every b x m x n x k in {1, 2, 4} x {256 ... 4096}^3: the
median kernel time of 5 runs (`xla/tools/matmul_perf_table_gen.cc`, a CUPTI kernel tracer; XLA
picks the GEMM kernel, cuBLAS or its own). Only the bf16 x bf16 -> bf16 rows are kept (the sm_90
FP8 rows exceed the H100's dense FP8 peak at 4096^3, 2.42 against 1.98 PFLOP/s).

What is printed: the model's time over the measured one, its median (the level: the shipped
efficiencies are sustained training clocks, a benchmark runs at its burst clock) and the spread
of the shape effect (mean |ratio / median - 1| and the standard deviation of ln ratio), over
every shape and over those measured at 20 us or more; then by the measured time (under 8 us,
8-20 us, 20 us or more), the median ratio over the level and the shape error, with the model as
it is and without the kernel's fixed time on the GPU (`physics.gemm.kernel_fixed_s`: the drain
of its last stores, the TMA descriptors' fetch), each about its own >= 20 us level. The table's
small kernels take 5-8 us whatever their size; the fixed time prices part of that.
"""

from __future__ import annotations

import argparse
import csv
import re
from pathlib import Path

import numpy as np

from shardwise import presets
from shardwise.physics import gemm

DATA = Path(__file__).resolve().parents[1] / "src" / "shardwise" / "data" / "public_gemm_shapes.csv"
DEVICES = {"sm_90": "h100-sxm5-80gb", "sm_100_B200": "b200-sxm-180gb"}
DTYPE = "bf16xbf16->bf16"
SLOW_S = 20e-6


def import_table(path: Path) -> list[list[str]]:
    """The bf16 rows of the two GPUs from the txtpb text, as CSV rows."""
    text = path.read_text()
    heads = list(re.finditer(r'key: "([^"]+)"\s*value \{', text))
    rows = []
    for i, head in enumerate(heads):
        device = head.group(1)
        if device not in DEVICES:
            continue
        block = text[head.end() : heads[i + 1].start() if i + 1 < len(heads) else len(text)]
        for e in re.finditer(r"b: (\d+)\s*m: (\d+)\s*n: (\d+)\s*k: (\d+)(.*?)\n    \}", block, re.S):
            rate = re.search(r'flops \{ key: "' + re.escape(DTYPE) + r'" value: (\d+) \}', e.group(5))
            if rate:
                rows.append([device, DEVICES[device], *e.groups()[:4], DTYPE, rate.group(1)])
    return rows


def compare(show_rows: bool) -> None:
    with DATA.open() as f:
        rows = list(csv.DictReader(f))
    for device, preset in DEVICES.items():
        g = presets.gpu(preset)
        rs = [r for r in rows if r["device"] == device]
        b, m, n, k = (np.array([float(r[c]) for r in rs]) for c in "bmnk")
        measured = 2 * b * m * n * k / np.array([float(r["flops_per_s"]) for r in rs])
        peak, eta = g.peak_flops_per_s_16bit, g.matmul_efficiency
        model = gemm.gemm_time_s(m, n, k, b, 2.0 * b * (m * k + k * n), 2.0, g, peak, eta)
        ratio = model / measured
        slow = measured >= SLOW_S
        level = float(np.median(ratio[slow]))
        print(f"{preset} ({device}), matmul_efficiency {g.matmul_efficiency}")
        for label, mask in (("every shape", np.ones_like(slow)), ("measured >= 20 us", slow)):
            r = ratio[mask]
            print(
                f"  {label:18s} {int(mask.sum()):3d} shapes: model / measured median {np.median(r):.3f}, "
                f"shape error {np.mean(np.abs(r / level - 1)) * 100:.1f}% (about the >= 20 us median {level:.3f}), "
                f"sd of ln ratio {np.std(np.log(r)):.3f}"
            )
        without = model - gemm.kernel_fixed_s(g)
        print(
            f"  by measured time, median ratio / level and shape error (without the kernel's fixed time "
            f"{gemm.kernel_fixed_s(g) * 1e6:.1f} us in brackets)"
        )
        for label, lo, hi in (("under 8 us", 0.0, 8e-6), ("8-20 us", 8e-6, SLOW_S), (">= 20 us", SLOW_S, np.inf)):
            mask = (measured >= lo) & (measured < hi)
            cells = []
            for t in (model, without):
                r = t / measured
                lvl = float(np.median(r[slow]))
                cells.append((np.median(r[mask]) / lvl, np.mean(np.abs(r[mask] / lvl - 1)) * 100))
            (m1, e1), (m0, e0) = cells
            print(f"    {label:10s} {int(mask.sum()):3d} shapes: {m1:.2f} ({m0:.2f}), {e1:.1f}% ({e0:.1f}%)")
        if show_rows:
            order = np.argsort(ratio)
            for i in (*order[:8], *order[-8:]):
                print(
                    f"    b {int(b[i])} m {int(m[i])} n {int(n[i])} k {int(k[i])}: measured "
                    f"{measured[i] * 1e6:8.2f} us, model {model[i] * 1e6:8.2f} us (x{ratio[i]:.2f})"
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", action="store_true")
    parser.add_argument("--import", dest="table", type=Path, metavar="FILE")
    args = parser.parse_args()
    if args.table:
        rows = import_table(args.table)
        with DATA.open("w", newline="") as f:
            out = csv.writer(f)
            out.writerow(["device", "gpu", "b", "m", "n", "k", "dtype", "flops_per_s"])
            out.writerows(rows)
        print(f"wrote {len(rows)} rows to {DATA}")
        return
    compare(args.rows)


if __name__ == "__main__":
    main()
