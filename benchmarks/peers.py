"""One training configuration priced by two peer tools, timed in their own virtual environment
(run by `bench_scalar.py --peers PYTHON`; it imports neither shardwise nor anything of this
repository). Prints one JSON object: CPU milliseconds per configuration (median of rounds) and
the Python function calls of one configuration, for each peer that imports.

    python -m venv /tmp/peers && /tmp/peers/bin/pip install llm-analysis
    /tmp/peers/bin/pip install <a checkout of github.com/calculon-ai/calculon>
    /tmp/peers/bin/python benchmarks/peers.py [--calculon-root DIR]

llm-analysis (Li 2023, `LLMAnalysis.training`): OPT-175B on A100 40 GB, tp 8, pp 8, dp 4, a
global batch of 512 (its own presets); Calculon (Isaev et al. 2023, `Llm.compile` + `Llm.run`): Megatron-1T
on 3,072 A100 80 GB with the execution of its own example (tp 4, pp 64, dp 12). Each call
builds the peer's objects for one configuration as its API asks and reads the step time.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import logging
import os
import pstats
import statistics
import sys
import time
from collections.abc import Callable


def per_call_ms(fn: Callable[[], object], calls: int, rounds: int) -> float:
    """Median over `rounds` of the CPU milliseconds per call of `calls` calls."""
    fn()
    out = []
    for _ in range(rounds):
        start = time.process_time()
        for _ in range(calls):
            fn()
        out.append((time.process_time() - start) / calls * 1e3)
    return statistics.median(out)


def python_calls(fn: Callable[[], object]) -> int:
    profile = cProfile.Profile()
    profile.enable()
    fn()
    profile.disable()
    return pstats.Stats(profile).total_calls  # type: ignore[attr-defined,no-any-return]


def llm_analysis_case() -> Callable[[], object]:
    from llm_analysis.analysis import (
        LLMAnalysis,
        ParallelismConfig,
        get_dtype_config_by_name,
        get_gpu_config_by_name,
        get_model_config_by_name,
    )

    logging.getLogger().setLevel(logging.ERROR)
    model = get_model_config_by_name("facebook_opt-175b")
    gpu = get_gpu_config_by_name("a100-sxm-40gb")
    dtype = get_dtype_config_by_name("w16a16e16")

    def one() -> object:
        layout = ParallelismConfig(tp_size=8, pp_size=8, dp_size=4)
        analysis = LLMAnalysis(model, gpu, dtype, layout, flops_efficiency=0.5, hbm_memory_efficiency=0.9)
        return analysis.training(batch_size_per_gpu=1, global_batch_size=512, seq_len=2048)["latency_per_iter"]

    return one


def calculon_case(root: str) -> Callable[[], object]:
    import calculon
    from calculon.llm import Llm
    from calculon.system import System

    read = calculon.io.read_json_file
    app = Llm.Application(read(os.path.join(root, "models", "megatron-1T.json")))
    exe_json = read(os.path.join(root, "examples", "3072_t4_p64_d12_mbs4_full.json"))
    system = System(read(os.path.join(root, "systems", "a100_80g.json")))
    log = logging.getLogger("calculon")
    log.setLevel(logging.ERROR)

    def one() -> object:
        model = Llm(app, log)
        model.compile(system, Llm.Execution.from_json(exe_json))
        model.run(system)
        return model.get_total_time()

    return one


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calculon-root", default="/tmp/calculon-src", help="a checkout of calculon (its models/)")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    out: dict[str, object] = {}
    cases = (("llm-analysis", llm_analysis_case), ("Calculon", lambda: calculon_case(args.calculon_root)))
    for name, make in cases:
        try:
            fn = make()
            fn()
        except Exception as exc:  # a peer that does not import or run: said, not timed
            out[name] = {"error": f"{type(exc).__name__}: {exc}"[:200]}
            continue
        calls = args.calls if name == "llm-analysis" else max(1, args.calls // 10)
        out[name] = {"ms": per_call_ms(fn, calls, args.rounds), "python_calls": python_calls(fn)}
    json.dump(out, sys.stdout)
    print()


if __name__ == "__main__":
    main()
