"""`shardwise serve --ttft-max T --tpot-max T`: the serving plan (TP x PP, replicas filling the
GPUs), weight precision and load with the most generated tokens per second per GPU whose TTFT and
TPOT percentiles stay within the targets, under in-flight batching (`engines.inflight`).

For each plan and precision the load (requests in flight per replica, a closed loop) doubles from
1 while the targets hold, then bisects between the last load that held and the first that did
not: latency grows with the load and throughput with it, so the last load that holds is the
plan's best. Each option says what stops it: a target missed at the next load, a full KV cache,
or that it does not fit at all.

Each load is priced as `serve --concurrency` prices it: `engines.inflight.estimate_inflight` on the
same replica, with the table's requests, rounds per user and seed (1,000 requests, 8 per user by
default), so the option's figures are those its `in full:` command prints. (Fewer requests and
rounds, 300 at 4 per user as before, put the cold start -- every user's first prompt arriving at
once -- inside the p90 and rejected loads the table meets: review 32.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from shardwise.engines.engine_presets import DEFAULT_MAX_SEQUENCES
from shardwise.engines.inflight import SIMULATED_REQUESTS, InflightEstimate, Replica, estimate_inflight
from shardwise.errors import SpecError
from shardwise.specs import Cluster, Model, Scenario
from shardwise.specs.serving import ServingWorkload

PERCENTILES = ("p50", "p90", "p99")
BISECTIONS = 3
# More bisections at most, per option whose untried loads could still reach the best's throughput
# (`_refine_contenders`): a bracket of g / 8 after BISECTIONS closes to one request from g < 2^(3+5).
REFINE_MAX = 5


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


def precisions(cluster: Cluster, engine: str = "tensorrt-llm", model: Model | None = None) -> list[tuple[str, str]]:
    """(weights, KV cache) worth trying on this GPU: every weight format `engine` runs there
    (`engines.engine_formats.weight_formats_on`: 16 bits (fp16 on a GPU without BF16: V100); FP8,
    INT8, INT4 and NVFP4 where the engine runs them on that GPU; llama.cpp's GGUF blocks q8_0 and
    q4_K; q4_0 is priced as q4_K, the same 0.5625 bytes a weight, so only q4_K is tried), not MXFP4
    (a checkpoint's format, gpt-oss's experts: a model stored so is searched in it alone). The KV
    cache in 16 bits, FP8 beside FP8 or NVFP4 weights where the engine keeps an FP8 cache on the GPU
    (for `model`: `kv_formats_on`). Review 50 #5: only 16 bits and FP8 were tried, so llama.cpp on
    RTX 4090s was searched in bf16 alone (16 tokens/s per GPU for Llama 3.1 70B where q4_K gives 75)."""
    from shardwise.engines.engine_formats import kv_formats_on, weight_formats_on

    gpu = cluster.gpu
    half = gpu.sixteen_bit
    fp8_kv = "fp8" in kv_formats_on(engine, gpu, model)
    return [
        (w, "fp8" if w in ("fp8", "nvfp4") and fp8_kv else half)
        for w in dict.fromkeys(weight_formats_on(engine, gpu))
        if w not in ("mxfp4", "q4_0") and (w == half or w not in ("bf16", "fp16"))
    ]


def formats_note(cluster: Cluster, engine: str, model: Model | None = None) -> str:
    """The weight formats the search tried, in words (`precisions`)."""
    tried = ", ".join(w for w, _ in precisions(cluster, engine, model))
    return (
        f"weights searched: {tried} (what {engine} runs on the {cluster.gpu.name}; MXFP4 only as a "
        "checkpoint stores it; --weight-precision searches one)"
    )


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


class _Load:
    """One plan and precision's load search: the last load that held (`good`, its estimate) and the
    first that missed (`bad`, 0: none), so the bisection can go on (`refine`). `traffic`: the
    requests simulated per load and their seed, as `serve --requests/--seed` give them."""

    def __init__(
        self,
        scn: Scenario,
        wl: ServingWorkload,
        targets: tuple[float | None, float | None, str],
        batched: int,
        traffic: tuple[int, int] = (SIMULATED_REQUESTS, 0),
    ) -> None:
        # llama-server's slots are what it is launched with (-np): searched up to serve's old cap, so a
        # load above its default 4 is priced as launched for it, as `serve --concurrency` prices it
        if wl.engine == "llama.cpp":
            wl = replace(wl, batch=DEFAULT_MAX_SEQUENCES)
        # its runs kept: the run at capacity that every estimate reads (the rate it sustains) is one
        self.replica = Replica(scn, wl, batched, seed=traffic[1]).remembering()
        self.targets, self.batched, self.traffic = targets, batched, traffic
        self.good, self.good_est, self.bad, self.why, self.miss = 0, None, 0, "", 0.0
        self.est: InflightEstimate | None = None

    def at(self, users: int) -> tuple[InflightEstimate, str]:
        """`users` in flight in every replica, estimated as `serve --concurrency users x replicas` does."""
        replica, (requests, seed) = self.replica, self.traffic
        est = estimate_inflight(
            replica.scenario, replica.workload, users * replica.replicas, None, self.batched,
            requests, seed=seed, replica=replica,
        )  # fmt: skip
        return est, _meets(est, *self.targets)

    def double(self) -> None:
        """Loads 1, 2, 4, ... while the targets hold, up to the replica's slots."""
        replica, users = self.replica, 1
        while True:
            est, miss = self.at(users)
            if miss:
                self.bad, self.why, self.est = users, miss, est
                return
            self.good, self.good_est = users, est
            if users >= replica.slots:
                full = replica.capacity <= replica.max_sequences  # else the engine's cap (or vLLM's budget) binds
                self.why = f"{'KV cache full' if full else 'the engine runs no more'} at {replica.slots:,}"
                return
            users = min(2 * users, replica.slots)

    def open(self) -> bool:
        """Whether a load between the last that held and the first that missed is left untried."""
        return self.good > 0 and self.bad > self.good + 1

    def refine(self, steps: int) -> None:
        """Up to `steps` more bisections between `good` and `bad`."""
        for _ in range(steps):
            if not self.open():
                return
            mid = (self.good + self.bad) // 2
            est, miss = self.at(mid)
            if miss:
                self.bad, self.why = mid, miss
            else:
                self.good, self.good_est = mid, est

    def result(self) -> tuple[int, InflightEstimate | None, str, float]:
        if self.replica.table is None:
            return 0, None, "does not fit", float("inf")
        if self.good == 0:
            assert self.est is not None
            return 0, None, f"misses at 1: {self.why}", _miss_factor(self.est, *self.targets)
        return self.good, self.good_est, f"at {self.bad:,}: {self.why}" if self.bad else self.why, 0.0


def _load(
    scn: Scenario,
    wl: ServingWorkload,
    ttft_max: float | None,
    tpot_max: float | None,
    pct: str,
    batched: int,
    traffic: tuple[int, int] = (SIMULATED_REQUESTS, 0),
) -> _Load:
    """A plan and precision's load after doubling and `BISECTIONS` bisections."""
    load = _Load(scn, wl, (ttft_max, tpot_max, pct), batched, traffic)
    if load.replica.table is not None:
        load.double()
        load.refine(BISECTIONS if load.bad else 0)
    return load


def best_load(
    scn: Scenario,
    wl: ServingWorkload,
    ttft_max: float | None,
    tpot_max: float | None,
    pct: str = "p90",
    max_batched_tokens: int = 8192,
    traffic: tuple[int, int] = (SIMULATED_REQUESTS, 0),
) -> tuple[int, InflightEstimate | None, str, float]:
    """(requests in flight per replica, its estimate, why not more, how far one request misses:
    `Option.miss_factor`) for one plan and precision; `traffic`: (requests simulated, seed)."""
    return _load(scn, wl, ttft_max, tpot_max, pct, max_batched_tokens, traffic).result()


def _upper_bound(option: Option, load: _Load) -> float:
    """The most tokens per second per GPU a load below `bad` could give: in a closed loop each
    request's cycle does not shorten as the load grows, so the throughput grows at most in
    proportion to the load (Little's law), from `good`'s."""
    return option.tokens_per_s_per_gpu * (load.bad - 1) / load.good if load.open() else option.tokens_per_s_per_gpu


def _refine_contenders(options: list[Option], loads: dict[int, _Load], gpus: int) -> list[Option]:
    """Options whose untried loads could reach the best one's throughput bisected further, one step
    at a time, until none could or `REFINE_MAX` more steps each are spent; an option still within
    reach of the best then says it is tied with it within the search's resolution."""
    spent = dict.fromkeys(loads, 0)
    while True:
        best = max((o.tokens_per_s_per_gpu for o in options if o.meets), default=0.0)
        leader = next((i for i, o in enumerate(options) if o.meets and o.tokens_per_s_per_gpu == best), None)
        todo = [
            i for i, o in enumerate(options)
            if i in loads and i != leader and spent[i] < REFINE_MAX and _upper_bound(o, loads[i]) >= best
        ]  # fmt: skip
        if not todo:
            break
        for i in todo:  # a contender that overtakes makes the leader one (its bound reaches the new best)
            load = loads[i]
            load.refine(1)
            spent[i] += 1
            users, est, why, _ = load.result()
            per_gpu = 0.0 if est is None else est.throughput_tokens_per_s / gpus
            options[i] = replace(
                options[i], users_per_replica=users, tokens_per_s_per_gpu=per_gpu, estimate=est, why=why
            )
    best = max((o.tokens_per_s_per_gpu for o in options if o.meets), default=0.0)
    for i, o in enumerate(options):
        if i in loads and o.meets and o.tokens_per_s_per_gpu < best <= _upper_bound(o, loads[i]):
            options[i] = replace(o, why=f"{o.why}; tied with the best within the search's resolution")
    return options


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
    traffic: tuple[int, int] = (SIMULATED_REQUESTS, 0),
) -> list[Option]:
    """Every plan x precision's best load, best throughput per GPU first (those that meet the
    targets before those that do not, the closest misses first: `--tpot-max 1us` listed tp=1 first
    under "the closest misses are above" and cut tp=8 off the table). `candidates`: the plans
    (label, scenario, or the SpecError that refused it), default every (tp, pp) of `plans` that
    `searchable` keeps. `traffic`: (requests simulated per load, seed), `serve`'s --requests and --seed."""
    from shardwise.engines.serving import plan_for_serving
    from shardwise.specs.stages import engine_split_counts

    gpus = int(cluster.num_gpus)
    if candidates is None:  # each pipeline split as the engine splits it (TensorRT-LLM's tensor_split)
        candidates = [
            (
                _label(tp, pp),
                Scenario(
                    model,
                    cluster,
                    plan_for_serving(tp, pp, gpus // (tp * pp)).with_(
                        stage_layers=engine_split_counts(wl.engine, int(model.layers), pp)
                    ),
                ),
            )
            for tp, pp in plans(gpus, int(cluster.gpus_per_node))
            if searchable(model, wl.engine, tp, pp)
        ]
    options: list[Option] = []
    loads: dict[int, _Load] = {}  # an option's load search, where a load met the targets
    for label, scn in candidates:
        for w, kv in precision_choices or precisions(cluster, wl.engine, model):
            work = replace(wl, weight_precision=w, kv_precision=kv)
            try:
                if isinstance(scn, SpecError):
                    raise scn
                load = _load(scn, work, ttft_max, tpot_max, pct, max_batched_tokens, traffic)
                users, est, why, miss = load.result()
                if users:
                    loads[len(options)] = load
            except SpecError as exc:
                users, est, why, miss = 0, None, str(exc), float("inf")
            per_gpu = 0.0 if est is None else est.throughput_tokens_per_s / gpus
            options.append(Option(label, w, kv, users, per_gpu, est, why, miss))
            if progress is not None:
                progress()
    options = _refine_contenders(options, loads, gpus)
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
