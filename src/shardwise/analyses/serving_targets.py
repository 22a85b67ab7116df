"""`shardwise serve --ttft-max T --tpot-max T`: the serving plan (TP x PP, replicas filling the
GPUs), weight precision and load with the most generated tokens per second per GPU whose TTFT and
TPOT percentiles stay within the targets, under in-flight batching (`engines.inflight`).

For each plan and precision the load (requests in flight per replica, a closed loop) doubles from
1 while the targets hold, then bisects between the last load that held and the first that did
not: latency grows with the load and throughput with it, so the last load that holds is the
plan's best. Each option says what stops it: a target missed at the next load, a full KV cache,
or that it does not fit at all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from shardwise.engines.inflight import InflightEstimate, Replica, Traffic, estimate_from
from shardwise.errors import SpecError
from shardwise.specs import Cluster, Model, Scenario
from shardwise.specs.serving import ServingWorkload

PERCENTILES = ("p50", "p90", "p99")
# Requests simulated per load tried (at least SEARCH_ROUNDS per user): enough for a p99 of 300.
SEARCH_REQUESTS = 300
SEARCH_ROUNDS = 4
BISECTIONS = 3


@dataclass(frozen=True)
class Option:
    """The best load of one plan and precision (or why it has none)."""

    label: str
    weight_precision: str
    kv_precision: str
    users_per_replica: int  # 0: no load meets the targets
    tokens_per_s_per_gpu: float
    estimate: InflightEstimate | None
    why: str
    # how far one request in flight misses: its worst percentile over its target (inf: does not fit or
    # refused), 0 where a load meets the targets; misses are listed closest first
    miss_factor: float = 0.0

    @property
    def meets(self) -> bool:
        return self.users_per_replica > 0


def plans(num_gpus: int, per_node: int) -> list[tuple[int, int]]:
    """(tp, pp) with TP inside a server and tp x pp dividing the GPUs."""
    out = []
    for tp in (t for t in range(1, per_node + 1) if per_node % t == 0 and num_gpus % t == 0):
        for pp in (p for p in range(1, num_gpus // tp + 1) if (num_gpus // tp) % p == 0):
            out.append((tp, pp))
    return out


def precisions(cluster: Cluster) -> list[tuple[str, str]]:
    """(weights, KV cache) worth trying on this GPU: 16 bits; FP8 where it has FP8 tensor cores;
    NVFP4 weights (FP8 KV cache) where it has FP4 ones."""
    gpu = cluster.gpu
    out = [("bf16", "bf16")]
    if float(gpu.peak_flops_per_s_fp8) > 0:
        out.append(("fp8", "fp8"))
    if float(gpu.peak_flops_per_s_fp4) > 0:
        out.append(("nvfp4", "fp8"))
    return out


def _meets(est: InflightEstimate, ttft_max: float | None, tpot_max: float | None, pct: str) -> str:
    """'' when both targets hold, else which one fails and by how much."""
    p = est.percentiles_s or {}
    ttft, tpot = p["ttft_s"][pct], p["tpot_s"][pct]
    from shardwise.units import format_seconds_beside

    misses = []
    if ttft_max is not None and not ttft <= ttft_max:
        misses.append(f"TTFT {format_seconds_beside(ttft, ttft_max)}")
    if tpot_max is not None and not tpot <= tpot_max:
        misses.append(f"TPOT {format_seconds_beside(tpot, tpot_max)}")
    return ", ".join(misses)


def _miss_factor(est: InflightEstimate, ttft_max: float | None, tpot_max: float | None, pct: str) -> float:
    """The worst of the percentiles over their targets (above 1: a miss)."""
    p = est.percentiles_s or {}
    pairs = ((p["ttft_s"][pct], ttft_max), (p["tpot_s"][pct], tpot_max))
    return max(float(value) / limit for value, limit in pairs if limit is not None)


def best_load(
    scn: Scenario,
    wl: ServingWorkload,
    ttft_max: float | None,
    tpot_max: float | None,
    pct: str = "p90",
    max_batched_tokens: int = 8192,
) -> tuple[int, InflightEstimate | None, str, float]:
    """(requests in flight per replica, its estimate, why not more, how far one request misses:
    `Option.miss_factor`) for one plan and precision."""
    replica = Replica(scn, wl, max_batched_tokens)
    if replica.table is None:
        return 0, None, "does not fit", float("inf")

    def at(users: int) -> tuple[InflightEstimate, str]:
        sim = replica.run(Traffic(users=users, requests=SEARCH_REQUESTS, rounds=SEARCH_ROUNDS))
        est = estimate_from(replica, sim, sim, users * replica.replicas, None)
        return est, _meets(est, ttft_max, tpot_max, pct)

    good, good_est, bad, why = 0, None, 0, ""
    users = 1
    while True:
        est, miss = at(users)
        if miss:
            bad, why = users, miss
            break
        good, good_est = users, est
        if users >= replica.slots:
            full = replica.capacity <= replica.max_sequences  # else the engine's cap (or vLLM's budget) binds
            why = f"{'KV cache full' if full else 'the engine runs no more'} at {replica.slots:,}"
            break
        users = min(2 * users, replica.slots)
    if good == 0:
        return 0, None, f"misses at 1: {why}", _miss_factor(est, ttft_max, tpot_max, pct)
    for _ in range(BISECTIONS if bad else 0):
        mid = (good + bad) // 2
        if mid in (good, bad):
            break
        est, miss = at(mid)
        if miss:
            bad, why = mid, miss
        else:
            good, good_est = mid, est
    if bad:
        why = f"at {bad:,}: {why}"
    return good, good_est, why, 0.0


def search(
    model: Model,
    cluster: Cluster,
    wl: ServingWorkload,
    ttft_max: float | None,
    tpot_max: float | None,
    pct: str = "p90",
    candidates: Iterable[tuple[str, Scenario | SpecError]] | None = None,
    precision_choices: list[tuple[str, str]] | None = None,
    max_batched_tokens: int = 8192,
    progress: Callable[[], None] | None = None,
) -> list[Option]:
    """Every plan x precision's best load, best throughput per GPU first (those that meet the
    targets before those that do not, the closest misses first: `--tpot-max 1us` listed tp=1 first
    under "the closest misses are above" and cut tp=8 off the table). `candidates`: the plans
    (label, scenario, or the SpecError that refused it), default every (tp, pp) of `plans` that
    `searchable` keeps."""
    from shardwise.engines.serving import plan_for_serving

    gpus = int(cluster.num_gpus)
    if candidates is None:
        candidates = [
            (_label(tp, pp), Scenario(model, cluster, plan_for_serving(tp, pp, gpus // (tp * pp))))
            for tp, pp in plans(gpus, int(cluster.gpus_per_node))
            if searchable(model, wl.engine, tp, pp)
        ]
    options = []
    for label, scn in candidates:
        for w, kv in precision_choices or precisions(cluster):
            work = replace(wl, weight_precision=w, kv_precision=kv)
            try:
                if isinstance(scn, SpecError):
                    raise scn
                users, est, why, miss = best_load(scn, work, ttft_max, tpot_max, pct, max_batched_tokens)
            except SpecError as exc:
                users, est, why, miss = 0, None, str(exc), float("inf")
            per_gpu = 0.0 if est is None else est.throughput_tokens_per_s / gpus
            options.append(Option(label, w, kv, users, per_gpu, est, why, miss))
            if progress is not None:
                progress()
    return sorted(options, key=lambda o: (not o.meets, -o.tokens_per_s_per_gpu, o.miss_factor))


def searchable(model: Model, engine: str, tp: int, pp: int) -> bool:
    """A layout the search prices: tp splits the attention heads and the KV heads (or replicates
    them, `_kv_heads_fit`), and every stage holds a layer."""
    return model.heads % tp == 0 and _kv_heads_fit(int(model.kv_heads), tp, engine) and pp <= model.layers


def without_twins(options: list[Option], twins: dict[str, str]) -> tuple[list[Option], tuple[tuple[str, str], ...]]:
    """`options` less each with the experts whole inside its replica (ep = tp, a key of `twins`)
    that does not fit where its twin with them split by TP (ep 1) does not fit either at the same
    precision: the same weights and KV cache per GPU (`requests.serve_plans.Layouts.twins`), so a
    second row saying the same. Also the (label, weight precision) pairs dropped, in order."""
    empty = {(o.label, o.weight_precision) for o in options if o.estimate is None and o.why == "does not fit"}
    gone = {
        id(o): (o.label, o.weight_precision)
        for o in options
        if o.label in twins and {(o.label, o.weight_precision), (twins[o.label], o.weight_precision)} <= empty
    }
    return [o for o in options if id(o) not in gone], tuple(gone.values())


def _label(tp: int, pp: int) -> str:
    """A layout as --plan writes it and serve's main table names it: 'tp=2', 'tp=1,pp=2'."""
    return f"tp={tp}" + (f",pp={pp}" if pp > 1 else "")


def _kv_heads_fit(kv_heads: int, tp: int, engine: str) -> bool:
    """tp splits the KV heads, or, under an engine that replicates them (`specs.rules.KV_REPLICATING`),
    is a multiple of them: each rank a replica of one (`specs.rules.kv_replica_rule`)."""
    from shardwise.specs.rules import KV_REPLICATING, kv_replica_rule

    return bool(kv_replica_rule(tp, kv_heads).ok) if engine in KV_REPLICATING else kv_heads % tp == 0
