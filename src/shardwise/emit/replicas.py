"""Data-parallel replicas of a serving plan as separate servers (review 50 #12): each its own GPUs
(`CUDA_VISIBLE_DEVICES`) and its own API port (`--port`), so that the copies of a printed command
neither share GPUs nor collide on one port; a load balancer over their endpoints spreads the load
as `engines.inflight` prices replicas (each its own queue).

`--port` is each server's own flag, its default the first replica's: vLLM 0.34 `vllm serve --port`
(FrontendArgs.port 8000, vllm/entrypoints/common/cli_args.py of the PyPI wheel), SGLang 0.5.6.post2
`--port` (ServerArgs.port 30000, sglang/srt/server_args.py), trtllm-serve `--port` (click option,
default 8000, tensorrt_llm/commands/serve.py @00209af1). Each engine picks its other
ports (NCCL, ZMQ, torch.distributed) free at start, so that only the API port is written.
"""

from __future__ import annotations

from shardwise.emit.launch import EmitError, Replica

# each engine's default API port (module docstring): the first replica's
BASE_PORT = {"vllm": 8000, "sglang": 30000, "trtllm": 8000}

__all__ = ["BASE_PORT", "Replica", "replicas"]


def replicas(engine: str, dp: int, gpus: int, per_node: int) -> tuple[tuple[Replica, ...], str]:
    """The replica slots of one server and a note, for `dp` replicas of `gpus` GPUs each on servers
    of `per_node`: replicas fill servers in order, `per_node // gpus` on each; none where a replica
    fills whole servers (each sees all its GPUs; the same port on another machine)."""
    if dp <= 1:
        return (), ""
    if gpus >= per_node:
        servers = -(-gpus // per_node)
        return (), f"{dp} replicas: run this command on each group of {servers} servers, a load balancer over them"
    if per_node % gpus:
        raise EmitError(
            f"--emit {engine}: replicas of {gpus} GPUs on servers of {per_node}: a replica would span two servers; "
            f"plan tp x pp dividing {per_node}"
        )
    slots = min(per_node // gpus, dp)
    servers = -(-dp // slots)
    base = BASE_PORT[engine]
    out = []
    for s in range(slots):
        devices = ",".join(str(g) for g in range(s * gpus, (s + 1) * gpus))
        ranks = [str(r) for r in range(s, dp, slots)]
        shown = ", ".join(ranks if len(ranks) <= 4 else [*ranks[:3], "...", ranks[-1]])
        which = f"replica {s}" if servers == 1 else f"replica{'s' * (len(ranks) > 1)} {shown} (slot {s} of a server)"
        gpu_words = f"GPU{'s' * (gpus > 1)} {devices}"
        out.append(Replica(devices, base + s, f"{which}: {gpu_words}, port {base + s}"))
    where = "on one server" if servers == 1 else f"{slots} on each of {servers} servers"
    note = (
        f"{dp} replicas ({where}): one command each below, its own GPUs (CUDA_VISIBLE_DEVICES) and port "
        f"(--port {base}-{base + slots - 1}); put a load balancer over their endpoints"
    )
    return tuple(out), note
