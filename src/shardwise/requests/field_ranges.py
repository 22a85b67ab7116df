"""The ranges a request's numeric fields must lie in, checked when the request is built (review 37:
`TrainingRequest(tp=0)` used to construct, print `--tp 0` from `.command()` and fail only in
`.run()`). The words are the command line's (`--tp: 0 is not allowed; it must be a whole number
>= 1`), so a request refused in Python and the same flags refused by `shardwise predict` read alike.
Only what needs no preset or file is checked here; the rest (a model's heads against --tp, a link
preset's name) is checked by `requests.build` as before.
"""

from __future__ import annotations

import math
from typing import Any

from shardwise.errors import SpecError

MAX_WHOLE = 2**53  # `specs._checks.MAX_WHOLE` (not imported: it pulls numpy into every request)
MAX_NICS_PER_NODE = 1024  # `loaders.MAX_NICS_PER_NODE`

# whole numbers >= 1: sizes and counts that cannot be empty
AT_LEAST_ONE = (
    "layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "seq_len", "gpus_per_node", "nodes",
    "num_gpus", "tp", "pp", "dp", "cp", "ep", "vpp", "global_batch", "micro_batch", "pipeline_flushes",
)  # fmt: skip
# whole numbers >= 0: 0 means "none" or "automatic"
AT_LEAST_ZERO = (
    "etp", "recompute_layers", "offload_activations", "mtp_layers", "shard_group", "lora_rank",
    "packed_document_len",
)  # fmt: skip


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def check_whole(name: str, value: Any, low: int) -> None:
    """A whole number in [low, MAX_WHOLE], refused as the command line refuses it."""
    if value is None:
        return
    if not low <= value <= MAX_WHOLE:
        most = f"at most {MAX_WHOLE:,}" if value > MAX_WHOLE else f">= {low}"
        raise SpecError(f"{flag(name)}: {value} is not allowed; it must be a whole number {most}")


def check_training(t: Any) -> None:
    """A `TrainingRequest`'s numeric fields (already parsed to their kinds by `fields.normalize`)."""
    for name in AT_LEAST_ONE:
        check_whole(name, getattr(t, name), 1)
    for name in AT_LEAST_ZERO:
        check_whole(name, getattr(t, name), 0)
    _check_stages_and_nics(t)
    if not 0 <= t.offload_optimizer <= 1:
        raise SpecError(
            f"--offload-optimizer: {t.offload_optimizer:g} is not allowed; it must be between 0 and 1 (a share)"
        )
    if not 1 <= t.expert_imbalance < math.inf:
        raise SpecError(
            f"--expert-imbalance: {t.expert_imbalance:g} is not allowed; it is the busiest expert rank's tokens "
            "over the mean, so >= 1 (1: a balanced router)"
        )
    if not 0 <= t.moe_capacity_factor < math.inf:
        raise SpecError(
            f"--moe-capacity-factor: {t.moe_capacity_factor:g} is not allowed; it must be a number >= 0 (0: dropless)"
        )
    if t.link_latency is not None:
        from shardwise.requests.cluster_build import link_latency_s

        link_latency_s({"link_latency": t.link_latency, "intra_link": t.intra_link, "inter_link": t.inter_link})


def check_experiment(e: Any) -> None:
    """An `ExperimentRequest`'s numeric fields (crossover, sweep, sensitivity), as `check_training`."""
    for name in (
        "layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "seq_len", "num_gpus", "nodes",
        "gpus_per_node", "global_batch", "micro_batch",
    ):  # fmt: skip
        check_whole(name, getattr(e, name), 1)
    _check_stages_and_nics(e)


def _check_stages_and_nics(r: Any) -> None:
    """The uneven first/last stage sizes (the top is the model's layers: `stage_kwargs`) and the NICs
    per server, as a training or an experiment request states them."""
    for name in ("first_stage_layers", "last_stage_layers"):
        value = getattr(r, name)
        if value is not None and value < 1:
            raise SpecError(f"{flag(name)}: {value} is not allowed; it must be a whole number >= 1")
    if r.nics_per_node is not None and not 0 < r.nics_per_node <= MAX_NICS_PER_NODE:
        raise SpecError(
            f"--nics-per-node: {r.nics_per_node:g} is not allowed; it must be > 0 and at most {MAX_NICS_PER_NODE}"
        )


def require(owner: Any, name: str, kind: type) -> None:
    """A request's wrapped request (`PredictRequest(training)`) of the right type: anything else is
    one line, not an AttributeError deep in `.run()` (review 37: `PredictRequest(None).run()`)."""
    value = getattr(owner, name)
    if not isinstance(value, kind):
        raise SpecError(
            f"{type(owner).__name__}: {name}: {value!r} is not allowed; give a {kind.__name__} "
            f"(e.g. {kind.__name__}.from_argv('--model ...'))"
        )
