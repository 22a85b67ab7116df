"""`shardwise serve`'s load flags checked against each other: the latency targets, the request
rate, --max-throughput, --concurrency, and what a static batch has no use for (moved out of
`requests.serve`, same behaviour)."""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any

from shardwise.errors import SpecError

# Request rates served: below one a day requests never overlap (each is served alone, the same
# answer as one in flight) and arrival times lose the precision of a step; above 1e9 per second no
# replica keeps up (the answer is the maximum throughput either way).
REQUEST_RATE_RANGE_PER_S = (1.0 / 86400, 1e9)


def default_batching(framework: str) -> str:
    """How `framework` batches requests unless told: in flight where it batches continuously, else
    static (`engines.engine_presets.EnginePreset.continuous_batching`: FasterTransformer, PyTorch)."""
    from shardwise.engines.engine_presets import engine

    return "inflight" if engine(framework).continuous_batching else "static"


def resolved_batching(req: Any) -> str:
    """`req.batching`, or the engine's default (`default_batching`); under an engine without
    continuous batching what only in-flight batching prices is refused in one line (review 35: FasterTransformer
    5.x was simulated with in-flight batching and chunked prefill, close to TensorRT-LLM)."""
    if default_batching(req.framework) == "inflight":
        return req.batching or "inflight"
    needs = [
        flag
        for flag, on in (
            ("--batching inflight", req.batching == "inflight"),
            ("--ttft-max/--tpot-max", req.targets),
            ("--request-rate", req.request_rate is not None),
            (f"--lengths {req.lengths}", req.lengths != "fixed"),
        )
        if on
    ]
    if needs:
        raise SpecError(
            f"{needs[0]}: {req.framework} runs no in-flight (continuous) batching, only static batches prefilled "
            "together and decoded to the end (--batching static, its default); drop it, or use --framework "
            "tensorrt-llm, vllm or sglang"
        )
    return "static"


def check_serve_fields(req: Any) -> None:
    """A `ServeRequest`'s own numeric fields in the command line's ranges, checked when the request
    is built (review 37: `ServeRequest(requests=0)` constructed and failed only in `.run()`)."""
    from shardwise.requests.field_ranges import check_whole

    for name in ("input_len", "output_len", "concurrency"):
        check_whole(name, getattr(req, name), 1)
    budget = req.max_batched_tokens
    if budget is not None and not 256 <= budget <= 1 << 20:
        raise SpecError(f"--max-batched-tokens: {budget} is not allowed; give a whole number from 256 to {1 << 20}")
    if not 0 <= req.seed <= 2**32 - 1:
        raise SpecError(f"--seed: {req.seed} is not allowed; give a whole number from 0 to {2**32 - 1}")
    if not 50 <= req.requests <= 1_000_000:  # the command line's range (percentiles need enough requests)
        raise SpecError(f"--requests: {req.requests} is not allowed; give a whole number from 50 to 1000000")
    if req.request_rate is not None:
        low, high = REQUEST_RATE_RANGE_PER_S
        if not low <= req.request_rate <= high:
            raise SpecError(
                f"--request-rate: {req.request_rate:g} is not allowed; it must be a number of requests per second "
                f"from {low:g} (one a day: below it requests never meet, as one at a time) to {high:g}"
            )
    if not 0.01 <= req.burstiness <= 100:
        raise SpecError(f"--burstiness: {req.burstiness:g} is not allowed; give a number from 0.01 to 100 (1: Poisson)")
    seconds_of(req.ttft_max, "--ttft-max")
    seconds_of(req.tpot_max, "--tpot-max")
    if req.hf_id is not None:
        check_hf_id(req.hf_id)


def check_hf_id(text: str) -> None:
    """--hf-id: a Hugging Face id (ORG/NAME) or a checkpoint folder path (review 37: 'a/b/c' went into
    the printed `vllm serve` line unchecked; a folder is not required to exist here: the line runs on
    the serving host, review 39)."""
    import re
    from pathlib import Path

    if text.startswith((".", "/", "~")) or Path(text).expanduser().is_dir():
        return  # a checkpoint folder: on the serving host, which need not be this machine (review 39)
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", text):
        example = "meta-llama/Llama-3.1-8B"
        raise SpecError(f"--hf-id {text}: not a Hugging Face id; give ORG/NAME (e.g. {example}) or a folder")


def check_load_flags(req: Any, budget: int, mix: Any) -> dict[str, Any] | None:
    """`req`: a `requests.serve.ServeRequest` (not imported: serve imports this module). One clear
    line where the load flags clash (`check_load_clash`, already asked when the request was
    built); else the in-flight simulation's settings (None: a static batch, or the latency-target
    search, which picks its own loads)."""
    check_load_clash(req)
    traffic = None
    if not req.targets:
        traffic = traffic_of(req.batching, req.max_throughput, req.request_rate, budget, req.requests)
        if traffic is not None:
            traffic.update(mix=mix, seed=req.seed, burstiness=req.burstiness)
    return traffic


def check_load_clash(req: Any) -> None:
    """One clear line where the load flags of `req` (its batching resolved) clash, from its fields
    alone: asked when a `ServeRequest` is built (`ServeRequest(framework="pytorch", requests=100)`
    used to construct and fail only in `.run()`), as `serve` refuses the same flags."""
    if req.targets:  # checked before any search starts
        if req.emit:
            raise SpecError(
                f"--emit {req.emit} prints the servers of --plan estimates; drop --ttft-max/--tpot-max to emit"
            )
        if req.batching == "static" or req.max_throughput or req.request_rate is not None:
            raise SpecError(
                "--ttft-max/--tpot-max search loads under in-flight batching: drop --batching static, "
                "--max-throughput and --request-rate"
            )
        if req.concurrency is not None:  # never replace what was given
            raise SpecError(
                f"--concurrency {req.concurrency}: --ttft-max/--tpot-max search the largest load that meets them; "
                "drop --concurrency, or drop the targets to price that load"
            )
        seconds_of(req.ttft_max, "--ttft-max")
        seconds_of(req.tpot_max, "--tpot-max")
    if req.concurrency is not None and not req.targets:  # one load only: never drop what was given
        rate = "--request-rate" if req.request_rate is not None else None
        other = "--max-throughput" if req.max_throughput else rate
        if other is not None:
            raise SpecError(f"--concurrency and {other} exclude each other: give one")
    if not req.targets:  # the rate's and the request count's ranges, and the rate against static batching
        traffic_of(req.batching, req.max_throughput, req.request_rate, 0, req.requests)
    if req.batching == "static" and req.lengths != "fixed":  # what a mix says first (`serve_mix`)
        raise SpecError(f"--lengths {req.lengths} needs --batching inflight (a static batch has one length)")
    if req.batching == "static":  # one batch, priced in closed form: nothing of the simulation applies
        default = {f.name: f.default for f in fields(req)}  # the request's own defaults, not copies
        names = ("max_batched_tokens", "requests", "seed")
        given = ["--" + k.replace("_", "-") for k in names if getattr(req, k) != default[k]]
        if given:
            one = len(given) == 1
            from shardwise.engines.engine_presets import engine

            static_only = not engine(req.framework).continuous_batching  # FasterTransformer, PyTorch
            fix = (
                f"{req.framework} runs static batches only: drop {' and '.join(given)}"
                if static_only
                else f"drop --batching static, or drop {' and '.join(given)}"
            )
            raise SpecError(
                f"{', '.join(given)} shape{'s' * one} the in-flight simulation; a static batch has none: {fix}"
            )


def seconds_of(value: str | None, flag: str) -> float | None:
    """A latency target in seconds (None: none given); a time with its unit, never a bare number, as
    --link-latency and the other time flags take (review 32: `--tpot-max 50` was 50 s, met by every load)."""
    if value is None:
        return None
    from shardwise.units import UnitError, is_bare_number, parse_seconds

    if is_bare_number(str(value).strip()):  # '500': seconds or milliseconds? (`--tpot-max 50` read 50 s)
        raise SpecError(f"{flag}: {value} is not allowed; give a time with its unit, such as 500ms or 1s")
    try:
        seconds = parse_seconds(value)
    except UnitError:  # not parse_seconds' hint, which offers seconds as a bare number
        raise SpecError(f"{flag}: {value!r} is not a time; give one with its unit, such as 500ms or 1s") from None
    if not seconds > 0 or seconds == float("inf"):
        raise SpecError(f"{flag}: {value!r} is not allowed; give a time > 0 such as 500ms")
    return seconds


def traffic_of(
    batching: str, max_throughput: bool, rate: float | None, max_batched_tokens: int, requests: int
) -> dict[str, Any] | None:
    """The in-flight simulation's settings (None: static batching), checked."""
    if rate is not None:
        low, high = REQUEST_RATE_RANGE_PER_S
        if not (math.isfinite(rate) and low <= rate <= high):
            raise SpecError(
                f"--request-rate: {rate:g} is not allowed; it must be a number of requests per second from {low:g} "
                f"(one a day: below it requests never meet, as one at a time) to {high:g}"
            )
        if batching == "static":
            raise SpecError("--request-rate needs --batching inflight (a static batch has no arrivals)")
        if max_throughput:
            raise SpecError("--request-rate and --max-throughput exclude each other: give one")
    if not 50 <= requests <= 1_000_000:  # the command line's range (percentiles need enough requests)
        raise SpecError(f"--requests: {requests} is not allowed; give a whole number from 50 to 1000000")
    if batching == "static":
        return None
    return {"rate_per_s": rate, "max_batched_tokens": max_batched_tokens, "requests": requests}
