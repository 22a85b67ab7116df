"""What the serving model guarantees for any valid setting, over a few hundred random ones: model
presets (dense and mixture-of-experts), 8-GPU systems, tp x pp replicas filling the server, the
serving engines and runtimes, weight and KV-cache precisions, prompt and output lengths, batches.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache

import numpy as np
import pytest

from shardwise import presets
from shardwise.engines.serving import ServingEstimate, estimate_serving, plan_for_serving
from shardwise.errors import SpecError
from shardwise.specs import Cluster, Model, Scenario
from shardwise.specs.serving import ENGINE_NAMES, RUNTIME_NAMES, ServingWorkload

MODELS = (
    "llama3-8b",
    "llama3-70b",
    "qwen2.5-7b",
    "mixtral-8x7b",
    "gemma2-9b",
    "llama3.2-1b",
    "qwen3-30b-a3b",
    "deepseek-v2-lite",
    "mistral-7b",
    "gpt-oss-20b",
)
SYSTEMS = ("dgx-a100", "dgx-h100", "dgx-b200", "a100-pcie-8x", "rtx4090-8x", "mi300x-8x", "l40s-8x", "dgx-h200")
RTOL = 1e-9


@dataclass(frozen=True)
class Setting:
    model: Model
    cluster: Cluster
    tp: int
    pp: int
    dp: int
    workload: ServingWorkload
    estimate: ServingEstimate

    def scenario(self, cluster: Cluster | None = None, tp: int = 0, pp: int = 0, dp: int = 0) -> Scenario:
        plan = plan_for_serving(tp or self.tp, pp or self.pp, dp or self.dp)
        return Scenario(self.model, cluster or self.cluster, plan)

    def __str__(self) -> str:
        wl = self.workload
        return (
            f"{self.model.name} on {self.cluster.name} tp={self.tp} pp={self.pp} dp={self.dp} {wl.engine}/{wl.runtime} "
            f"weights {wl.weight_precision} kv {wl.kv_precision} in {wl.input_len} out {wl.output_len} batch {wl.batch}"
        )


@cache
def settings(seed: int, n: int) -> tuple[Setting, ...]:
    rng = np.random.default_rng(seed)
    out: list[Setting] = []
    for _ in range(20 * n):
        model, cluster = presets.model(str(rng.choice(MODELS))), presets.system(str(rng.choice(SYSTEMS)))
        tp, pp = int(rng.choice([1, 2, 4, 8])), int(rng.choice([1, 1, 2]))
        if tp * pp > cluster.gpus_per_node:
            continue
        dp = cluster.gpus_per_node // (tp * pp)
        wl = ServingWorkload(
            int(rng.choice([128, 512, 2048])),
            int(rng.choice([64, 256])),
            int(rng.choice([1, 4, 16, 64])) * dp,
            weight_precision=str(rng.choice(["bf16", "bf16", "fp8", "int4"])),
            kv_precision=str(rng.choice(["bf16", "fp8"])),
            engine=str(rng.choice(ENGINE_NAMES)),
            runtime=str(rng.choice(RUNTIME_NAMES)),
        )
        try:
            est = estimate_serving(Scenario(model, cluster, plan_for_serving(tp, pp, dp)), wl)
            float(est.ttft_s)
        except SpecError:
            continue
        out.append(Setting(model, cluster, tp, pp, dp, wl, est))
        if len(out) == n:
            return tuple(out)
    raise AssertionError(f"only {len(out)} of {n} drawn settings were valid")


def _check(seed: int, n: int, check) -> None:
    bad = [f"{s}: {why}" for s in settings(seed, n) if (why := check(s))]
    assert not bad, f"{len(bad)} settings break it:\n" + "\n".join(bad[:10])


def _lengths_and_load(s: Setting) -> str | None:
    e, wl = s.estimate, s.workload
    for name in ("ttft_s", "tpot_s", "e2e_s", "throughput_tokens_per_s"):
        if not (np.isfinite(float(getattr(e, name))) and float(getattr(e, name)) > 0):
            return f"{name} = {float(getattr(e, name))}"
    if float(e.e2e_s) < float(e.ttft_s):
        return "the whole request ends before its first token"
    longer = estimate_serving(s.scenario(), replace(wl, input_len=wl.input_len * 2))
    if float(longer.ttft_s) < float(e.ttft_s) * (1 - RTOL):
        return f"TTFT fell with twice the prompt: {float(e.ttft_s):.6g} -> {float(longer.ttft_s):.6g} s"
    busier = estimate_serving(s.scenario(), replace(wl, batch=wl.batch * 2))
    if float(busier.tpot_s) < float(e.tpot_s) * (1 - RTOL):
        return f"tok/s per user rose with twice the users: {1 / float(e.tpot_s):.6g} -> {1 / float(busier.tpot_s):.6g}"
    if float(busier.ttft_s) < float(e.ttft_s) * (1 - RTOL):
        return f"TTFT fell with twice the users: {float(e.ttft_s):.6g} -> {float(busier.ttft_s):.6g} s"
    return None


def test_ttft_grows_with_the_prompt_and_each_user_slows_as_concurrency_rises():
    """Twice the prompt never shortens the time to the first token; twice the concurrent users
    never raises the tokens per second each one sees (1 / TPOT), nor shortens TTFT; every time
    and rate is finite and positive; the request ends after its first token."""
    _check(31, 100, _lengths_and_load)


def _more_gpus(s: Setting) -> str | None:
    e = s.estimate
    # the same replica on a server of its own: the replicas are independent, each holds as many
    alone = estimate_serving(s.scenario(cluster=s.cluster.with_(gpus_per_node=s.tp * s.pp), dp=1), s.workload)
    if float(alone.max_batch) != float(e.max_batch):
        return f"a replica alone holds {float(alone.max_batch)} sequences, beside others {float(e.max_batch)}"
    if s.dp >= 2:  # the same TP, twice the pipeline stages per replica (half the replicas)
        try:
            deeper = estimate_serving(s.scenario(pp=2 * s.pp, dp=s.dp // 2), s.workload)
        except SpecError:
            return None
        if float(deeper.max_batch) < float(e.max_batch):
            return f"max batch per replica fell from {float(e.max_batch)} to {float(deeper.max_batch)} with pp x2"
    g = s.cluster.gpu
    roomier = s.cluster.with_(gpu=g.with_(memory_bytes=g.memory_bytes * 2))
    bigger = estimate_serving(s.scenario(cluster=roomier), s.workload)
    if float(bigger.max_batch) < float(e.max_batch):
        return f"max batch fell from {float(e.max_batch)} to {float(bigger.max_batch)} with twice the memory"
    return None


def test_more_gpus_of_the_same_tp_never_lower_the_max_batch():
    """A replica's largest batch (its KV cache) is the same beside other replicas as alone, never
    falls when the replica gets more GPUs at the same TP (pp x2) nor when each GPU has more memory."""
    _check(32, 100, _more_gpus)


def _faster_hardware(s: Setting) -> str | None:
    c, g = s.cluster, s.cluster.gpu
    link = c.intra_node_link
    faster = {
        "link": c.with_(intra_node_link=link.with_(bandwidth_bytes_per_s=link.bandwidth_bytes_per_s * 3)),
        "gpu": c.with_(
            gpu=g.with_(
                peak_flops_per_s_16bit=g.peak_flops_per_s_16bit * 2,
                peak_flops_per_s_fp8=g.peak_flops_per_s_fp8 * 2,
                peak_flops_per_s_fp4=g.peak_flops_per_s_fp4 * 2,
                memory_bandwidth_bytes_per_s=g.memory_bandwidth_bytes_per_s * 2,
            )
        ),
    }
    for name, cluster in faster.items():
        e = estimate_serving(s.scenario(cluster=cluster), s.workload)
        for t in ("ttft_s", "tpot_s"):
            if float(getattr(e, t)) > float(getattr(s.estimate, t)) * (1 + RTOL):
                return f"a faster {name} raised {t}: {float(getattr(s.estimate, t)):.6g} -> {float(getattr(e, t)):.6g}"
    return None


def test_faster_links_and_gpus_never_slow_serving():
    _check(33, 100, _faster_hardware)


@pytest.mark.slow
@pytest.mark.parametrize("check", [_lengths_and_load, _more_gpus, _faster_hardware], ids=["load", "gpus", "hardware"])
def test_serving_invariants_many(check):
    _check(34, 300, check)
