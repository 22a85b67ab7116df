"""How fast in-flight serving is simulated (on demand, not in the tests).

    python benchmarks/bench_serving.py [--repeat 5]

Cases: Llama 3 70B on 8 H100 at TP=8, the KV cache kept full (`serve --max-throughput`: about
2,000 requests in flight, 16,000 simulated); Poisson arrivals at 15 requests/s (1,000 requests);
the same two with ShareGPT-like lengths drawn per request (`--lengths sharegpt`); and the
latency-target search over every plan and precision (`serve --ttft-max 500ms --tpot-max 50ms`).
Each is reported as its median and as a ratio to one numpy pass `a * b + c` over 1e7 float64,
measured in the same run, so that the figures compare across machines.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from unit import numpy_unit_s

from shardwise import presets
from shardwise.analyses.serving_targets import search
from shardwise.engines.inflight import estimate_inflight
from shardwise.engines.serving import plan_for_serving
from shardwise.specs import Scenario
from shardwise.specs.request_mix import SHAREGPT
from shardwise.specs.serving import ServingWorkload

MODEL = presets.model("llama3-70b")
CLUSTER = presets.system("dgx-h100")
WORKLOAD = ServingWorkload(512, 128, custom_all_reduce="trtllm")
TP8 = Scenario(MODEL, CLUSTER, plan_for_serving(8, 1))


CASES: dict[str, Callable[[], object]] = {
    "max throughput, TP=8": lambda: estimate_inflight(TP8, WORKLOAD),
    "15 requests/s, TP=8": lambda: estimate_inflight(TP8, WORKLOAD, rate_per_s=15.0),
    "max throughput, TP=8, ShareGPT": lambda: estimate_inflight(TP8, WORKLOAD, mix=SHAREGPT),
    "15 requests/s, TP=8, ShareGPT": lambda: estimate_inflight(TP8, WORKLOAD, rate_per_s=15.0, mix=SHAREGPT),
    "targets, 20 plans x precisions": lambda: search(MODEL, CLUSTER, WORKLOAD, 0.5, 0.05),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    reference = numpy_unit_s(args.repeat)
    print(f"numpy a*b+c over 1e7 float64: {reference * 1e3:.1f} ms (the unit below)")
    print(f"{'case':34s} {'median s':>9s} {'x numpy':>9s}")
    for name, run in CASES.items():
        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
        median = statistics.median(times)
        print(f"{name:34s} {median:9.3f} {median / reference:9.0f}")


if __name__ == "__main__":
    main()
