"""Predicted against 900 public training runs (NVIDIA DGX Cloud benchmarking, Megatron-Bridge and
NeMo performance summaries, ...): `data/public_training_runs.csv`, normalised from the published
tables with their source columns (see `data/PUBLIC_RUNS.md`).

Each row either becomes a `Scenario` (model preset, system preset, the published layout, the
framework preset's execution flags; for mixture-of-experts rows the preset and expert tensor
parallelism of `public_moe`) or is skipped with the reason (hybrid Mamba models, FP4, LoRA, a
framework without a preset, an incomplete layout). Errors are in step
time: throughput rows convert exactly (step = global batch x sequence / (tokens/s/GPU x GPUs)).

Metrics per table (one table per public source):
- MAPE and bias (mean signed error) of the step time;
- ranking: within each group (one model, one system, one GPU count, one sequence length) the
  distinct layouts are ranked by tokens/s per GPU, measured and predicted: Spearman's rho per
  group with at least 3 layouts (mean over groups), and the share of layout pairs ordered right
  (all groups with 2 or more; pairs measured within 1% of each other are left out, pairs the
  model predicts exactly tied count half, as in Harrell's concordance index);
- a flat baseline beside the model: Eq. 3 FLOPs (Narayanan et al. 2021; the model FLOPs of
  three passes plus what recomputation repeats) at one fixed fraction of the GPU's dense peak
  in the run's precision (FP8 runs: the FP8 peak), that fraction set on Narayanan et al. 2021
  Table 1 alone (`baseline_fraction`).

Rows carry the split made before any tuning (`split`: dev or holdout, by a hash of the group, so
a group's layouts stay together). Nothing in the cost model is fitted to either; the dev rows are
the ones looked at while developing, the holdout rows are reported apart.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from dataclasses import dataclass
from functools import cache
from importlib import resources

import numpy as np

from shardwise.analyses import public_lora, public_moe, public_stacks
from shardwise.errors import SpecError
from shardwise.physics.lora import DEFAULT_RANK, DEFAULT_TARGETS

# Relative difference below which two measured layouts count as tied for ranking.
RANK_TIE = 0.01


@dataclass(frozen=True)
class PublicRow:
    """One public run, predicted (or skipped with `skip`)."""

    run_id: str
    source: str  # the table it belongs to (repository / document)
    locator: str
    label: str
    group: str
    layout: str  # distinct-layout key inside the group
    split: str
    measured_step_s: float
    predicted_step_s: float  # nan when skipped
    baseline_step_s: float  # nan when skipped
    tokens_per_step: float
    num_gpus: int
    skip: str = ""
    moe: bool = False  # a mixture-of-experts run (reported apart from the dense ones)
    lora: bool = False  # a LoRA fine-tuning run (reported apart from the full training ones)

    @property
    def error(self) -> float:
        return (self.predicted_step_s - self.measured_step_s) / self.measured_step_s

    @property
    def baseline_error(self) -> float:
        return (self.baseline_step_s - self.measured_step_s) / self.measured_step_s


@cache
def raw_rows() -> tuple[dict[str, str], ...]:
    text = resources.files("shardwise.data").joinpath("public_training_runs.csv").read_text(encoding="utf-8")
    return tuple(csv.DictReader(text.splitlines()))


def source_of(row: dict[str, str]) -> str:
    """The table a row is reported under: the publishing repository or site."""
    src = row["source"]
    for key, name in (
        ("dgxc-benchmarking", "NVIDIA dgxc-benchmarking"),
        ("Megatron-Bridge", "NVIDIA-NeMo Megatron-Bridge"),
        ("Automodel", "NVIDIA-NeMo Automodel"),
        ("NVIDIA/NeMo", "NVIDIA NeMo performance docs"),
        ("docs.nvidia.com", "NVIDIA NeMo performance docs"),
        ("Pai-Megatron", "alibaba Pai-Megatron-Patch"),
    ):
        if key in src:
            return name
    words = src.split(" ")
    if words[0] == "GitHub" and len(words) > 1:  # the repository that published it
        return words[1]
    return words[0]


def _int(value: str, default: int | None = None) -> int | None:
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return default


# Rows whose published layout the same source contradicts, each with its evidence (found while
# reading the dev split's mis-ranked groups; the rows are skipped, not corrected).
LAYOUT_CONTRADICTED = {
    "PUB-0167": "the 26.02.01 table prints VP n/a and MBS 2; that release's recipe runs pp4 vp5 mbs1 "
    "(Megatron-Bridge v0.3.x scripts/performance/configs/llama/llama3_workload_base_configs.py, "
    "LLAMA3_70B_PRETRAIN_CONFIG_GB300_FP8_MX_V2)",
    "PUB-0176": "the 26.02.01 table prints tp2 cp2 with 26.04.01's number (PUB-0081); that release's "
    "recipe runs tp4 cp1 (the same recipe file)",
    # dgxc-benchmarking's Llama 4 Maverick README of 2025-06-10 (68eaf7e117) gave the model 32 layers;
    # from 2025-06-18 (60d6fd33ba) the same tables, with the same step times, give 48 (PUB-0837..0844),
    # Maverick's count (its config.json: num_hidden_layers 48), and 32 is not divisible by pp x vp = 24
    **{
        f"PUB-{i:04d}": f"the 2025-06-10 README gives Llama 4 Maverick 32 layers; the same step time is "
        f"published from 2025-06-18 with its 48 layers (PUB-{i + 35:04d})"
        for i in range(802, 810)
    },
}


@cache
def _published_twice() -> dict[str, str]:
    """Row id -> why: the same number of the same source (model, system, GPUs, precision, batch)
    published under two layouts, one stated beside the table and one from the document's overview
    line. It is one run: the table's layout is kept, the overview's row skipped."""
    from collections import defaultdict

    same: dict[tuple[str, ...], list[dict[str, str]]] = defaultdict(list)
    for r in raw_rows():
        if r["measured"]:
            key = ("source", "model", "system", "num_gpus", "precision", "gbs", "measured")
            same[tuple(r[k] for k in key)].append(r)
    out = {}
    for rows in same.values():
        stated = [r for r in rows if "Overview" not in r["locator"] and r["tp"] and r["pp"]]
        for r in rows:
            if "Overview" in r["locator"] and stated and _layout_of(r) != _layout_of(stated[0]):
                out[r["id"]] = f"the same number as {stated[0]['id']}, whose table states another layout"
    return out


def _layout_of(row: dict[str, str]) -> tuple[str, ...]:
    return tuple(row[k] for k in ("tp", "pp", "cp", "vp", "mbs"))


def skip_reason(row: dict[str, str]) -> str:
    """Why the model cannot express this row (empty: it can)."""
    if row["id"] in LAYOUT_CONTRADICTED:
        return "published layout contradicted by its source"
    if row["id"] in _published_twice():
        return "published twice under two layouts (the table's is kept)"
    if row["moe"] == "yes" and public_moe.is_split_duplicate(row):
        return "duplicate of the previous row (one model cell split in two)"
    if row["architecture_note"] and row["architecture_note"] != "mla":  # latent attention is modelled
        return f"{row['architecture_note']} (not modelled)"
    if row["workload"] not in ("pretrain", "sft", "lora"):
        return f"workload {row['workload']!r} is not a training step"
    stack = public_stacks.skip_reason(row)
    if stack:
        return stack
    if not row["model"] or not row["system"]:
        return "model or system not known to shardwise"
    if row["moe"] == "yes" and not _int(row["ep"]):
        return "layout incomplete"
    if row["precision"] == "nvfp4":
        return "NVFP4 training is not modelled"
    if row["precision"] not in ("bf16", "fp16", "fp8", "mxfp8"):
        return "precision not stated" if not row["precision"] else f"precision {row['precision']!r} not modelled"
    if any(_int(row[k]) is None for k in ("tp", "pp", "dp", "mbs", "gbs", "seq_len", "layers", "num_gpus")):
        return "layout incomplete"
    if (_int(row["pp"]) or 1) > 1 and _int(row["vp"]) is None:  # the pipeline's schedule is unknown
        return "layout incomplete"
    if not row["measured"]:
        return "no measurement"
    return ""


def request_for(row: dict[str, str]):
    """The `TrainingRequest` of a public run: the request layer's defaults (sequence parallelism
    on where tp > 1, the framework's ZeRO stage) with what the row states -- its stack and the
    kernels its notes name (`public_stacks`), its network, expert layout and LoRA rank."""
    from shardwise.requests.training import TrainingRequest

    preset, kernels = public_stacks.execution(row)
    moe = row["moe"] == "yes"
    modules = public_moe.recompute_modules(row) if moe else None  # the recipe's, where tabled
    lora = _lora(row)
    # the stated network, where the run spans servers (a one-server run keeps the system's)
    spans = int(row["num_gpus"]) > _system_gpus(row["system"])
    link, nics = (public_stacks.network(row) if spans else None) or (None, None)
    return TrainingRequest(
        model=row["model"],
        layers=int(row["layers"]),
        seq_len=int(row["seq_len"]),
        system=row["system"],
        num_gpus=int(row["num_gpus"]),
        inter_link=link,
        nics_per_node=nics,
        tp=int(row["tp"]),
        pp=int(row["pp"]),
        dp=int(row["dp"]),
        cp=_int(row["cp"], 1) or 1,
        vpp=_int(row["vp"], 1) or 1,
        global_batch=int(row["gbs"]),
        micro_batch=int(row["mbs"]),
        recompute=kernels.pop("recompute", None)
        or ("selective" if modules else "none" if modules == () else None)
        or (lora and lora.recompute)
        or public_stacks.recompute(row),
        recompute_modules=kernels.pop("recompute_modules", None) or ",".join(modules or ()),
        zero=public_stacks.zero_stage(row, None),
        shard_group=public_stacks.shard_group(row),
        precision=row["precision"],
        ep=_int(row["ep"], 1) or 1,
        etp=public_moe.expert_tp(row) if moe else None,
        moe_dispatcher=public_moe.dispatcher(row) if moe else "alltoall",
        moe_overlap=moe and public_moe.a2a_overlap(row),
        lora_rank=lora.rank if lora else 0,
        lora_targets=lora.targets if lora else DEFAULT_TARGETS,
        packed_document_len=lora.document_len if lora else 0,
        pipeline_flushes=lora.flushes if lora else 1,
        mtp_layers=public_moe.mtp_layers(row) if moe else 0,
        **(_split(public_moe.stage_layers(row)) if moe else {}),
        framework=preset,
        **kernels,
    )


def _split(counts: tuple[int, ...] | None) -> dict[str, object]:
    """A recipe's pipeline split as request fields: the first and last stages' layers where the
    middle ones are even, else every stage's (empty: the default even split)."""
    if counts is None:
        return {}
    middle = set(counts[1:-1])
    if len(middle) <= 1:
        return {"first_stage_layers": counts[0], "last_stage_layers": counts[-1]}
    return {"stage_layers": ",".join(map(str, counts))}


def _lora(row: dict[str, str]) -> public_lora.LoraRecipe | None:
    """A LoRA row's recipe (`public_lora.recipe`), Megatron-Bridge's defaults where its source is
    not listed; None for full training."""
    if row["workload"] != "lora":
        return None
    return public_lora.recipe(row) or public_lora.LoraRecipe(DEFAULT_RANK, DEFAULT_TARGETS, 0, "", "default")


def _system_gpus(name: str) -> int:
    from shardwise import presets

    return int(presets.system(name).gpus_per_node)


def scenario_for(row: dict[str, str]):
    """The Scenario of a public run (raises SpecError when the layout is not valid)."""
    return request_for(row).scenario()


def measured_step_s(row: dict[str, str], model_flops_per_step: float | None = None) -> float:
    """The published figure as seconds per step (model TFLOP/s per GPU need the model's FLOPs per
    step: Megatron's count, which is ours)."""
    tokens = float(row["gbs"]) * float(row["seq_len"])
    value = float(row["measured"])
    if row["metric"] == "step_time_s":
        return value
    if row["metric"] == "tokens_per_s_per_gpu":
        return tokens / (value * float(row["num_gpus"]))
    if row["metric"] == "model_tflops_per_gpu" and model_flops_per_step is not None:
        return model_flops_per_step / (value * 1e12 * float(row["num_gpus"]))
    raise SpecError(f"{row['id']}: metric {row['metric']} needs the model's FLOPs per step")


@cache
def baseline_fraction() -> float:
    """The flat baseline's fraction of peak: Narayanan et al. 2021 Table 1's mean measured
    TFLOP/s per GPU (Eq. 3, recomputation included) over the A100's 312 TFLOP/s."""
    from shardwise.analyses.validation import measured_runs
    from shardwise.analyses.validation import scenario_for as t1_scenario

    fractions = []
    for run_id, row in measured_runs().items():
        if row["group"] == "narayanan21_table1":
            gpu = t1_scenario(run_id).cluster.gpu
            fractions.append(float(row["tflops_per_gpu"]) * 1e12 / float(gpu.peak_flops_per_s_16bit))
    return float(np.mean(fractions))


def baseline_step_s(est, n_gpus: int) -> float:
    gpu, precision = est.scenario.cluster.gpu, est.scenario.plan.precision
    peak = float(gpu.peak_flops_per_s(precision))
    return float(est.hardware_flops_per_step) / (n_gpus * peak * baseline_fraction())


def _layout_key(row: dict[str, str]) -> str:
    keys = ("tp", "pp", "cp", "vp", "ep", "dp", "fsdp", "mbs", "gbs", "precision", "recompute", "layers")
    return " ".join(f"{k}{row[k]}" for k in keys)


def _label(row: dict[str, str]) -> str:
    vp = f" vp{row['vp']}" if (_int(row["vp"], 1) or 1) > 1 else ""
    cp = f" cp{row['cp']}" if (_int(row["cp"], 1) or 1) > 1 else ""
    recipe = _lora(row)
    lora = ""
    if recipe:
        targets = "" if recipe.targets == DEFAULT_TARGETS else f" {recipe.targets}"
        packed = f" packed {recipe.document_len}" if recipe.document_len else ""
        lora = f", LoRA r{recipe.rank}{targets}{packed}"
    return (
        f"{row['model'] or row['model_raw']}, {row['num_gpus']} {row['system'] or row['gpu_raw']}, "
        f"tp{row['tp']} pp{row['pp']}{vp}{cp} mb{row['mbs']} gbs{row['gbs']}, {row['precision']}{lora}"
    )


@cache
def validate_public() -> tuple[PublicRow, ...]:
    """Every public row, predicted or skipped with its reason."""
    from shardwise.engines.training import estimate_training_step

    out = []
    for raw in raw_rows():
        row = public_moe.resolved(raw)
        reason = skip_reason(row)
        pred = base = meas = float("nan")
        if not reason:
            try:
                scn = scenario_for(row)
            except SpecError as exc:
                reason = f"not a valid layout for shardwise: {exc}"
            else:
                est = estimate_training_step(scn)
                meas = measured_step_s(row, float(est.model_flops_per_step))
                pred = float(est.step_time_s)
                base = baseline_step_s(est, int(row["num_gpus"]))
        out.append(
            PublicRow(
                run_id=row["id"],
                source=source_of(row),
                locator=row["locator"],
                label=_label(row),
                group=row["group"],
                layout=_layout_key(row),
                split=row["split"],
                measured_step_s=meas,
                predicted_step_s=pred,
                baseline_step_s=base,
                tokens_per_step=float(row["gbs"] or "nan") * float(row["seq_len"] or "nan"),
                num_gpus=_int(row["num_gpus"], 0) or 0,
                skip=reason,
                moe=row["moe"] == "yes",
                lora=row["workload"] == "lora",
            )
        )
    return tuple(out)


@dataclass(frozen=True)
class TableSummary:
    """Accuracy of the model and the flat baseline on one set of rows."""

    name: str
    rows: int
    skipped: int
    mape: float
    bias: float
    baseline_mape: float
    baseline_bias: float
    spearman: float  # mean over groups with >= 3 distinct layouts (nan: none)
    spearman_groups: int
    pairs_right: float  # share of layout pairs within a group ordered right (nan: none)
    pairs: int
    baseline_pairs_right: float


def _ranking(rows: list[PublicRow], which: str) -> tuple[float, int, float, int]:
    """(mean Spearman rho, groups, share of pairs ordered right, pairs) for `which` prediction."""
    by_group: dict[str, dict[str, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        pred = r.predicted_step_s if which == "model" else r.baseline_step_s
        # tokens/s per GPU, measured and predicted (the GPU count is the group's)
        by_group[r.group][r.layout].append((r.tokens_per_step / r.measured_step_s, r.tokens_per_step / pred))
    rhos, right, total = [], 0.0, 0
    for layouts in by_group.values():
        if len(layouts) < 2:
            continue
        meas = np.array([np.mean([m for m, _ in v]) for v in layouts.values()])
        # to 9 significant digits: a mean of 5 equal predictions and of 2 must tie, not differ by
        # one unit in the last place
        pred = np.array([float(f"{np.mean([p for _, p in v]):.9g}") for v in layouts.values()])
        for i in range(len(meas)):
            for j in range(i + 1, len(meas)):
                if abs(meas[i] - meas[j]) <= RANK_TIE * max(meas[i], meas[j]):
                    continue
                total += 1
                agree = (meas[i] - meas[j]) * (pred[i] - pred[j])
                # a predicted tie says nothing: half a pair, as in Harrell's concordance index
                right += 1.0 if agree > 0 else (0.5 if pred[i] == pred[j] else 0.0)
        if len(meas) >= 3:
            rho = spearman(meas, pred)
            if not np.isnan(rho):  # undefined when every measured (or predicted) value ties
                rhos.append(rho)
    mean_rho = float(np.mean(rhos)) if rhos else float("nan")
    return mean_rho, len(rhos), (right / total if total else float("nan")), total


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation (average ranks for ties)."""

    def ranks(x: np.ndarray) -> np.ndarray:
        order = np.argsort(x, kind="stable")
        r = np.empty(len(x))
        r[order] = np.arange(len(x), dtype=float)
        for v in np.unique(x):  # average ties
            idx = x == v
            r[idx] = r[idx].mean()
        return r

    ra, rb = ranks(np.asarray(a, float)), ranks(np.asarray(b, float))
    if np.std(ra) == 0 or np.std(rb) == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def summarize(name: str, rows: list[PublicRow]) -> TableSummary:
    done = [r for r in rows if not r.skip]
    err = np.array([r.error for r in done])
    berr = np.array([r.baseline_error for r in done])
    rho, n_rho, pairs_right, n_pairs = _ranking(done, "model")
    _, _, b_pairs_right, _ = _ranking(done, "baseline")

    def stat(x: np.ndarray, f) -> float:
        return float(f(x)) if len(x) else float("nan")

    return TableSummary(
        name=name,
        rows=len(done),
        skipped=len(rows) - len(done),
        mape=stat(np.abs(err), np.mean),
        bias=stat(err, np.mean),
        baseline_mape=stat(np.abs(berr), np.mean),
        baseline_bias=stat(berr, np.mean),
        spearman=rho,
        spearman_groups=n_rho,
        pairs_right=pairs_right,
        pairs=n_pairs,
        baseline_pairs_right=b_pairs_right,
    )


def summaries(split: str | None = None) -> list[TableSummary]:
    """One summary per public source of dense runs and one for all of them, one for the
    mixture-of-experts runs and one for the LoRA fine-tuning runs (all sources), on `split` rows
    (None: all)."""
    rows = [r for r in validate_public() if split is None or r.split == split]
    dense = [r for r in rows if not r.moe and not r.lora]
    by_source: dict[str, list[PublicRow]] = defaultdict(list)
    for r in dense:
        by_source[r.source].append(r)
    out = [summarize(name, rs) for name, rs in sorted(by_source.items())]
    out.append(summarize("all public sources", dense))
    out.append(summarize(MOE_TABLE, [r for r in rows if r.moe]))
    out.append(summarize(LORA_TABLE, [r for r in rows if r.lora]))
    return out


MOE_TABLE = "mixture of experts (all sources)"
LORA_TABLE = "LoRA fine-tuning (all sources)"


@cache
def round_one_rows() -> tuple[PublicRow, ...]:
    """Narayanan et al. 2021 Table 1 and Korthikanti et al. 2022 Table 5 as step times, with the
    flat baseline, so they sit in the same table (split: the table's name)."""
    from shardwise.analyses.validation import measured_runs, plan_label
    from shardwise.analyses.validation import scenario_for as run_scenario

    out = []
    for run_id, row in measured_runs().items():
        if row["group"] not in ("narayanan21_table1", "korthikanti22_table5"):
            continue
        scn = run_scenario(run_id)
        from shardwise.engines.training import estimate_training_step

        est = estimate_training_step(scn)
        n = int(np.asarray(scn.plan.num_gpus))
        if row["group"] == "narayanan21_table1":  # TFLOP/s per GPU (Eq. 3) -> seconds per step
            measured = float(est.hardware_flops_per_step) / (float(row["tflops_per_gpu"]) * 1e12 * n)
            name = "Narayanan et al. 2021 Table 1"
        else:
            measured = float(row["step_time_s"])
            name = "Korthikanti et al. 2022 Table 5"
        out.append(
            PublicRow(
                run_id=run_id,
                source=name,
                locator=row["locator"],
                label=f"{scn.model.name}, {n} GPUs, {plan_label(scn.plan)}",
                group=f"{row['group']}|{scn.model.name}|{n}",
                layout=plan_label(scn.plan),
                split=name,
                measured_step_s=measured,
                predicted_step_s=float(est.step_time_s),
                baseline_step_s=baseline_step_s(est, n),
                tokens_per_step=float(scn.plan.global_batch) * float(scn.model.seq_len),
                num_gpus=n,
            )
        )
    return tuple(out)


def skip_counts(split: str | None = None) -> dict[str, int]:
    """How many rows were skipped, by reason (the first clause of the reason)."""
    counts: dict[str, int] = defaultdict(int)
    for r in validate_public():
        if r.skip and (split is None or r.split == split):
            counts[r.skip.split(":")[0]] += 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))
