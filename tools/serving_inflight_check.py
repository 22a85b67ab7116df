"""The in-flight simulation (serve's default, `engines.inflight`) against the one static full batch that
`validate inference` prices its TensorRT-LLM rows with (`analyses.serving_validation`): each row's error
both ways and the mean absolute error of each, so the serving interval's basis can say how its rows
were priced and what the simulation gives on them (review 50 #11). About 20 s on one core.

    PYTHONPATH=src python tools/serving_inflight_check.py
"""

from __future__ import annotations

import numpy as np

from shardwise.analyses import serving_validation as sv
from shardwise.engines.engine_presets import max_batched_tokens
from shardwise.engines.inflight import estimate_inflight
from shardwise.specs.serving import ServingWorkload


def main() -> None:
    static, inflight = [], []
    for row in sv.inference_rows():
        if not sv.modelled(row) or row["framework"].startswith("FasterTransformer"):
            continue  # FasterTransformer's batch-1 latencies have no in-flight batching
        scn = sv._scenario(row)
        weights = sv.WEIGHTS[row["precision"]]
        wl = ServingWorkload(int(row["isl"]), int(row["osl"]), 1, weights, "fp8", custom_all_reduce="trtllm")
        measured = float(row["value"])
        _, _, full_batch = sv.predict(row)
        budget = max_batched_tokens("tensorrt-llm", float(scn.cluster.gpu.memory_bytes))
        # the maximum throughput: as many requests in flight as the KV cache (or the engine's cap) holds
        simulated = float(estimate_inflight(scn, wl, None, max_batched_tokens=budget).throughput_tokens_per_s)
        static.append(full_batch / measured - 1)
        inflight.append(simulated / measured - 1)
        print(f"{row['id']}: static {static[-1]:+.1%}, in-flight {inflight[-1]:+.1%}", flush=True)
    print(
        f"{len(static)} TensorRT-LLM rows: mean absolute error static {np.mean(np.abs(static)):.1%}, "
        f"in-flight {np.mean(np.abs(inflight)):.1%}"
    )


if __name__ == "__main__":
    main()
