"""DeepSpeed ZeRO-3's gather and reduction buckets (`Plan.zero3_buckets`), in parameters (elements).

DeepSpeed's stage 3 (deepspeedai/DeepSpeed @edaa7221, deepspeed/runtime/zero/config.py
DeepSpeedZeroConfig; the same defaults from v0.6 on) gathers each module's parameters before it
runs and, once it has traced a step, prefetches the next ones in its order up to
`stage3_prefetch_bucket_size` elements per module (default 5e7) while fewer than
`stage3_max_live_parameters` (1e9) are gathered (runtime/zero/partitioned_param_coordinator.py
`_fetch_sub_module_impl`); it keeps parameters of fewer than `stage3_param_persistence_threshold`
elements (1e5) gathered on every rank, and any it will use again before `stage3_max_reuse_distance`
(1e9) more elements are gathered; and it reduce-scatters the gradients as their backward ends in
buckets of `reduce_bucket_size` elements (5e8; runtime/zero/stage3.py
`reduce_independent_p_g_buckets_and_remove_grads`), one contiguous buffer of that size held at the
communication dtype. What a plan runs with them is `physics.zero3_deepspeed`'s.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from shardwise.specs._checks import SpecError

# DeepSpeed's config keys, in the order of Zero3Buckets' fields (what `--emit deepspeed` writes)
DEEPSPEED_KEYS = (
    "stage3_prefetch_bucket_size",
    "stage3_max_live_parameters",
    "stage3_param_persistence_threshold",
    "reduce_bucket_size",
    "stage3_max_reuse_distance",
)
# Zero3Buckets' numbers, in the order of DEEPSPEED_KEYS
NUMBERS = (
    "prefetch_bucket_params",
    "max_live_params",
    "persistence_threshold_params",
    "reduce_bucket_params",
    "max_reuse_distance_params",
)
# the largest bucket taken: 1e12 elements, beyond any GPU's memory at 2 bytes each
MAX_ELEMENTS = 1e12
# what a bucket may be: DeepSpeed's fields are pydantic ints (runtime/zero/config.py), so whole elements
ELEMENTS = "give whole elements, 0 to 1e12"


def _whole_elements(value: object) -> bool:
    """Whether `value` is a whole number of elements from 0 to MAX_ELEMENTS (not a bool)."""
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        return False
    return 0 <= value <= MAX_ELEMENTS and float(value).is_integer()


@dataclass(frozen=True)
class Zero3Buckets:
    """DeepSpeed ZeRO-3's buckets in parameters (elements), its defaults (runtime/zero/config.py).

    `prefetch_bucket_params`: elements gathered ahead of use per module (0: no prefetch);
    `max_live_params`: gathered elements beyond which the prefetcher stops;
    `persistence_threshold_params`: parameters below it stay gathered, never re-partitioned;
    `reduce_bucket_params`: gradient elements reduce-scattered together (the bucket buffer's size);
    `max_reuse_distance_params`: a parameter used again before this many elements are gathered stays
    gathered (`stage3_max_reuse_distance`: the last layers across the turn from forward to backward);
    `fused_linears`: the model code's modules, not a DeepSpeed setting: Megatron's fused QKV and
    gate-up linears (Megatron-DeepSpeed) rather than Hugging Face's projections apart, which sets
    how many gathers a layer takes."""

    prefetch_bucket_params: float = 5e7
    max_live_params: float = 1e9
    persistence_threshold_params: float = 1e5
    reduce_bucket_params: float = 5e8
    max_reuse_distance_params: float = 1e9
    fused_linears: bool = False

    def __post_init__(self) -> None:
        for name in NUMBERS:
            value = getattr(self, name)
            if not _whole_elements(value):
                raise SpecError(f"plan: zero3_buckets {name}: {value!r} is not allowed; {ELEMENTS}")
            object.__setattr__(self, name, float(value))
        if not isinstance(self.fused_linears, bool):
            what = f"plan: zero3_buckets fused_linears: {self.fused_linears!r}"
            raise SpecError(f"{what} is not allowed; give true or false")

    def deepspeed_config(self) -> dict[str, int]:
        """The `zero_optimization` keys DeepSpeed reads these from, as whole elements."""
        return {key: int(getattr(self, name)) for key, name in zip(DEEPSPEED_KEYS, NUMBERS, strict=True)}


# short names a command line may use for DeepSpeed's keys (`--zero3-buckets prefetch=1e7,reduce=1e7`)
SHORT_KEYS = dict(zip(("prefetch", "live", "persist", "reduce", "reuse"), DEEPSPEED_KEYS, strict=True))
# what a command line gives for no DeepSpeed buckets: PyTorch FSDP's per-unit ZeRO-3
NO_BUCKETS = ("none", "fsdp")


def zero3_buckets_of(
    value: object, where: str = "plan: zero3_buckets", base: Zero3Buckets | None = None
) -> Zero3Buckets | None:
    """`Plan.zero3_buckets` from a Zero3Buckets, None (the per-unit gathers of PyTorch FSDP), or a
    mapping of DeepSpeed's keys (`DEEPSPEED_KEYS`, or `SHORT_KEYS`' names) with `fused_linears` (a
    framework preset's `zero3_buckets:`), or the same as text, "KEY=VALUE,..." ("none": None); a key
    left out keeps `base`'s value (default DeepSpeed's)."""
    if value is None or isinstance(value, Zero3Buckets):
        return value
    if isinstance(value, str):
        if value.strip().lower() in NO_BUCKETS:
            return None
        pairs = [item.partition("=") for item in value.split(",") if item.strip()]
        bad = next((item for item, eq, _ in pairs if not eq), None)
        if bad is not None or not pairs:
            raise SpecError(
                f"{where}: {value!r} is not allowed; give KEY=ELEMENTS,... with keys {', '.join(SHORT_KEYS)} "
                "(or DeepSpeed's own), or none"
            )
        items = [(k.strip(), v.strip()) for k, _, v in pairs]  # kept as pairs: a key given twice is refused below
    elif isinstance(value, Mapping):
        items = list(value.items())
    else:
        raise SpecError(f"{where}: {value!r} is not allowed; give a mapping of {', '.join(DEEPSPEED_KEYS)}")
    fields = dict(zip(DEEPSPEED_KEYS, NUMBERS, strict=True))
    out: dict[str, object] = {} if base is None else {k: getattr(base, k) for k in (*NUMBERS, "fused_linears")}
    seen: set[str] = set()
    for given, raw in items:
        key = SHORT_KEYS.get(given, given)
        if key in seen:
            raise SpecError(f"{where}: {given!r} is given twice; give each key once")
        seen.add(key)
        if key == "fused_linears":
            if isinstance(raw, str) and raw.lower() in ("true", "false"):
                raw = raw.lower() == "true"
            out[key] = raw
            continue
        if key not in fields:
            allowed = ", ".join((*SHORT_KEYS, *DEEPSPEED_KEYS, "fused_linears"))
            raise SpecError(f"{where}: {key!r} is not allowed; give {allowed}")
        number = raw
        if isinstance(raw, str):  # YAML reads 5e7 (no dot) as a string
            try:
                number = float(raw)
            except ValueError:
                number = raw
        if not _whole_elements(number):
            raise SpecError(f"{where} {key}: {raw!r} is not allowed; {ELEMENTS}")
        out[fields[key]] = float(number)
    try:
        return Zero3Buckets(**out)  # type: ignore[arg-type]
    except SpecError as exc:
        raise SpecError(str(exc).replace("plan: zero3_buckets", where, 1)) from None


def buckets_over(base: object, own: object, where: str) -> object:
    """A framework file's `zero3_buckets:` over its `like:` preset's, key by key (DeepSpeed's names,
    `SHORT_KEYS`' spelled out): a key the file leaves out keeps the preset's (its `fused_linears`
    too). `own` as given where either is not a mapping (None, "none": no buckets)."""
    if not isinstance(base, Mapping) or not isinstance(own, Mapping):
        return own
    out = {SHORT_KEYS.get(k, k): v for k, v in base.items()}
    spelled = [SHORT_KEYS.get(k, k) for k in own]
    twice = next((k for i, k in enumerate(spelled) if k in spelled[:i]), None)
    if twice is not None:
        raise SpecError(f"{where}: {twice!r} is given twice; give each key once")
    out.update({SHORT_KEYS.get(k, k): v for k, v in own.items()})
    return out
