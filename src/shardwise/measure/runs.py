"""What each rank runs: a tensor-parallel step, a pipeline-parallel step (1F1B or GPipe), a
data-parallel gradient all-reduce. Module-level functions of (group, config): spawned ranks
import them.

Every step is timed as the wall time of forward + backward over the global batch on each rank
(device synchronised), median over `iters` after `warmup`; the collectives and sends inside are
timed on their own (`layers.Timings`), so the step splits into compute and communication.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

from shardwise.measure.launch import Group
from shardwise.measure.shapes import LayerShape


@dataclass(frozen=True)
class StepConfig:
    shape: LayerShape
    layers: int
    seq_len: int
    micro_batch: int
    micro_batches: int = 1  # per step (pipeline: m micro-batches flow through the stages)
    schedule: str = "1f1b"  # pipeline: "1f1b" (Megatron's non-interleaved), "gpipe", "interleaved" or "zb-h1"
    iters: int = 5
    warmup: int = 2
    dtype: str = "float32"  # CPUs: float32; GPUs: bfloat16
    seed: int = 1234
    sequence_parallel: bool = False  # TP: LayerNorms and residuals on sequence shards (Korthikanti et al. 2022)
    chunks: int = 2  # the interleaved schedule's model chunks per stage


def _dtype(name: str) -> Any:
    import torch

    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def _inputs(cfg: StepConfig, device: Any) -> list[Any]:
    """The step's micro-batches (b x s x h each), the same on every rank."""
    import torch

    gen = torch.Generator().manual_seed(cfg.seed)
    shape = (cfg.micro_batch, cfg.seq_len, cfg.shape.hidden)
    return [
        torch.randn(*shape, generator=gen).to(device=device, dtype=_dtype(cfg.dtype)) for _ in range(cfg.micro_batches)
    ]


def _loss(y: Any, micro_batches: int) -> Any:
    """A scalar every rank can compute: the mean square of the output, averaged over micro-batches."""
    return (y.float() ** 2).mean() / micro_batches


def _summary(steps: list[float], timings: Any, iters: int, origin: float) -> dict[str, Any]:
    """Medians and per-step communication; `trace`: the last step's spans, seconds from its start."""
    comm = {k: v / iters for k, v in timings.seconds.items()}
    calls = {k: c // iters for k, c in timings.calls.items()}
    trace = [(name, a - origin, b - origin) for name, a, b in (timings.trace or [])]
    return {"step_s": statistics.median(steps), "steps_s": steps, "comm_s": comm, "comm_calls": calls, "trace": trace}


def _timed_steps(
    step: Any, cfg: StepConfig, g: Group, model: Any, timings: Any, barrier: bool = False
) -> dict[str, Any]:
    """Warm-up, then `cfg.iters` timed steps; the last one traced."""
    import torch.distributed as dist

    from shardwise.measure.layers import sync

    timings.enabled = False
    for _ in range(cfg.warmup):
        step()
    timings.enabled = True
    timings.reset()
    steps, origin = [], 0.0
    for i in range(cfg.iters):
        model.zero_grad(set_to_none=True)
        if barrier:
            dist.barrier()
        timings.trace = [] if i == cfg.iters - 1 else None
        sync(g.device)
        origin = t0 = time.perf_counter()
        step()
        sync(g.device)
        steps.append(time.perf_counter() - t0)
    return _summary(steps, timings, cfg.iters, origin)


def tensor_parallel_step(g: Group, cfg: StepConfig, return_grads: bool = False) -> dict[str, Any]:
    """`cfg.layers` layers split over all ranks (tp = world size); forward and backward of every
    micro-batch. With `return_grads`: one step, its loss and this rank's parameter gradients."""
    import torch
    import torch.distributed as dist

    from shardwise.measure.layers import Timings, stack, sync, timed_all_reduce

    timings = Timings()
    sp = cfg.sequence_parallel and g.world > 1
    if sp and cfg.seq_len % g.world:
        from shardwise.errors import SpecError

        raise SpecError(f"--seq-len {cfg.seq_len} must be a multiple of --ranks {g.world} for sequence parallelism")
    model = stack(
        cfg.shape,
        cfg.layers,
        g.world,
        g.rank,
        dist.group.WORLD,
        dtype=_dtype(cfg.dtype),
        device=g.device,
        timings=timings,
        sequence_parallel=sp,
    )
    xs = _inputs(cfg, g.device)
    if sp:  # this rank's sequence shard; the loss is the shards' sum
        shard = cfg.seq_len // g.world
        xs = [x[:, g.rank * shard : (g.rank + 1) * shard].contiguous() for x in xs]
    norms = [p for n, p in model.named_parameters() if ".ln" in n]

    def step() -> float:
        total = torch.zeros((), device=g.device)
        for i, x in enumerate(xs):
            t0 = time.perf_counter()
            loss = _loss(model(x), cfg.micro_batches) / (g.world if sp else 1)
            sync(g.device)
            t1 = time.perf_counter()
            loss.backward()
            sync(g.device)
            timings.span(f"forward mb{i}", t0, t1)
            timings.span(f"backward mb{i}", t1, time.perf_counter())
            total += loss.detach()
        if sp:  # the LayerNorms saw only this rank's tokens: sum their gradients (Megatron does too)
            flat = torch.cat([p.grad.reshape(-1) for p in norms])
            timed_all_reduce(flat, dist.group.WORLD, timings, "tp_sp_norm_grad_all_reduce")
            offset = 0
            for p in norms:
                p.grad.copy_(flat[offset : offset + p.numel()].view_as(p))
                offset += p.numel()
            timed_all_reduce(total, dist.group.WORLD, None, "")
        return float(total)

    if return_grads:
        loss = step()
        return {"loss": loss, "grads": {n: p.grad.detach().cpu() for n, p in model.named_parameters()}}
    return _timed_steps(step, cfg, g, model, timings)


def pipeline_order(
    schedule: str, stage: int, stages: int, micro_batches: int, chunks: int = 1
) -> list[tuple[str, int, int]]:
    """The ("F" | "B" | "W", micro-batch, model chunk) sequence one stage runs: the simulator's own
    schedules (`engines.schedules`: GPipe, 1F1B, interleaved 1F1B, ZB-H1 with its backward split
    into the input gradient B and the weight gradient W), so the measured run and the simulated
    one follow the same order."""
    from shardwise.engines import schedules as sch

    ops = sch.SCHEDULES[schedule](stages, micro_batches, chunks)[stage]
    return [(sch.KIND_NAMES[op.kind], op.micro_batch, op.chunk) for op in ops]


def pipeline_parallel_step(g: Group, cfg: StepConfig, return_grads: bool = False) -> dict[str, Any]:
    """The layers split into world-size stages (with the interleaved schedule, `cfg.chunks` model
    chunks per stage: chunk c of stage r is virtual stage c p + r), `cfg.micro_batches`
    micro-batches driven by `cfg.schedule`; activations go forward and gradients back by tagged
    point-to-point sends (isend, so a stage never blocks on its own send; every receive is timed)."""
    import torch
    import torch.distributed as dist

    from shardwise.errors import SpecError
    from shardwise.measure.layers import Timings, WeightGradStore, stack, sync

    p, r = g.world, g.rank
    v = cfg.chunks if cfg.schedule == "interleaved" else 1
    if cfg.layers % (p * v):
        raise SpecError(f"--layers {cfg.layers} must be a multiple of the pipeline stages x chunks ({p} x {v})")
    if cfg.schedule == "interleaved" and cfg.micro_batches % p:
        raise SpecError(f"--micro-batches {cfg.micro_batches} must be a multiple of the stages ({p}) to interleave")
    per, last = cfg.layers // (p * v), p * v - 1
    timings = Timings()
    store = WeightGradStore() if cfg.schedule == "zb-h1" else None  # B defers the weight gradients to W
    kw = {"dtype": _dtype(cfg.dtype), "device": g.device, "store": store}
    chunks = torch.nn.ModuleList([stack(cfg.shape, per, first=(c * p + r) * per, **kw) for c in range(v)])
    xs = _inputs(cfg, g.device)
    shape = (cfg.micro_batch, cfg.seq_len, cfg.shape.hidden)
    order = pipeline_order(cfg.schedule, r, p, cfg.micro_batches, v)

    def tag(direction: int, mb: int, virtual: int) -> int:
        """A message's tag: which micro-batch, to which virtual stage, forward or back."""
        return (direction * cfg.micro_batches + mb) * (last + 1) + virtual

    def recv(src: int, kind: str, tag_: int) -> Any:
        buf = torch.empty(shape, dtype=_dtype(cfg.dtype), device=g.device)
        t0 = time.perf_counter()
        dist.recv(buf, src=src, tag=tag_)
        timings.add(kind, t0, time.perf_counter())
        return buf

    def step() -> float:
        inputs: dict[tuple[int, int], Any] = {}
        outputs: dict[tuple[int, int], Any] = {}
        sends, total = [], 0.0
        for kind, i, c in order:
            s = c * p + r  # the virtual stage
            if kind == "F":
                x = xs[i] if s == 0 else recv((r - 1) % p, "pp_recv_forward", tag(0, i, s))
                x = x.detach().requires_grad_(s > 0)
                t0 = time.perf_counter()
                y = chunks[c](x)
                sync(g.device)
                timings.span(f"forward mb{i}" + (f" c{c}" if v > 1 else ""), t0, time.perf_counter())
                inputs[(i, c)], outputs[(i, c)] = x, y
                if s < last:
                    sends.append(dist.isend(y.detach().contiguous(), dst=(r + 1) % p, tag=tag(0, i, s + 1)))
            elif kind == "W":  # the weight gradients B deferred (ZB-H1)
                assert store is not None
                t0 = time.perf_counter()
                store.run(i)
                sync(g.device)
                timings.span(f"weight-gradient mb{i}", t0, time.perf_counter())
            else:
                x, y = inputs.pop((i, c)), outputs.pop((i, c))
                grad = recv((r + 1) % p, "pp_recv_backward", tag(1, i, s)) if s < last else None
                t0 = time.perf_counter()
                if store is not None:
                    store.deferring = i
                if s == last:
                    loss = _loss(y, cfg.micro_batches)
                    loss.backward()
                    total += float(loss.detach())
                else:
                    y.backward(grad)
                if store is not None:
                    store.deferring = None
                sync(g.device)
                timings.span(f"backward mb{i}" + (f" c{c}" if v > 1 else ""), t0, time.perf_counter())
                if s > 0:
                    sends.append(dist.isend(x.grad.contiguous(), dst=(r - 1) % p, tag=tag(1, i, s - 1)))
        t0 = time.perf_counter()
        for h in sends:
            h.wait()
        timings.add("pp_send_wait", t0, time.perf_counter())
        return total

    if return_grads:
        loss = step()
        grads = {}
        for c in range(v):  # named by the layer's index in the whole model
            for n, p_ in chunks[c].named_parameters():
                index, rest = n.split(".", 1)
                grads[f"{(c * p + r) * per + int(index)}.{rest}"] = p_.grad.detach().cpu()
        return {"loss": loss, "grads": grads}
    return _timed_steps(step, cfg, g, chunks, timings, barrier=True)


def data_parallel_step(g: Group, cfg: StepConfig) -> dict[str, Any]:
    """Every rank runs the whole model on its own micro-batches, then all-reduces the gradients
    (one flat buffer, as a DDP bucket does): the step and the all-reduce timed apart."""
    import torch
    import torch.distributed as dist

    from shardwise.measure.layers import Timings, stack, sync, timed_all_reduce

    timings = Timings()
    model = stack(cfg.shape, cfg.layers, dtype=_dtype(cfg.dtype), device=g.device)
    xs = _inputs(cfg, g.device)

    def step() -> None:
        for i, x in enumerate(xs):
            t0 = time.perf_counter()
            _loss(model(x), cfg.micro_batches).backward()
            sync(g.device)
            timings.span(f"forward+backward mb{i}", t0, time.perf_counter())
        flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
        timed_all_reduce(flat, dist.group.WORLD, timings, "dp_all_reduce")

    return _timed_steps(step, cfg, g, model, timings)


STEPS = {"tp": tensor_parallel_step, "pp": pipeline_parallel_step, "dp": data_parallel_step}


def steps(g: Group, kind: str, configs: list[StepConfig]) -> list[dict[str, Any]]:
    """Several steps of one kind in one process group (one spawn for a whole batch sweep)."""
    return [STEPS[kind](g, cfg) for cfg in configs]
