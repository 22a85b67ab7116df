"""Plain-data views of specs and results for JSON (tables of columns: CSV or Parquet, `shardwise.tables`)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from shardwise.engines.result import TrainingEstimate
from shardwise.physics.params import total_params
from shardwise.specs import Cluster, Gpu, Link, Model, Plan, Scenario
from shardwise.specs.plan import EXECUTION_FLAGS
from shardwise.units import whole_bytes, whole_bytes_parts


def plain(value: Any) -> Any:
    """numpy scalars/arrays and enums to JSON-ready Python values."""
    if hasattr(value, "label") and not isinstance(value, (str, np.ndarray)):
        return value.label
    arr = np.asarray(value)
    # a scalar's item(): int stays int (a degree, a count), float stays float, bool stays bool
    return arr.item() if arr.ndim == 0 else arr.tolist()


def gpu_dict(gpu: Gpu) -> dict[str, Any]:
    return {
        "name": gpu.name,
        "peak_flops_per_s_16bit": plain(gpu.peak_flops_per_s_16bit),
        "peak_flops_per_s_fp8": plain(gpu.peak_flops_per_s_fp8),
        "memory_bytes": whole_bytes(gpu.memory_bytes),
        "memory_bandwidth_bytes_per_s": plain(gpu.memory_bandwidth_bytes_per_s),
        "matmul_efficiency": plain(gpu.matmul_efficiency),
        "memory_efficiency": plain(gpu.memory_efficiency),
    }


def link_dict(link: Link | None) -> dict[str, Any] | None:
    if link is None:
        return None
    return {
        "name": link.name,
        "bandwidth_bytes_per_s": plain(link.bandwidth_bytes_per_s),
        "efficiency": plain(link.efficiency),
        "latency_s": plain(link.latency_s),
        "base_latency_s": plain(link.base_latency_s),
        "nvls_efficiency": plain(link.nvls_efficiency),
        "ll_bandwidth_bytes_per_s": plain(link.ll_bandwidth_bytes_per_s),
        "mesh_links": plain(link.mesh_links),
    }


def cluster_dict(cluster: Cluster) -> dict[str, Any]:
    return {
        "name": cluster.name,
        "gpu": gpu_dict(cluster.gpu),
        "gpus_per_node": plain(cluster.gpus_per_node),
        "nodes": plain(cluster.nodes),
        "num_gpus": plain(cluster.num_gpus),
        "intra_node_link": link_dict(cluster.intra_node_link),
        "inter_node_link": link_dict(cluster.inter_node_link),
        "p2p": bool(cluster.p2p),
        "nvls": bool(cluster.nvls),
        "host_cpu": cluster.host_cpu,
    }


def model_dict(model: Model) -> dict[str, Any]:
    fields = ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "seq_len")
    flags = ("gated_mlp", "tied_embeddings", "learned_positions", "bias", "rmsnorm", "dropout")
    out: dict[str, Any] = {"name": model.name, "params": plain(total_params(model))}
    out.update({f: plain(getattr(model, f)) for f in fields})
    out.update({f: getattr(model, f) for f in (*flags, "architecture")})  # Hugging Face's model_type, or None
    return out


def plan_dict(plan: Plan) -> dict[str, Any]:
    fields = (
        "tp",
        "pp",
        "dp",
        "cp",
        "cp_comm",
        "ep",
        "expert_tp",
        "expert_imbalance",
        "moe_dispatcher",
        "moe_overlap",
        "moe_capacity_factor",
        "moe_pad_to_capacity",
        "vpp",
        "global_batch",
        "micro_batch",
        "schedule",
        "recompute",
        "recompute_layers",
        "recompute_modules",
        "mtp_layers",
        "cuda_graph_scope",
        "sequence_parallel",
        "zero_stage",
        "shard_group",
        "lora_rank",
        "lora_targets",
        "packed_document_len",
        "pipeline_flushes",
        "precision",
        "fp8_recipe",
        "flash_attention",
        "framework",
        *EXECUTION_FLAGS,
        "grad_reduce_bf16",
        "spmd_grad_reduce",
        "scan_unpipelined",
        "functional_a2a",
        "zero1_grad_all_reduce",
        "aligned_chunk_sync",
        "expandable_segments",
        "partition_activations",
        "loss_kernel",
        "optimizer_state",
        "first_stage_layers",
        "last_stage_layers",
    )
    # expert_tp written `etp`, as plan's rows, serve's plans and the flag name it (`expert_tp` until now)
    out = {("etp" if f == "expert_tp" else f): plain(getattr(plan, f)) for f in fields}
    out["stage_layers"] = list(plan.stage_layers) if plan.stage_layers is not None else None
    out["num_micro_batches"] = plain(plan.num_micro_batches)
    if plan.memory_stack:  # a framework file's `like:` (built-in presets leave it empty)
        out["memory_stack"] = plan.memory_stack
    return out


# a term of a breakdown below a picosecond is float residue (a difference of sums: dp_comm 3.4e-16 s
# for a plan with one replica, review 40 #13), written 0
RESIDUE_S = 1e-12


def seconds_parts(parts: dict[str, Any], one_replica: bool = False) -> dict[str, Any]:
    """A breakdown in seconds for JSON, each scalar term under `RESIDUE_S` written 0.0; with
    `one_replica`, the tied embedding's sync under its own key (`crossover_parts.split_embedding_sync`)."""
    from shardwise.analyses.crossover_parts import split_embedding_sync

    out = {k: 0.0 if isinstance(v, float) and abs(v) < RESIDUE_S else v for k, v in parts.items()}
    return split_embedding_sync(out, one_replica)


def one_replica(plan: Any, model: Any) -> bool:
    """One data-parallel replica of a dense model (every entry of an array plan): `dp_comm` is then
    the tied embedding's sync only (`engines.result.StepBreakdown`)."""
    return bool(np.all(np.asarray(plan.dp) * np.asarray(plan.cp) == 1)) and not model.is_moe


def scenario_dict(scn: Scenario) -> dict[str, Any]:
    plan = plan_dict(scn.plan)
    if not scn.model.is_moe:  # no experts to split: null, as plan's rows and serve's plans (review 40 #12)
        plan["etp"] = None
    return {"model": model_dict(scn.model), "cluster": cluster_dict(scn.cluster), "plan": plan}


def estimate_dict(est: TrainingEstimate) -> dict[str, Any]:
    """JSON-ready result: numbers (or lists for array scenarios) under unit-bearing keys."""
    return {
        "step_time_s": plain(est.step_time_s),
        "tokens_per_s": plain(est.tokens_per_s),
        **{k: plain(getattr(est, k)) for k in ("model_tflops_per_gpu", "model_tflops_per_gpu_full_attention")},
        **{k: plain(getattr(est, k)) for k in ("hardware_tflops_per_gpu", "mfu", "hfu", "bubble_fraction")},
        "breakdown_s": seconds_parts(
            {k: plain(v) for k, v in est.breakdown.as_dict().items()},
            one_replica(est.scenario.plan, est.scenario.model),
        ),
        "hidden_s": {k: plain(v) for k, v in est.hidden_comm_s.items()},
        "compute_parts_s": {k: plain(v) for k, v in est.compute_parts_s.items()},
        # beside the total, not in it: what the allocator would release before running out (review 52)
        "memory_bytes": whole_bytes_parts({**est.memory.as_dict(), "cached": est.memory.cached_bytes}),
        "gpu_memory_bytes": whole_bytes(est.scenario.cluster.gpu.memory_bytes),
        "fits_in_memory": plain(est.fits_in_memory),
        "mfu_16bit_peak": plain(est.mfu_16bit_peak),  # `mfu` divides by the precision's peak (FP8's for fp8)
    }


def dumps(data: Any, compact: bool = False) -> str:
    """Strict JSON: numpy values as plain numbers, NaN and infinities (an undefined error, an
    invalid plan's time) as null, which every JSON reader accepts. Indented, or `compact` (one
    line, through the json module's C encoder: for outputs of a million values). `Rows` values
    are written by their own formatter (the same values the encoder would write)."""
    rows: dict[str, Rows] = {}

    def hold(value: Any) -> Any:  # each Rows becomes a placeholder string, filled in after
        if isinstance(value, Rows):
            key = f"@@rows{len(rows)}@@"
            rows[key] = value
            return key
        if isinstance(value, dict):
            return {k: hold(v) for k, v in value.items()}
        return value

    held = hold(data)
    if compact:
        text = json.dumps(_finite(held), allow_nan=False, separators=(",", ":"))
    else:
        text = json.dumps(_finite(held), indent=2, allow_nan=False)
    for key, value in rows.items():
        text = text.replace(json.dumps(key), value.json(compact), 1)
    return text


class Rows:
    """A long list of records of plain, finite values (a simulated step's operations), kept as
    tuples with one set of field names: reading it gives dicts; `dumps` writes it as the JSON
    list of those dicts: compact through orjson, indented directly from the tuples (floats as
    `json` writes them)."""

    def __init__(self, names: tuple[str, ...], records: list[tuple[Any, ...]]) -> None:
        self.names, self.records = names, records

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return dict(zip(self.names, self.records[i], strict=True))

    def __iter__(self) -> Any:
        return (dict(zip(self.names, r, strict=True)) for r in self.records)

    def json(self, compact: bool) -> str:
        if not self.records:
            return "[]"
        if compact:  # orjson (Rust): a million values in a fraction of a second, the same values
            import orjson

            dicts = [dict(zip(self.names, r, strict=True)) for r in self.records]
            return orjson.dumps(dicts, option=orjson.OPT_SERIALIZE_NUMPY).decode()
        colon, comma = ": ", ", "
        fields = (json.dumps(n).replace("{", "{{").replace("}", "}}") + colon + "{}" for n in self.names)
        template = "{{" + comma.join(fields) + "}}"  # one record: {"name": value, ...}
        columns = [_json_cells(column) for column in zip(*self.records, strict=True)]
        return "[" + comma.join(map(template.format, *columns)) + "]"


def _json_cells(column: tuple[Any, ...]) -> list[str]:
    """One column's values as `json` writes them (numbers, strings, booleans; finite floats)."""
    if all(isinstance(v, float) for v in column):  # numpy floats too
        return list(map(float.__repr__, column))
    if all(isinstance(v, int) and not isinstance(v, bool) for v in column):
        return list(map(int.__repr__, column))
    cache: dict[Any, str] = {}
    out = []
    for v in column:
        text = cache.get(v)
        if text is None:
            text = cache[v] = json.dumps(v.item() if hasattr(v, "item") else v)
        out.append(text)
    return out


def _finite(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if isinstance(value, (np.ndarray, np.generic)):
        return _finite(value.tolist())
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value


def crossover_dict(result: Any, assumptions: str) -> dict[str, Any]:
    from shardwise.analyses.crossover import describe_crossing
    from shardwise.analyses.crossover_parts import json_breakdown
    from shardwise.analyses.evaluate import recompute_label
    from shardwise.analyses.experiment import SI_UNIT

    plans = {p.label: p for p in result.experiment.plans}

    return {
        "variable": result.variable,
        "values": plain(result.values),
        "unit": SI_UNIT.get(result.variable, ""),  # of values, and of each crossing's at, bracket, range_80
        "workload": result.experiment.workload,
        "cost_model": result.experiment.cost_model,
        "assumptions": assumptions,
        "interval": {
            "level": 0.8,
            "log_sd": result.experiment.prediction_log_sd,
            "basis": result.experiment.spread_basis,
        },
        "series": [
            {
                "plan": s.plan,
                "link": s.link,
                "time_s": [None if v != v else v for v in plain(s.time_s)],
                "time_s_low": [None if v != v else v for v in plain(result.band(s)[0])],
                "time_s_high": [None if v != v else v for v in plain(result.band(s)[1])],
                # null where the plan is invalid (never priced there: not out of memory), as `valid` says
                "fits_in_memory": [
                    bool(f) if t == t else None for f, t in zip(plain(s.fits), plain(s.time_s), strict=True)
                ],
                "valid": [bool(t == t) for t in plain(s.time_s)],
                "recompute": recompute_label(result.experiment, plans[s.plan]),  # "" outside training
            }
            for s in result.series
        ],
        "crossings": [
            {
                "link": c.link,
                "faster_below": c.before,
                "faster_above": c.after,
                "at": c.at,
                "time_s": c.time_s,
                "bracket": [c.low, c.high],
                "range_80": [c.range_low, c.range_high],
                "exact": c.exact,
                "text": describe_crossing(c, result.variable),
                # seconds per term of both plans at the switch point (null: a plan is invalid there),
                # under the unit-bearing key `predict --json` uses for its terms
                "breakdown_s": json_breakdown(result, c),
            }
            for c in result.crossings
        ],
    }


def sweep_dict(result: Any, elapsed: float) -> dict[str, Any]:
    from shardwise.analyses.evaluate import layout_as_written, recompute_label
    from shardwise.analyses.experiment import SI_UNIT, column_values

    return {
        # each range [lowest, highest, number of values] in SI, as crossover's and sensitivity's values
        # and sweep's CSV (review 40 #11: GB/s, µs and TFLOP/s here), whole-number variables whole
        "variables": {
            name: [*column_values(name, np.array([axis.min(), axis.max()])).tolist(), len(axis)]
            for name, axis in zip(result.variables, result.axes, strict=True)
        },
        "units": {name: SI_UNIT.get(name, "") for name in result.variables},
        "configurations": result.points,
        "seconds": elapsed,
        "configurations_per_s": result.points / elapsed if elapsed > 0 else None,
        "winner_cells": result.winner_cells(),
        # cells where a plan's layout is invalid (not priced: neither out of memory nor lost), and the
        # cells each plan won where another plan is invalid (won among fewer plans; review 43 #2)
        "invalid_cells": result.invalid_cells(),
        "wins_beside_invalid": result.wins_beside_invalid(),
        # what each training plan recomputes (`analyses.evaluate.recompute_label`; "" outside training)
        "recompute_by_plan": {p.label: recompute_label(result.experiment, p) for p in result.experiment.plans},
        # each training plan's ZeRO stage and sequence parallelism as written (review 45 #2; {} outside training)
        "layout_by_plan": {p.label: layout_as_written(result.experiment, p) for p in result.experiment.plans},
        "interval": {
            "level": 0.8,
            # calibrated: each point's own width (analyses.bands); else one width for all
            "log_sd": None if result.per_point_bands else result.experiment.prediction_log_sd,
            "per_point": result.per_point_bands,
            "basis": result.experiment.spread_basis,
            "columns": "time_s_low[PLAN], time_s_high[PLAN]",
        },
    }


def simulation_dict(sim_step: Any, closed_s: float) -> dict[str, Any]:
    """A simulated training step (`shardwise timeline --json`): every operation with its times."""
    from shardwise.engines.simulator import KIND_NAMES

    sim = sim_step.simulation
    return {
        "schedule": sim.schedule,
        "stages": sim.p,
        "micro_batches": sim.m,
        "virtual_stages": sim.v,
        "makespan_s": sim.makespan_s,
        "closed_form_step_time_s": closed_s,
        "bubble_fraction": plain(sim_step.estimate.bubble_fraction),  # as predict's: busiest stage, whole step
        "mean_stage_idle_fraction": sim.mean_stage_idle_fraction,
        "stage_idle_fraction": sim.stage_idle_fraction.tolist(),
        "peak_in_flight_micro_batches": sim.peak_in_flight.tolist(),
        "breakdown_s": seconds_parts({k: float(v) for k, v in sim_step.estimate.breakdown.as_dict().items()}),
        # each stage's compute (forward, backward, weight gradients): the text table's `busy`
        "stage_busy_s": [float(v) for v in sim.busy_s],
        "operations": Rows(  # the simulator's times are finite
            ("stage", "kind", "micro_batch", "chunk", "start_s", "end_s"),
            [(s, KIND_NAMES[k], mb, c, a, b) for s, k, mb, c, a, b in sim.records],
        ),
    }
