"""How long a command takes end to end, interpreter start included (on demand, not in the tests).

    python benchmarks/bench_cli.py [--repeat 15]

Target (issue 16): `shardwise predict ... --json` under 0.2 s. Each command runs once to
compile its bytecode (as a normal install has it), then `--repeat` times; the median is
reported, also next to `python -c pass` and `python -c "import numpy"` timed the same way
(what any Python command and any numpy command pay before doing anything), and as a ratio to
the numpy import.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

PREDICT = "predict --model llama3-70b --system dgx-h100 --nodes 4 --tp 8 --pp 4 --global-batch 512 --json"
COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    'python -c "import numpy"': [sys.executable, "-c", "import numpy"],
    "shardwise --help": [sys.executable, "-m", "shardwise", "--help"],
    "shardwise predict ... --json": [sys.executable, "-m", "shardwise", *PREDICT.split()],
}


def run(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # bytecode as installed
    medians = {}
    for name, argv in COMMANDS.items():
        run(argv, env)  # compiles the bytecode
        times = [run(argv, env) for _ in range(args.repeat)]
        medians[name] = (statistics.median(times), min(times))
    numpy_s = medians['python -c "import numpy"'][0]
    print(f"{'command':32s} {'median s':>9s} {'min s':>7s} {'/ numpy import':>15s}")
    for name, (med, low) in medians.items():
        print(f"{name:32s} {med:9.3f} {low:7.3f} {med / numpy_s:15.2f}")


if __name__ == "__main__":
    main()
