"""Calibrate on a stack's small jobs, predict its large ones (docs/calibration.md): Llama 3.1 8B
(Megatron-Core) on DGX H100, from NVIDIA's DGX Cloud benchmarking tables. The twelve runs on 8-32
GPUs calibrate the GEMM efficiency; the eight on 64 and 128 GPUs are predicted before and after.
Runs the commands a user would type, in a temporary directory so nothing is left behind; of the
calibration file it prints the lines that say what was fitted (the rest is provenance and the posterior covariance).
`python tools/calibration_showcase.py dgxc-llama3.1-8b-h100 --write examples/calibration` writes the
two CSVs from the public table."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent / "calibration"
FIT, HELD_OUT = "dgxc-llama3.1-8b-h100_fit.csv", "dgxc-llama3.1-8b-h100_held_out.csv"


def shardwise(*args: str) -> None:
    print(f"# shardwise {' '.join(args)}", flush=True)
    subprocess.run([sys.executable, "-m", "shardwise", *args], check=True, stderr=subprocess.STDOUT)
    print(flush=True)


def fitted_lines(path: str) -> list[str]:
    """The calibration file's `fitted:` list and each fitted parameter's entry, each with the
    lines it wraps onto (a line of YAML is folded at 120 characters, its rest indented deeper)."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()

    def entry(i: int) -> list[str]:
        indent = len(lines[i]) - len(lines[i].lstrip())
        end = i + 1
        while end < len(lines) and len(lines[end]) - len(lines[end].lstrip()) > indent:
            end += 1
        return lines[i:end]

    first = next(i for i, line in enumerate(lines) if line.startswith("fitted:"))
    listed = entry(first)
    names = [n.strip() for n in " ".join(listed).partition("[")[2].partition("]")[0].split(",")]
    out = list(listed)
    for i, line in enumerate(lines):
        if any(line.startswith(f"  {n}: ") for n in names):
            out += entry(i)
    return out


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        for name in (FIT, HELD_OUT):
            os.symlink(HERE / name, name)
        shardwise("calibrate", FIT, "--params", "matmul_efficiency_scale", "-o", "h100-8b.yaml")
        print("# h100-8b.yaml (what was fitted)")
        print("\n".join(fitted_lines("h100-8b.yaml")), end="\n\n")
        shardwise("validate", "--runs", HELD_OUT)
        shardwise("validate", "--runs", HELD_OUT, "--calibration", "h100-8b.yaml")


if __name__ == "__main__":
    main()
