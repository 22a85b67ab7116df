"""A transformer layer split Megatron-style over a tensor-parallel group (Shoeybi et al. 2019, §3).

The attention's QKV and the MLP's up projection are column-parallel (each rank holds 1/t of the
output features, heads split across ranks); the attention output projection and the MLP's down
projection are row-parallel (1/t of the input features), each followed by an all-reduce of the
partial sums in the forward pass (`_ReduceForward`, Megatron's g); the layer input passes through
`_ReduceBackward` (Megatron's f: identity forward, all-reduce of the input gradient backward).
So each layer runs two all-reduces forward and two backward, of b x s x h activations.

Every rank builds the full weights from one seed and keeps its own slice, so a split layer
computes what the unsplit one does (the tests check loss and gradients). Each collective's wall
time is added to `Timings`, after synchronising the device so the time is the collective's own.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from shardwise.measure import INSTALL_HINT
from shardwise.measure.shapes import LayerShape

try:
    import torch
    import torch.distributed as dist
    from torch import nn
except ImportError:  # the optional extra: say what to install, not "No module named 'torch'"
    raise ImportError(INSTALL_HINT) from None


@dataclass
class Timings:
    """Seconds spent in collectives and sends, per kind (one rank), and how many calls."""

    seconds: dict[str, float] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    enabled: bool = True
    # (name, start, end) of every span while not None: the step's Chrome trace (perf_counter seconds)
    trace: list[tuple[str, float, float]] | None = None

    def add(self, kind: str, start: float, end: float) -> None:
        if self.enabled:
            self.seconds[kind] = self.seconds.get(kind, 0.0) + (end - start)
            self.calls[kind] = self.calls.get(kind, 0) + 1
        self.span(kind, start, end)

    def span(self, name: str, start: float, end: float) -> None:
        if self.trace is not None:
            self.trace.append((name, start, end))

    def reset(self) -> None:
        self.seconds.clear()
        self.calls.clear()


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(run: Any, device: torch.device, timings: Timings | None, kind: str) -> None:
    """Run one collective, its time (the device synchronised before and after) added to `timings`."""
    sync(device)
    start = time.perf_counter()
    run()
    sync(device)
    if timings is not None:
        timings.add(kind, start, time.perf_counter())


def timed_all_reduce(tensor: torch.Tensor, group: Any, timings: Timings | None, kind: str) -> None:
    """All-reduce in place over `group`, timed."""
    if group is None or dist.get_world_size(group) == 1:
        return
    timed(lambda: dist.all_reduce(tensor, group=group), tensor.device, timings, kind)


class _ReduceForward(torch.autograd.Function):
    """Megatron's g: all-reduce forward, identity backward (after a row-parallel linear)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any, timings: Timings | None) -> torch.Tensor:
        x = x.clone()
        timed_all_reduce(x, group, timings, "tp_all_reduce_forward")
        return x

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        return grad, None, None


class _ReduceBackward(torch.autograd.Function):
    """Megatron's f: identity forward, all-reduce of the gradient backward (before column-parallel)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any, timings: Timings | None) -> torch.Tensor:
        ctx.group, ctx.timings = group, timings
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        grad = grad.clone()
        timed_all_reduce(grad, ctx.group, ctx.timings, "tp_all_reduce_backward")
        return grad, None, None


def _gather_seq(x: torch.Tensor, group: Any, timings: Timings | None, kind: str) -> torch.Tensor:
    """All-gather along the sequence (dim 1) of [b, s/t, h] -> [b, s, h]."""
    t = dist.get_world_size(group)
    local = x.transpose(0, 1).contiguous()  # the sequence first, as Megatron lays tensors out
    out = torch.empty((local.shape[0] * t, *local.shape[1:]), dtype=x.dtype, device=x.device)
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    timed(lambda: gather(out, local, group=group), x.device, timings, kind)
    return out.transpose(0, 1)


def _scatter_seq(x: torch.Tensor, group: Any, timings: Timings | None, kind: str) -> torch.Tensor:
    """Reduce-scatter along the sequence (dim 1) of [b, s, h] partial sums -> [b, s/t, h]."""
    t = dist.get_world_size(group)
    full = x.transpose(0, 1).contiguous()
    out = torch.empty((full.shape[0] // t, *full.shape[1:]), dtype=x.dtype, device=x.device)
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    timed(lambda: scatter(out, full, group=group), x.device, timings, kind)
    return out.transpose(0, 1)


class _GatherSequence(torch.autograd.Function):
    """Sequence parallelism (Korthikanti et al. 2022 §4.2.2): all-gather before a column-parallel
    layer; its backward is the reduce-scatter of the gradient."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any, timings: Timings | None) -> torch.Tensor:
        ctx.group, ctx.timings = group, timings
        return _gather_seq(x, group, timings, "tp_sp_all_gather_forward")

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        return _scatter_seq(grad, ctx.group, ctx.timings, "tp_sp_reduce_scatter_backward"), None, None


class _ScatterSequence(torch.autograd.Function):
    """Sequence parallelism: reduce-scatter after a row-parallel layer; its backward all-gathers."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any, timings: Timings | None) -> torch.Tensor:
        ctx.group, ctx.timings = group, timings
        return _scatter_seq(x, group, timings, "tp_sp_reduce_scatter_forward")

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        return _gather_seq(grad, ctx.group, ctx.timings, "tp_sp_all_gather_backward"), None, None


class WeightGradStore:
    """Deferred weight gradients for a split backward (ZB-H1, Qi et al. 2023 "Zero Bubble Pipeline
    Parallelism", their `WeightGradStore`): while `deferring` names a micro-batch, each linear
    layer's backward returns only its input gradient and keeps (input, output gradient) here;
    `run(micro_batch)` later computes those weight gradients and adds them to `.grad`."""

    def __init__(self) -> None:
        self.deferring: int | None = None
        self.pending: dict[int, list[tuple[nn.Parameter, torch.Tensor, torch.Tensor]]] = {}

    def keep(self, weight: nn.Parameter, x: torch.Tensor, grad: torch.Tensor) -> None:
        assert self.deferring is not None
        self.pending.setdefault(self.deferring, []).append((weight, x, grad))

    def run(self, micro_batch: int) -> None:
        for weight, x, grad in self.pending.pop(micro_batch, []):
            dw = grad.reshape(-1, grad.shape[-1]).t() @ x.reshape(-1, x.shape[-1])
            weight.grad = dw if weight.grad is None else weight.grad + dw


class _Linear(torch.autograd.Function):
    """y = x w^T whose weight gradient a `WeightGradStore` may defer."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: nn.Parameter, store: WeightGradStore | None) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.store = store
        return x @ weight.t()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None, None]:
        x, weight = ctx.saved_tensors
        store = ctx.store
        if store is not None and store.deferring is not None:
            store.keep(weight, x, grad)
            return grad @ weight, None, None
        return grad @ weight, grad.reshape(-1, grad.shape[-1]).t() @ x.reshape(-1, x.shape[-1]), None


class ParallelLayer(nn.Module):
    """One pre-LayerNorm GPT layer, its linear layers split over `tp` ranks (rank `rank`)."""

    def __init__(
        self,
        shape: LayerShape,
        tp: int = 1,
        rank: int = 0,
        group: Any = None,
        seed: int = 0,
        dtype: torch.dtype = torch.float32,
        device: torch.device | None = None,
        timings: Timings | None = None,
        sequence_parallel: bool = False,
        store: WeightGradStore | None = None,
    ):
        super().__init__()
        self.store = store
        self.sequence_parallel = sequence_parallel and tp > 1
        shape.check(tp)
        h, f, a = shape.hidden, shape.ffn_hidden, shape.heads
        self.heads, self.head_dim, self.group, self.timings = a // tp, h // a, group, timings
        gen = torch.Generator().manual_seed(seed)

        def full(*dims: int) -> torch.Tensor:
            return torch.randn(*dims, generator=gen) * 0.02

        qkv, proj, up, down = full(3, a, h // a, h), full(h, h), full(f, h), full(h, f)
        heads = slice(rank * a // tp, (rank + 1) * a // tp)
        cols = slice(rank * f // tp, (rank + 1) * f // tp)
        kw = {"dtype": dtype, "device": device}
        # column-parallel: output features (whole heads for QKV); row-parallel: input features
        self.qkv = nn.Parameter(qkv[:, heads].reshape(3 * (a // tp) * (h // a), h).to(**kw))
        self.proj = nn.Parameter(proj.reshape(h, a, h // a)[:, heads].reshape(h, h // tp).to(**kw))
        self.up = nn.Parameter(up[cols].to(**kw))
        self.down = nn.Parameter(down[:, cols].to(**kw))
        self.ln1 = nn.LayerNorm(h, **kw)
        self.ln2 = nn.LayerNorm(h, **kw)

    def _enter(self, y: torch.Tensor) -> torch.Tensor:
        """Into a column-parallel layer: f (all-reduce backward), or with sequence parallelism the
        all-gather of the sequence shards."""
        op = _GatherSequence if self.sequence_parallel else _ReduceBackward
        return op.apply(y, self.group, self.timings)

    def _leave(self, y: torch.Tensor) -> torch.Tensor:
        """Out of a row-parallel layer: g (all-reduce forward), or the reduce-scatter to shards."""
        op = _ScatterSequence if self.sequence_parallel else _ReduceForward
        return op.apply(y, self.group, self.timings)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [b, s, h], or [b, s / tp, h] (this rank's sequence shard) with sequence parallelism."""
        y = self._enter(self.ln1(x))
        b, s, _ = y.shape
        q, k, v = self._linear(y, self.qkv).view(b, s, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        ctx = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        ctx = ctx.transpose(1, 2).reshape(b, s, self.heads * self.head_dim)
        x = x + self._leave(self._linear(ctx, self.proj))
        y = nn.functional.gelu(self._linear(self._enter(self.ln2(x)), self.up))
        return x + self._leave(self._linear(y, self.down))

    def _linear(self, x: torch.Tensor, weight: nn.Parameter) -> torch.Tensor:
        return x @ weight.t() if self.store is None else _Linear.apply(x, weight, self.store)


def stack(
    shape: LayerShape, layers: int, tp: int = 1, rank: int = 0, group: Any = None, first: int = 0, **kw: Any
) -> nn.Sequential:
    """Layers first .. first + layers - 1 of a model (layer i is seeded with i: a pipeline stage
    builds the same weights as the whole model's)."""
    return nn.Sequential(*(ParallelLayer(shape, tp, rank, group, seed=first + i, **kw) for i in range(layers)))
