"""Fields (by the names of `requests.fields`) -> a `Scenario`: the one place where a model, a cluster
and a plan are resolved from what a user gave -- presets, YAML files, Hugging Face configs, link
rates and a calibration file -- with one set of defaults and one validation.

Errors name the command-line flag (`--tp`); a caller reading a CSV row prefixes its line. What the
builder assumed on the user's behalf (a rate's latency, the NICs shared per server, a rack-scale
domain cut to the job) comes back as `notes`, for the face to show. The cluster is built by
`requests.cluster_build`, the plan by `requests.plan_build`; both are re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shardwise.errors import SpecError
from shardwise.requests import attention

# re-exported: the names the requests, the CLI and the tests read here
from shardwise.requests.cluster_build import (  # noqa: F401
    build_cluster,
    link_flag,
    link_latency_s,
)
from shardwise.requests.plan_build import (  # noqa: F401
    build_plan,
    execution_kwargs,
    flash_attention,
    stack_default_notes,
    stage_kwargs,
)
from shardwise.requests.precision import resolved


@dataclass(frozen=True)
class Built:
    """A built scenario, what was assumed to build it, and the calibration file's contents (or None)."""

    scenario: Any  # Scenario
    notes: tuple[str, ...] = ()
    calibration: Any = None  # calibration.store.Calibration


def scenario(values: dict[str, Any], model: Any = None) -> Built:
    """The Scenario of fully given fields (`TrainingRequest.values()`); `model`: a Model to use
    instead of the `model` field's (a shape that no preset or file names)."""
    from shardwise.specs import Scenario

    notes: list[str] = []
    if model is None:
        model = build_model(values)
        notes += model_notes(values)
    cal = load_calibration(values.get("calibration"))
    cluster = build_cluster(values, notes, cal, training=True)
    check_cublas(values, cluster.gpu)
    values = {**values, "precision": resolved(values.get("precision"), cluster.gpu, "--precision", notes)}
    values = {**values, **attention.changes(values, cluster.gpu, notes)}  # what runs on the GPU
    plan = build_plan(values, int(cluster.num_gpus), model)
    notes += stack_default_notes(values, plan)
    try:
        scn = Scenario(model, cluster, plan)
    except SpecError as exc:
        if values.get("stage_layers") and "stage split" in str(exc):  # name the flag the split came from
            raise SpecError(f"--stage-layers {values['stage_layers']}: {exc}") from None
        raise
    return Built(scn, tuple(notes), cal)


def check_cublas(values: dict[str, Any], gpu: Any) -> None:
    """--cublas-before-11 only where such a cuBLAS runs: CUDA 10.x targets Volta and Turing at most
    (`physics.gemm_align`; `engine_formats.architecture` reads both as "volta": 16-bit without BF16)."""
    from shardwise.engines.engine_formats import architecture

    if values.get("cublas_before_11") and architecture(gpu) != "volta":
        raise SpecError(
            f"--cublas-before-11: a cuBLAS before 11.0 (CUDA 10.x) runs on Volta and Turing GPUs at most, not on "
            f"{gpu.name}; leave --cublas-before-11 out"
        )


# the options that change a model preset's shape (`build_model`; a reshaped preset is no longer
# the checkpoint its Hugging Face id names, `serve_result`)
MODEL_SHAPE_KEYS = ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab")


def build_model(o: dict[str, Any], tp_max: int | None = None) -> Any:
    """The model of the fields: a preset, file or Hugging Face config with the shape flags given, or
    a custom one. --hidden on a named model keeps its head dim, heads per KV head and ffn/hidden
    (`requests.model_shape`, as crossover/sweep), the heads split by `tp_max` (default: --tp)."""
    from shardwise import loaders, presets
    from shardwise.requests.model_shape import hidden_overrides

    overrides = {k: o[k] for k in (*MODEL_SHAPE_KEYS, "seq_len") if o.get(k) is not None}
    if o.get("family"):
        overrides["family"] = o["family"]
    if o.get("model"):
        tp = tp_max if tp_max is not None else o.get("tp")
        overrides = hidden_overrides(o["model"], overrides, tp if isinstance(tp, int) else 1)
        return presets.model(o["model"], **overrides)
    missing = [f"--{k}" for k in ("layers", "hidden", "heads") if k not in overrides]
    if missing:
        raise SpecError(f"model: give --model NAME or all of --layers --hidden --heads (missing {' '.join(missing)})")
    data = {"vocab": 51200, "seq_len": 2048, **overrides}
    return loaders.model_from_dict("custom", data)


def model_notes(values: dict[str, Any]) -> list[str]:
    """What was assumed about the model: the architecture flags a model file without `family` took
    from the gpt family (`presets.model_family_note`)."""
    from shardwise import presets

    note = presets.model_family_note(values.get("model"))
    return [note] if note else []


def load_calibration(path: str | None) -> Any:
    """The calibration file (a `calibration.store.Calibration`), or None."""
    if not path:
        return None
    from shardwise.calibration import store

    return store.load(path)


def spread(scenarios: list[Any], cal: Any) -> Any:
    """The 80% interval's spread of each scenario's step time (`calibration.intervals`)."""
    from shardwise.calibration.intervals import spread as spread_of

    if cal is None:
        return spread_of(scenarios, None)
    basis = f"calibration {cal.path} ({cal.runs} run(s))"
    return spread_of(scenarios, cal.fit, basis, tuple(cal.gpus), getattr(cal, "stacks", None))
