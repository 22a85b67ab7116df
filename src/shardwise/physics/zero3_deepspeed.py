"""DeepSpeed ZeRO-3 as its engine gathers and reduces (`Plan.zero3_buckets`): what one pipeline stage
of a dense model holds gathered and in its gradient buckets, and how many collectives of which size
a layer takes. Read from deepspeedai/DeepSpeed @edaa7221 (the same logic from v0.6 on):

- gathers, runtime/zero/partitioned_param_coordinator.py `_fetch_sub_module_impl`: before each
  module with parameters runs (a Linear, an embedding; a norm's or a bias's parameters below
  `stage3_param_persistence_threshold` stay gathered, `ds_persist`), one coalesced all-gather of
  its parameters not yet gathered, then one of the next parameters of the traced order, popped
  until `stage3_prefetch_bucket_size` elements are taken, while fewer than
  `stage3_max_live_parameters` are gathered (`__n_available_params`); each module's parameters are
  released after it runs (`release_sub_module`) unless used again within `stage3_max_reuse_distance`
  elements of the trace (`__params_to_release`): the last layers across the turn from the forward
  to the backward pass. Each call is one collective (partition_parameters.py `all_gather_coalesced`:
  one parameter alone, or the flat buffer of several).
- reductions, runtime/zero/stage3.py `reduce_independent_p_g_buckets_and_remove_grads`: each
  gradient, as its backward ends, is copied into the contiguous buffer of `reduce_bucket_size`
  elements at the communication dtype (allocated once, `contiguous_gradients` on by default); a
  gradient that would overflow it first flushes the bucket, one `reduce_scatter_coalesced`
  (runtime/comm/coalesced_collectives.py: the bucket's gradients interleaved by rank into one flat
  copy, then one reduce-scatter); `independent_gradient_partition_epilogue` flushes the rest.

The modules are the model code's: Hugging Face's (q, k, v, o; gate, up, down apart) or Megatron's
fused QKV and gate-up linears (`Zero3Buckets.fused_linears`), per TP rank. The trace walked is one
micro-batch's forward (the word embedding, the layers, the output layer) and its backward in reverse.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from shardwise.specs import Model
from shardwise.specs.zero3 import Zero3Buckets


@dataclass(frozen=True)
class Zero3Trace:
    """What one stage's ZeRO-3 does per micro-batch under DeepSpeed's buckets, in parameters
    (elements) per GPU: `gathers_per_layer` all-gathers per layer and pass (forward and backward
    averaged, the embedding's and output layer's spread over the layers), `reduces_per_layer`
    reduce-scatters per layer; `first_gather_params` the first all-gather of a pass, waited for
    whole; `last_reduce_params` the epilogue's bucket, reduced after the backward ends;
    `peak_gathered_params` the most gathered at once beyond the persistent ones (in flight, prefetched
    or kept for reuse); `persistent_params` those gathered for good; `largest_flush_params` the most
    gradients one reduce-scatter takes (its flat copy); `largest_module_params` one module's
    gradients before they reach the bucket."""

    gathers_per_layer: float
    reduces_per_layer: float
    first_gather_params: float
    last_reduce_params: float
    peak_gathered_params: float
    persistent_params: float
    largest_flush_params: float
    largest_module_params: float


def applies(model: Model) -> bool:
    """Whether a model's layers are the dense transformer ones this module lists (not a mixture of
    experts, a hybrid, or multi-latent attention: those keep FSDP's per-unit model)."""
    return not (model.is_moe or model.is_hybrid or model.kv_lora_rank)


def layer_modules(model: Model, tp: int, fused: bool) -> tuple[tuple[float, ...], ...]:
    """One layer's modules in forward order, each the element counts of its parameters per TP rank
    (a norm's gain, and bias; a Linear's weight, and bias): column-parallel weights and biases split
    by tp, row-parallel biases and norms whole (Megatron's layers; Hugging Face's at tp 1)."""
    h, f, d, kv = model.hidden, model.ffn_hidden, model.head_dim, model.kv_heads
    q = model.q_dim
    bias = bool(model.bias)
    norm = (float(h),) if model.rmsnorm else (float(h), float(h))

    def linear(n_in: float, n_out: float, split_out: bool) -> tuple[float, ...]:
        weight = n_in * n_out / tp
        if not bias:
            return (weight,)
        return (weight, n_out / tp if split_out else float(n_out))

    up = 2 * f if model.gated_mlp else f
    if fused:
        attention = (linear(h, q + 2 * kv * d, True), linear(q, h, False))
        mlp = (linear(h, up, True), linear(f, h, False))
    else:
        attention = (linear(h, q, True), linear(h, kv * d, True), linear(h, kv * d, True), linear(q, h, False))
        ups = (linear(h, f, True), linear(h, f, True)) if model.gated_mlp else (linear(h, f, True),)
        mlp = (*ups, linear(f, h, False))
    return (norm, *attention, norm, *mlp)


def stage_modules(model: Model, tp: int, layers: int, fused: bool) -> tuple[tuple[float, ...], ...]:
    """A stage's modules in forward order: the word embedding (split by tp), its layers, the final
    norm and the output layer (the tied embedding's weight again where it is tied)."""
    embedding = (float(model.vocab * model.hidden / tp),)
    final = (float(model.hidden),) if model.rmsnorm else (float(model.hidden),) * 2
    return (embedding, *(layer_modules(model, tp, fused) * max(layers, 1)), final, embedding)


def trace(model: Model, tp: int, layers: int, buckets: Zero3Buckets) -> Zero3Trace:
    """`Zero3Trace` of a stage of `layers` layers of `model` at tensor-parallel size `tp`."""
    return _trace(stage_modules(model, int(tp), int(layers), buckets.fused_linears), max(int(layers), 1), buckets)


@lru_cache(maxsize=256)
def _trace(modules: tuple[tuple[float, ...], ...], layers: int, b: Zero3Buckets) -> Zero3Trace:
    threshold = b.persistence_threshold_params
    # persistent where `param.ds_numel <= param_threshold` (partition_parameters.py `_convert_to_deepspeed_param`)
    gathered = tuple(sum(p for p in m if p > threshold) for m in modules)
    persistent = sum(p for m in modules[:-1] for p in m if p <= threshold)  # the output layer's is the embedding's
    forward = _gathers([g for g in gathered if g > 0], b.prefetch_bucket_params, b.max_live_params)
    backward = _gathers([g for g in reversed(gathered) if g > 0], b.prefetch_bucket_params, b.max_live_params)
    turn = _reuse_tail([g for g in gathered if g > 0], b.max_reuse_distance_params)
    grads = [p for m in reversed(modules) for p in reversed(m)]
    flushes, largest, last = _reductions(grads, b.reduce_bucket_params)
    return Zero3Trace(
        gathers_per_layer=(forward[0] + backward[0]) / 2.0 / layers,
        reduces_per_layer=flushes / layers,
        first_gather_params=forward[2],
        last_reduce_params=last,
        peak_gathered_params=max(forward[1], backward[1], turn),
        persistent_params=persistent,
        largest_flush_params=largest,
        largest_module_params=max(sum(m) for m in modules),
    )


def _gathers(trace: list[float], prefetch: float, max_live: float) -> tuple[int, float, float]:
    """(all-gathers, most elements gathered at once, the first one's elements) over one pass of
    `trace` (each module's gathered elements, in the order it runs), as the coordinator fetches the
    module it is about to run if not yet gathered, then prefetches the next ones of its trace
    (`__param_queue`) up to `prefetch` elements while fewer than `max_live` are gathered, and
    releases each module's after it ran."""
    calls, live, peak, ahead = 0, 0.0, 0.0, 0  # ahead: the next trace entry not yet gathered
    first = trace[0] if trace else 0.0
    for step, numel in enumerate(trace):
        if step >= ahead:  # not prefetched: fetched now
            calls += 1
            live += numel
            ahead = step + 1
        cap, taken = min(max_live - live, prefetch), 0.0
        while ahead < len(trace) and taken < cap:
            taken += trace[ahead]
            ahead += 1
        if taken > 0:
            calls += 1
            live += taken
        peak = max(peak, live)
        live -= numel  # released after the module ran
    return calls, peak, first


def _reuse_tail(trace: list[float], distance: float) -> float:
    """Elements kept gathered across the turn from the forward to the backward pass: a module's
    parameters stay where fewer than `distance` elements of the trace run between its forward use
    and its backward one (the modules after it, forward and back: twice their sum), and the last
    one's with them."""
    after, kept = 0.0, 0.0
    for numel in reversed(trace):
        if 2.0 * after < distance:
            kept += numel
        after += numel
    return kept


def _reductions(grads: list[float], bucket: float) -> tuple[int, float, float]:
    """(reduce-scatters, the most elements one takes, the last one's) of gradients arriving in
    `grads`' order into buckets of `bucket` elements: one that would overflow a non-empty bucket
    flushes it first, and the epilogue flushes what is left."""
    flushes, largest, held = 0, 0.0, 0.0
    for numel in grads:
        if held > 0 and held + numel > bucket:
            flushes += 1
            largest = max(largest, held)
            held = 0.0
        held += numel
    if held > 0:
        flushes += 1
        largest = max(largest, held)
    return flushes, largest, held


# the model's numbers a trace reads (a calibration's stacked runs give them as arrays)
TRACED_NUMBERS = ("hidden", "ffn_hidden", "head_dim", "heads", "kv_heads", "vocab")


def traces(model: Model, tp: object, layers: object, buckets: Zero3Buckets) -> Zero3Trace:
    """`trace` over arrays of `tp`, `layers` and the model's numbers (`TRACED_NUMBERS`; numpy-
    broadcast): each field an array of the plans' values, each distinct combination traced once;
    plain numbers give a plain trace."""
    from dataclasses import replace

    import numpy as np

    given = [getattr(model, k) for k in TRACED_NUMBERS] + [tp, layers]
    if not any(isinstance(v, np.ndarray) for v in given):
        return trace(model, int(tp), int(layers), buckets)  # type: ignore[call-overload]
    columns = [np.asarray(v) for v in given]
    shape = np.broadcast_shapes(*(c.shape for c in columns))
    rows = np.stack([np.broadcast_to(c, shape).ravel() for c in columns], axis=1).astype(np.int64)
    distinct, index = np.unique(rows, axis=0, return_inverse=True)
    each = []
    for *numbers, t, n in distinct.tolist():
        scalar = replace(model, **dict(zip(TRACED_NUMBERS, numbers, strict=True)))
        each.append(trace(scalar, t, n, buckets))
    names = Zero3Trace.__dataclass_fields__
    out = {k: np.array([getattr(t, k) for t in each])[index.ravel()].reshape(shape) for k in names}
    return Zero3Trace(**out)
