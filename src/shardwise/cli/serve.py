"""`shardwise serve`: serving latency and throughput of several plans side by side."""

from __future__ import annotations

import math
from typing import Any

import click

from shardwise.cli.options import _stack, alias_option, cluster_options, model_options
from shardwise.cli.serve_plans import scenario as _scenario
from shardwise.cli.serve_plans import scenario_of as _scenario_of
from shardwise.precisions import STORAGE_PRECISIONS

# the choices of engines/serving.py (STORAGE_BYTES, RUNTIMES), kept here so --help needs no numpy
PRECISIONS = list(STORAGE_PRECISIONS)  # weights and KV cache (shardwise.precisions)
RUNTIME_NAMES = ["graphs", "cpp-eager", "pytorch-eager"]
# Serving stacks and the runtime each implies (engines/serving.py RUNTIMES)
SERVING_FRAMEWORKS = {
    "tensorrt-llm": "graphs",
    "vllm": "graphs",
    "sglang": "graphs",
    "llama.cpp": "graphs",
    "fastertransformer": "cpp-eager",
    "pytorch": "pytorch-eager",
}
# ... and the all-reduce kernel each uses on small messages (physics/custom_allreduce.py)
FRAMEWORK_ALL_REDUCE = {"tensorrt-llm": "trtllm", "vllm": "vllm", "sglang": "sglang"}
# ... and those that start NCCL with NVLS off: SGLang sets NCCL_NVLS_ENABLE from --enable-nccl-nvls,
# default false (sglang PR 631; srt/entrypoints/engine.py)
FRAMEWORK_NVLS_OFF = ("sglang",)

serving_options = _stack(
    click.option(
        "--plan",
        "plans",
        multiple=True,
        metavar="tp=N[,pp=N]",
        help="A plan to compare (repeat): tp and pp, a number or 'all'; dp (replicas) fills the GPUs; "
        "first=N / last=N fix the layers of the first / last pipeline stage. [default: tp=all]",
    ),
    click.option("--input-len", type=int, default=512, show_default=True, help="Prompt tokens per request."),
    click.option("--output-len", type=int, default=128, show_default=True, help="Generated tokens per request."),
    click.option(
        "--lengths",
        default="fixed",
        show_default=True,
        metavar="fixed|sharegpt|FILE.csv",
        help="Request lengths (in-flight batching): fixed (every request --input-len and --output-len); sharegpt "
        "(drawn per request as vLLM's and SGLang's benchmarks sample ShareGPT: mean 224 prompt and 198 new tokens, "
        "log-normal, within the model's context); or a CSV with columns input_len,output_len (one request per row, "
        "or a histogram with a count column), drawn with replacement.",
    ),
    click.option(
        "--burstiness",
        type=float,
        default=1.0,
        show_default=True,
        help="With --request-rate: vLLM's burstiness, gaps between arrivals gamma-distributed with coefficient of "
        "variation 1/sqrt(B): 1 is Poisson, below 1 burstier, above 1 more even.",
    ),
    click.option(
        "--seed",
        type=click.IntRange(0, 2**32 - 1),
        default=0,
        show_default=True,
        help="Seed of the simulated arrivals and request lengths (a run repeats exactly).",
    ),
    alias_option(
        "--concurrency",
        "batch",
        old=("--batch",),
        type=int,
        default=1,
        show_default=True,
        help="Requests in flight (all replicas).",
    ),
    click.option(
        "--max-throughput",
        is_flag=True,
        help="As many requests in flight as the KV cache holds (at most 2048 per replica) instead of --concurrency.",
    ),
    click.option(
        "--request-rate",
        type=float,
        metavar="REQ/S",
        help="Requests arrive at random (Poisson) at this rate, all replicas together: TTFT and TPOT "
        "percentiles with the queueing (in-flight batching only).",
    ),
    click.option(
        "--batching",
        type=click.Choice(["inflight", "static"], case_sensitive=False),
        default="inflight",
        show_default=True,
        help="inflight: continuous batching with chunked prefill, simulated request by request (vLLM, SGLang, "
        "TensorRT-LLM); static: one batch of --concurrency requests prefilled together, then decoded together.",
    ),
    click.option(
        "--max-batched-tokens",
        type=click.IntRange(256, 1 << 20),
        help="In-flight: tokens one iteration may process (TensorRT-LLM max_num_tokens, vLLM max_num_batched_tokens, "
        "SGLang chunked_prefill_size, llama.cpp n_batch). [default: the framework's: TensorRT-LLM 8192; vLLM 8192 on "
        "GPUs of 70 GiB or more other than A100, else 2048; SGLang 2048-16384 by GPU memory; llama.cpp 2048]",
    ),
    click.option(
        "--requests",
        type=click.IntRange(50, 1_000_000),
        default=1000,
        show_default=True,
        help="In-flight: requests simulated per replica (percentiles exclude the first 10%).",
    ),
    click.option(
        "--weight-precision",
        type=click.Choice(PRECISIONS, case_sensitive=False),
        help="Storage of the weights (fp8 also computes in FP8 where the GPU can; nvfp4/mxfp4 in FP4 on "
        "Blackwell, elsewhere weight-only with 16-bit GEMMs). [default: bf16; with --ttft-max/--tpot-max: "
        "searched over what the GPU computes in]",
    ),
    click.option(
        "--kv-precision",
        type=click.Choice(PRECISIONS, case_sensitive=False),
        help="Storage of the KV cache. [default: bf16; with --ttft-max/--tpot-max, fp8 beside fp8 or nvfp4 weights]",
    ),
    click.option(
        "--ttft-max",
        metavar="TIME",
        help="Latency target for the time to first token (e.g. 500ms): search plans, precisions and loads for "
        "the most tokens/s per GPU that meets it (and --tpot-max).",
    ),
    click.option("--tpot-max", metavar="TIME", help="Latency target for the time per output token (e.g. 50ms)."),
    click.option(
        "--slo-percentile",
        type=click.Choice(["50", "90", "99"], case_sensitive=False),
        default="90",
        show_default=True,
        help="Which percentile the targets bound.",
    ),
    click.option(
        "--runtime",
        type=click.Choice(RUNTIME_NAMES, case_sensitive=False),
        help="graphs: CUDA graphs + NCCL from C++ (TensorRT-LLM, vLLM); cpp-eager: FasterTransformer; "
        "pytorch-eager: a plain PyTorch loop. [default: the framework's, graphs]",
    ),
    click.option(
        "--framework",
        type=click.Choice(list(SERVING_FRAMEWORKS), case_sensitive=False),
        default="tensorrt-llm",
        show_default=True,
        help="Serving stack, with its version's defaults (engines/engine_presets.py): runtime (tensorrt-llm, vllm, "
        "sglang and llama.cpp run CUDA graphs, fastertransformer cpp-eager, pytorch pytorch-eager), all-reduce "
        "kernel, KV-cache memory rule (TensorRT-LLM 90% of the free memory, vLLM 90% of the GPU, SGLang "
        "mem_fraction_static), chunked-prefill budget, per-stage cost of pipeline parallelism.",
    ),
    click.option(
        "--custom-all-reduce/--no-custom-all-reduce",
        default=True,
        show_default=True,
        help="Small all-reduces by the framework's own kernel where it uses one (vLLM, SGLang, TensorRT-LLM "
        "on NVLink; vLLM on 2 PCIe GPUs with P2P); off: NCCL for every all-reduce.",
    ),
    click.option("--first-stage-layers", type=int, help="Layers on the first pipeline stage [default: even split]."),
    click.option("--last-stage-layers", type=int, help="Layers on the last pipeline stage [default: even split]."),
)


@click.command()
@model_options
@cluster_options
@serving_options
@alias_option(
    "--plot",
    "frontier_path",
    old=("--frontier",),
    metavar="FILE",
    help="Draw each plan's throughput-vs-latency frontier across batch sizes (.png/.svg/.pdf), one panel for "
    "the system's own link and one for --plot-link (only one when they are the same).",
)
@alias_option(
    "--plot-link",
    "frontier_link",
    old=("--frontier-link",),
    default="PCIe=pcie4",
    show_default=True,
    metavar="LABEL=LINK",
    help="The second link of the frontier figure.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the estimates as JSON.")
@click.option(
    "--with-frontier",
    is_flag=True,
    help="With --json: also each plan's throughput-vs-latency frontier over static batches of 1 to 2048 per "
    "replica (tokens/s per user, tokens/s per GPU, batch), as --plot draws it for static batching.",
)
@click.option(
    "--emit",
    type=click.Choice(["vllm"], case_sensitive=False),
    help="Also print each plan's `vllm serve` command (docs/emit/vllm.md); a plan that does not fit is refused.",
)
@click.option(
    "--hf-id",
    metavar="ORG/NAME|DIR",
    help="With --emit vllm: the checkpoint vLLM loads (needed unless --model is a config.json, whose directory it "
    "takes).",
)
def serve(
    plans: tuple[str, ...],
    input_len: int,
    output_len: int,
    lengths: str,
    burstiness: float,
    seed: int,
    batch: int,
    max_throughput: bool,
    request_rate: float | None,
    batching: str,
    max_batched_tokens: int | None,
    requests: int,
    weight_precision: str | None,
    kv_precision: str | None,
    ttft_max: str | None,
    tpot_max: str | None,
    slo_percentile: str,
    runtime: str | None,
    framework: str,
    custom_all_reduce: bool,
    frontier_path: str | None,
    frontier_link: str,
    as_json: bool,
    with_frontier: bool,
    emit: str | None,
    hf_id: str | None,
    **options: Any,
) -> None:
    """Time to first token, time per output token, end-to-end latency, throughput and memory of
    serving MODEL with each --plan.

    \b
    Examples:
      shardwise serve --model llama3-70b --system dgx-h100 --plan tp=8 --plan pp=8 --plan tp=2,pp=4
      shardwise serve --model llama3-8b --system dgx-h100 --num-gpus 1 --weight-precision fp8 \\
          --kv-precision fp8 --input-len 2048 --output-len 2048 --max-throughput
      shardwise serve --model gpt-96l-4096h --system a100-pcie-8x --plan tp=8 --plan pp=8 --plot frontier.png
    """
    from shardwise.cli.options import build_cluster, build_model
    from shardwise.errors import SpecError
    from shardwise.loaders import parse_plan_spec
    from shardwise.presets import parse_link_spec
    from shardwise.specs.serving import ServingWorkload

    if frontier_path is not None:
        from shardwise.cli.options import check_output_path

        check_output_path(frontier_path, (".png", ".svg", ".pdf"), "--plot")
    second = parse_link_spec(frontier_link, "--plot-link")
    model = build_model(options)
    cluster = build_cluster({**options, "tp": 1, "pp": 1, "dp": None, "vpp": 1, "micro_batch": 1, "global_batch": None})
    if framework in FRAMEWORK_NVLS_OFF and options.get("nvls") is None:
        cluster = cluster.with_(nvls=False)
    if options.get("system"):  # the system's PCIe switches and sockets, if its preset has them
        from shardwise.presets import system

        cluster = cluster.with_(pcie=system(options["system"]).pcie)
    specs = [parse_plan_spec(t) for t in plans] or [parse_plan_spec("tp=all")]
    allowed = {"first_stage_layers", "last_stage_layers", "cp", "ep", "etp"}
    for spec in specs:
        extra = [k for k, _ in spec.options if k not in allowed]
        if extra:
            raise SpecError(
                f"--plan {spec.label!r}: serving plans take only tp, pp, cp, first, last, ep and etp "
                f"(not {', '.join(extra)}); replicas fill the GPUs"
            )
    from shardwise.cli.options import stage_kwargs

    stages = stage_kwargs(options, int(model.layers))
    runtime = runtime or SERVING_FRAMEWORKS[framework]
    if max_batched_tokens is None:  # the framework's chunked-prefill budget on this GPU
        from shardwise.engines.engine_presets import max_batched_tokens as engine_budget

        max_batched_tokens = engine_budget(framework, float(cluster.gpu.memory_bytes), cluster.gpu.name)
    if len({s.label for s in specs}) != len(specs):
        raise SpecError("each --plan must be different")
    try:
        kernel = FRAMEWORK_ALL_REDUCE.get(framework, "none") if custom_all_reduce else "none"
        searched = weight_precision is None
        weight_precision, kv_precision = weight_precision or "bf16", kv_precision or "bf16"
        workload = ServingWorkload(
            input_len, output_len, batch, weight_precision, kv_precision, runtime, kernel, engine=framework
        )
    except SpecError as exc:  # name the flag: "serving: input_len: ..." -> "--input-len: ..."
        text = str(exc).removeprefix("serving: ")
        field, _, rest = text.partition(": ")
        flags = {"input_len": "--input-len", "output_len": "--output-len", "batch": "--concurrency"}
        raise SpecError(f"{flags[field]}: {rest}" if field in flags and rest else str(exc)) from None
    from shardwise.cli.serve_mix import check_mix_flags, request_mix

    mix = request_mix(lengths)
    source = click.get_current_context().get_parameter_source
    given = any(source(k) is click.core.ParameterSource.COMMANDLINE for k in ("input_len", "output_len"))
    targets = ttft_max is not None or tpot_max is not None
    check_mix_flags(mix, burstiness, request_rate, batching, targets, emit, given)
    if targets:
        from shardwise.cli.serve_targets import run_targets

        if emit:
            raise SpecError("--emit vllm prints the servers of --plan estimates; drop --ttft-max/--tpot-max to emit")

        if batching == "static" or max_throughput or request_rate is not None:
            raise SpecError(
                "--ttft-max/--tpot-max search loads under in-flight batching: drop --batching static, "
                "--max-throughput and --request-rate"
            )
        if source("batch") is click.core.ParameterSource.COMMANDLINE:  # never replace what was given
            raise SpecError(
                f"--concurrency {batch}: --ttft-max/--tpot-max search the largest load that meets them; drop "
                "--concurrency, or drop the targets to price that load"
            )
        choices = None if searched else [(weight_precision, kv_precision)]
        run_targets(
            model,
            cluster,
            [_scenario_of(model, cluster, s, stages) for s in specs] if plans else None,
            workload,
            ttft_max,
            tpot_max,
            slo_percentile,
            choices,
            max_batched_tokens,
            as_json,
        )
        return
    traffic = _traffic(batching, max_throughput, request_rate, max_batched_tokens, requests)
    if traffic is not None:
        traffic.update(mix=mix, seed=seed, burstiness=burstiness)
    rows, invalid = [], []
    for spec in specs:  # one invalid plan does not stop the others
        try:
            rows.append(_estimate(model, cluster, spec, workload, max_throughput, stages, traffic))
        except SpecError as exc:
            invalid.append((spec.label, str(exc)))
    if not rows:
        raise SpecError(
            "; ".join(f"--plan {label}: {reason.removeprefix(f'--plan {label}: ')}" for label, reason in invalid)
        )
    valid_specs = [s for s in specs if s.label not in dict(invalid)]
    spreads = _spreads(rows, workload, options)
    hints = {label: _fit_hint(model, cluster, est, stages) for label, est in rows if not bool(est.fits_in_memory)}
    figure = None
    if frontier_path is not None:
        from shardwise.cli.serve_report import draw_frontier

        figure = draw_frontier(
            model,
            cluster,
            valid_specs,
            workload,
            second,
            frontier_path,
            stages,
            max(spreads.values()),
            traffic is not None,
            mix,
        )
    launches = {label: _launch(est, emit, _model_id(options, hf_id)) for label, est in rows} if emit else {}
    if as_json:
        from shardwise import export

        click.echo(
            export.dumps(
                {
                    "workload": {
                        "input_len": input_len if mix is None else None,
                        "output_len": output_len if mix is None else None,
                        **_mix_dict(mix, rows, seed, burstiness, traffic),
                        "weight_precision": weight_precision,
                        "kv_precision": kv_precision,
                        "runtime": runtime,
                    },
                    "plans": [
                        {
                            **export.serving_dict(label, est, *spreads[label]),
                            "would_fit": hints.get(label),
                            "launch": launches.get(label),
                            **(
                                {"frontier": _frontier(model, cluster, specs, label, workload, stages)}
                                if with_frontier
                                else {}
                            ),
                        }
                        for label, est in rows
                    ],
                    "invalid_plans": [{"plan": label, "reason": reason} for label, reason in invalid],
                }
            )
        )
        return
    from shardwise.cli.serve_report import print_estimates

    print_estimates(model, cluster, workload, rows, figure, max_throughput, spreads, mix)
    for label, hint in hints.items():
        click.echo(f"{label} would fit with: {hint}" if hint else f"{label}: nothing close fits (more GPUs?)")
    for label, reason in invalid:
        click.echo(f"--plan {label}: not computed: {reason.removeprefix(f'--plan {label}: ')}")
    for label, launch in launches.items():
        click.echo(f"\n{label}:\n{launch['shell']}")


def _mix_dict(mix: Any, rows: list[tuple[str, Any]], seed: int, burstiness: float, traffic: Any) -> dict[str, Any]:
    """The request lengths and arrivals of --json's workload."""
    if traffic is None:
        return {"lengths": "fixed"}
    out: dict[str, Any] = {"lengths": "fixed" if mix is None else mix.name, "seed": seed, "burstiness": burstiness}
    if mix is not None:
        est = rows[0][1]
        out.update(lengths_source=mix.source, mean_input_len=est.mean_input_len, mean_output_len=est.mean_output_len)
    return out


def _frontier(
    model: Any, cluster: Any, specs: list[Any], label: str, workload: Any, stages: dict[str, Any] | None
) -> dict[str, list[float]]:
    """One plan's static-batch frontier (`analyses.serving.frontier`, as `--plot` draws it)."""
    from shardwise.analyses.serving import frontier

    spec = next(s for s in specs if s.label == label)
    per_user, per_gpu, batch = frontier(_scenario(model, cluster, spec, stages), workload)
    return {
        "tokens_per_s_per_user": per_user.tolist(),
        "tokens_per_s_per_gpu": per_gpu.tolist(),
        "batch": batch.tolist(),
    }


# Request rates served: below one a day requests never overlap (each is served alone, the same
# answer as one in flight) and arrival times lose the precision of a step; above 1e9 per second no
# replica keeps up (the answer is the maximum throughput either way).
REQUEST_RATE_RANGE_PER_S = (1.0 / 86400, 1e9)


def _traffic(
    batching: str, max_throughput: bool, rate: float | None, max_batched_tokens: int, requests: int
) -> dict[str, Any] | None:
    """The in-flight simulation's settings (None: static batching), checked."""
    from shardwise.errors import SpecError

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
    if batching == "static":
        return None
    return {"rate_per_s": rate, "max_batched_tokens": max_batched_tokens, "requests": requests}


def _estimate(
    model: Any,
    cluster: Any,
    spec: Any,
    workload: Any,
    max_throughput: bool,
    stages: dict[str, Any] | None = None,
    traffic: dict[str, Any] | None = None,
) -> tuple[str, Any]:
    from shardwise.analyses.serving import at_max_batch
    from shardwise.engines.serving import estimate_serving

    scn = _scenario(model, cluster, spec, stages)
    if traffic is not None:
        from shardwise.engines.inflight import estimate_inflight

        users = None if max_throughput or traffic["rate_per_s"] is not None else int(workload.batch)
        return spec.label, estimate_inflight(scn, workload, users, **traffic)
    return spec.label, at_max_batch(scn, workload) if max_throughput else estimate_serving(scn, workload)


def _model_id(options: dict[str, Any], hf_id: str | None) -> str | None:
    """What vLLM loads: --hf-id, else the directory of a config.json given as --model."""
    if hf_id:
        return hf_id
    name = options.get("model_name") or ""
    if name.lower().endswith(".json"):
        import os

        return os.path.dirname(os.path.abspath(name))
    return None


def _launch(est: Any, emit: str | None, model_id: str | None) -> dict[str, Any] | None:
    """The `vllm serve` of one priced plan (a dict: `Launch.as_dict`); a plan that does not fit is refused."""
    if emit is None:
        return None
    from shardwise.emit import EmitError, vllm_launch

    if not bool(est.fits_in_memory):
        per_replica = -(-int(est.workload.batch) // int(est.scenario.plan.dp))
        raise EmitError(
            f"--emit vllm: the plan tp={int(est.scenario.plan.tp)} pp={int(est.scenario.plan.pp)} does not fit in "
            f"memory: a replica holds {int(est.max_batch)} of its {per_replica} sequences; not emitted"
        )
    return vllm_launch(est.scenario, est.workload, model_id).as_dict()


def _fit_hint(model: Any, cluster: Any, est: Any, stages: dict[str, Any]) -> str:
    """What would make a plan that does not fit fit: narrower weights or KV cache, or more TP or PP
    on the same GPUs (the first few that do, cheapest change first)."""
    from dataclasses import replace

    from shardwise.analyses.serving import at_max_batch
    from shardwise.engines.serving import estimate_serving
    from shardwise.errors import SpecError
    from shardwise.loaders import parse_plan_spec

    wl, plan = est.workload, est.scenario.plan
    tp, pp = int(plan.tp), int(plan.pp)
    tries: list[tuple[str, Any, Any]] = []
    for w in ("fp8", "int4"):
        if wl.weight_precision in ("bf16", "fp16") or (w == "int4" and wl.weight_precision != "int4"):
            tries.append((f"--weight-precision {w}", f"tp={tp},pp={pp}", replace(wl, weight_precision=w)))
    if wl.kv_precision in ("bf16", "fp16"):
        tries.append(("--kv-precision fp8", f"tp={tp},pp={pp}", replace(wl, kv_precision="fp8")))
    tries += [
        (f"tp={tp * 2},pp={pp}", f"tp={tp * 2},pp={pp}", wl),
        (f"tp={tp},pp={pp * 2}", f"tp={tp},pp={pp * 2}", wl),
    ]
    found = []
    for text, plan_text, workload in tries:
        try:
            scn = _scenario(model, cluster, parse_plan_spec(plan_text), stages)
            other = estimate_serving(scn, workload)
        except SpecError:
            continue
        if bool(other.fits_in_memory) or (
            int(other.max_batch) >= 1
            and int(est.workload.batch) > 1
            and bool(at_max_batch(scn, workload).fits_in_memory)
        ):
            found.append(text)
        if len(found) == 2:
            break
    return " or ".join(found)


def _spreads(rows: list[tuple[str, Any]], workload: Any, options: dict[str, Any]) -> dict[str, tuple[float, str]]:
    """Each plan's 80% interval width (log sd) and where it comes from: a calibration fitted on
    serving runs (its spread and the plan's sensitivity to the fitted parameters, for the time per
    output token), else the serving model's measured spread."""
    from shardwise.calibration.spreads import SERVING_LOG_SD
    from shardwise.cli.options import load_calibration

    cal = load_calibration(options)
    if cal is None or not cal.serving_runs:
        basis = "the serving model's spread on 66 published runs"
        if cal is not None:
            basis += f" ({cal.path} has no serving runs)"
        return {label: (SERVING_LOG_SD, basis) for label, _ in rows}
    from shardwise.calibration.fit import ServingCase
    from shardwise.calibration.intervals import spread

    cases = [ServingCase(est.scenario, est.workload, "tpot_s") for _, est in rows]
    sd = spread(cases, cal.fit).log_sd
    basis = f"calibration {cal.path} ({cal.serving_runs} serving run(s))"
    return {label: (float(x), basis) for (label, _), x in zip(rows, sd, strict=True)}
