"""`shardwise serve`: serving latency and throughput of several plans side by side."""

from __future__ import annotations

from typing import Any

import click

from shardwise.cli.option_kit import PerSecond
from shardwise.cli.options import AliasChoice, _stack, alias_option, cluster_options, model_options
from shardwise.cli.output import output_option
from shardwise.cli.serve_output import OUTPUT_FORMATS
from shardwise.precisions import STORAGE_PRECISIONS
from shardwise.serving_names import (  # light: `serve --help` imports no numpy (review 40 #19)
    FRAMEWORK_NVLS_OFF,  # noqa: F401 (tests read it here)
    RUNTIME_NAMES,
    SERVING_FRAMEWORKS,
    SHAREGPT_MEAN_INPUT_TOKENS,
    SHAREGPT_MEAN_OUTPUT_TOKENS,
)

PRECISIONS = list(STORAGE_PRECISIONS)  # weights and KV cache (shardwise.precisions)


def __getattr__(name: str) -> Any:
    """The names tests and tools read here that need the request layer, imported when asked for."""
    if name == "FRAMEWORK_ALL_REDUCE":
        from shardwise.requests.serve import FRAMEWORK_ALL_REDUCE

        return FRAMEWORK_ALL_REDUCE
    if name == "_scenario":
        from shardwise.requests.serve_plans import scenario

        return scenario
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


serving_options = _stack(
    click.option(
        "--plan",
        "plans",
        multiple=True,
        metavar="tp=N[,pp=N]",
        help="A plan to compare (repeat): tp and pp, a number or 'all'; dp (replicas) fills the GPUs; cp (a prompt "
        "over more GPUs), ep and etp (a mixture of experts' experts; etp derived when not given: docs/serving.md); "
        "first=N / last=N fix the layers of the first / last pipeline stage. [default: every layout of the machine "
        "(a mixture of experts: also ep = tp, and ep = the GPUs with data-parallel attention, where the engine runs "
        "them), with the best for latency and for throughput named]",
    ),
    click.option("--input-len", type=int, help="Prompt tokens per request. [default: 512]"),
    click.option("--output-len", type=int, help="Generated tokens per request. [default: 128]"),
    click.option(
        "--lengths",
        default="fixed",
        show_default=True,
        metavar="fixed|sharegpt|FILE.csv|.tsv|.txt",
        help="Request lengths (in-flight batching): fixed (every request --input-len and --output-len); sharegpt "
        "(drawn per request as vLLM's and SGLang's benchmarks sample ShareGPT: mean "
        f"{SHAREGPT_MEAN_INPUT_TOKENS:.0f} prompt and {SHAREGPT_MEAN_OUTPUT_TOKENS:.0f} new tokens, log-normal, "
        "within the model's context; a run prices its own draws' means, which the report names, within about 1%); "
        "or a table (.csv, .tsv or .txt, separated by commas, semicolons or tabs) with columns "
        "input_len,output_len (one request per row, "
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
        help="Requests in flight (all replicas, spread evenly over them); not with --max-throughput or "
        "--request-rate. [default: 1]",
    ),
    click.option(
        "--max-throughput",
        is_flag=True,
        help="As many requests in flight as the KV cache holds (at most the engine's sequence cap per replica) "
        "instead of --concurrency: in-flight, a sustained rate (each finished request replaced at once, the "
        "requests started spread over one request's lifetime, not sent in one burst); static: one batch.",
    ),
    click.option(
        "--request-rate",
        type=PerSecond("requests"),
        metavar="REQ/S",
        help="Requests arrive at random (Poisson) at this rate, all replicas together: TTFT and TPOT "
        "percentiles with the queueing (in-flight batching only).",
    ),
    click.option(
        "--batching",
        type=click.Choice(["inflight", "static"], case_sensitive=False),
        help="inflight: continuous batching with chunked prefill, simulated request by request (vLLM, SGLang, "
        "TensorRT-LLM, llama.cpp); static: one batch of --concurrency requests prefilled together, then decoded "
        "together. [default: inflight; static under fastertransformer and pytorch, which have no continuous "
        "batching]",
    ),
    click.option(
        "--max-batched-tokens",
        type=click.IntRange(256, 1 << 20),
        help="In-flight: tokens one iteration may process (TensorRT-LLM max_num_tokens, vLLM max_num_batched_tokens, "
        "SGLang chunked_prefill_size, whose memory reserve follows it, llama.cpp n_batch; vLLM runs no more "
        "sequences at once). [default: the "
        "framework's: TensorRT-LLM 8192; vLLM 16384 on GPUs of 160 GiB or more, 8192 of 70 GiB or more other than "
        "A100, else 2048; SGLang 2048-16384 by GPU memory; llama.cpp 2048]",
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
        "Blackwell, elsewhere weight-only with 16-bit GEMMs). [default: the checkpoint's: a config.json --model's "
        "quantization_config, a preset's published one (deepseek-v3, kimi-k2 fp8; gpt-oss mxfp4); else bf16, "
        "with --ttft-max/--tpot-max searched over what the GPU computes in]",
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
        help="Which percentile --ttft-max/--tpot-max bound. [default: 90]",
    ),
    click.option(
        "--runtime",
        type=click.Choice(list(RUNTIME_NAMES), case_sensitive=False),
        help="graphs: CUDA graphs + NCCL from C++ (TensorRT-LLM, vLLM); cpp-eager: FasterTransformer; "
        "pytorch-eager: a plain PyTorch loop. [default: the framework's, graphs]",
    ),
    click.option(
        "--attention-kernel",
        type=click.Choice(["fused", "flash2", "flash3", "flash4"], case_sensitive=False),
        help="vLLM's or SGLang's attention kernel (their --attention-backend): fused (cuDNN/TensorRT-LLM class), "
        "flash2, flash3 (Hopper), flash4 (Hopper, B200-class). [default: the engine's on the GPU: flash3 on "
        "Hopper, fused on B200-class Blackwell, flash2 elsewhere; its own for the other engines]",
    ),
    click.option(
        "--framework",
        type=AliasChoice(list(SERVING_FRAMEWORKS), {"trtllm": "tensorrt-llm"}),  # trtllm: --emit's name for it
        help="Serving stack, with its version's defaults (engines/engine_presets.py): runtime (tensorrt-llm, vllm, "
        "sglang and llama.cpp run CUDA graphs, fastertransformer cpp-eager, pytorch pytorch-eager), all-reduce "
        "kernel, KV-cache memory rule (TensorRT-LLM 90% of the free memory, vLLM 90% of the GPU, SGLang "
        "mem_fraction_static), chunked-prefill budget, per-stage cost of pipeline parallelism. "
        "[default: tensorrt-llm; --emit's engine with --emit]",
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
@click.option("--csv", "as_csv", is_flag=True, help="Print the estimates as CSV, one row per plan (the --json fields).")
@output_option(OUTPUT_FORMATS, "the estimates: the --json answer, or one CSV row per plan", stdout="the CSV")
@click.option(
    "--with-frontier",
    is_flag=True,
    help="With --json: also each plan's throughput-vs-latency frontier over static batches of 1 to 2048 per "
    "replica (tokens/s per user, tokens/s per GPU, batch), as --plot draws it for static batching.",
)
@click.option(
    "--emit",
    type=click.Choice(["vllm", "sglang", "trtllm"], case_sensitive=False),
    help="Also print each plan's server command: `vllm serve`, `python -m sglang.launch_server`, `trtllm-serve` "
    "(docs/emit/vllm.md, sglang.md, trtllm.md); a plan that does not fit is refused.",
)
@click.option(
    "--hf-id",
    metavar="ORG/NAME|DIR",
    help="With --emit: the checkpoint the server loads (needed unless --model is a config.json, whose directory "
    "it takes, or a preset whose checkpoint stores the weights priced).",
)
@click.option(
    "--hf-weights",
    type=click.Choice(PRECISIONS, case_sensitive=False),
    help="With --hf-id: what that checkpoint stores its weights in, where it is not read (no local config.json, "
    "not a preset's); priced unless --weight-precision is given.",
)
def serve(
    frontier_path: str | None,
    frontier_link: str,
    as_json: bool,
    as_csv: bool,
    output_path: str | None,
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
    from shardwise.cli import serve_output
    from shardwise.cli.options import echo_notes
    from shardwise.presets import parse_link_spec
    from shardwise.requests.serve import ServeRequest

    serve_output.check(output_path, as_csv, as_json)
    quiet = as_json or as_csv or output_path == "-"  # the answer alone on stdout
    if frontier_path is not None:
        from shardwise.cli.options import check_output_path

        check_output_path(frontier_path, (".png", ".svg", ".pdf"), "--plot")
    given = click.get_current_context().get_parameter_source("frontier_link")
    if frontier_path is None and not options.get("with_frontier") and given is click.core.ParameterSource.COMMANDLINE:
        from shardwise.errors import SpecError

        raise SpecError("--plot-link is the second link of the --plot figure; add --plot FILE, or drop --plot-link")
    second = parse_link_spec(frontier_link, "--plot-link")
    if frontier_path is None and _given("frontier_link"):  # it was ignored without a word (review 37)
        from shardwise.errors import SpecError

        raise SpecError(f"--plot-link {frontier_link}: it is the second link of the --plot figure; add --plot FILE")
    if options.get("with_frontier") and not as_json:
        from shardwise.errors import SpecError

        raise SpecError("--with-frontier adds each plan's frontier to --json; add --json (or draw it with --plot)")
    request = ServeRequest.from_options(options)
    setting = request.setting()  # its notes are echoed once the plans are priced: a refusal stays one line
    if request.targets:
        from shardwise.cli.render import progress_bar
        from shardwise.cli.serve_targets import print_targets

        with progress_bar(request.search_size(setting), "plans x precisions", disable=quiet) as advance:
            found = request.search(setting, advance)
        echo_notes(setting.notes)
        serve_output.write(found.as_dict(), output_path, as_csv)
        if as_csv or output_path == "-":
            return
        if as_json:
            from shardwise import export

            click.echo(export.dumps(found.as_dict()))
            return
        print_targets(found)
        return
    from shardwise.cli.render import progress_bar
    from shardwise.requests.serve_result import priced, progress_steps

    # in flight each plan's run of traffic is simulated (seconds each on a long --requests): a bar
    with progress_bar(progress_steps(setting), "plans", disable=quiet or setting.traffic is None) as advance:
        result = priced(request, setting, advance)
        if not as_json:
            result.scaling  # noqa: B018 (priced here, under the bar; the report reads it)
    echo_notes(setting.notes)
    figure = None
    if frontier_path is not None:
        from shardwise.cli.serve_report import draw_frontier

        s = setting
        figure = draw_frontier(
            s.model,
            s.cluster,
            result.valid_specs(),
            s.workload,
            second,
            frontier_path,
            s.stages,
            max(result.spreads.values()),
            s.traffic is not None,
            s.mix,
        )
    if as_csv or output_path is not None:
        serve_output.write(result.as_dict(), output_path, as_csv)
        if as_csv or output_path == "-":
            return
    if as_json:
        from shardwise import export

        click.echo(export.dumps(result.as_dict()))
        return
    from shardwise.cli.serve_report import print_estimates

    s = setting
    print_estimates(s.model, s.cluster, s.workload, result.rows, figure, request.max_throughput, result.spreads, s.mix)
    for label, split in (result.scaling or {}).items():
        if split.superlinear:  # more than k times k times fewer GPUs: say why (`analyses.pp_scaling`)
            from rich.markup import escape

            from shardwise.cli.render import console

            console().print(escape(split.why(label)))
    for label, hint in result.hints.items():
        click.echo(f"{label} would fit with: {hint}" if hint else f"{label}: nothing close fits (more GPUs?)")
    for label, reason in result.invalid:
        click.echo(f"--plan {label}: not computed: {reason.removeprefix(f'--plan {label}: ')}")
    if result.compared_layouts:
        _print_best(result)
    for label, launch in result.launches.items():
        click.echo(f"\n{label}:\n{launch['shell']}")


def _print_best(result: Any) -> None:
    """Without --plan: which of the machine's layouts is best for latency and for throughput."""
    from shardwise.units import format_seconds

    s = result.setting
    gpus = int(s.cluster.num_gpus)
    n = len(s.specs)
    layouts = s.layouts
    what = "tp within a server, tp x pp dividing the GPUs, replicas filling the rest"
    if layouts is not None and layouts.experts:
        what += f"; {layouts.experts}"
    click.echo(
        "\nno --plan given: "
        + (f"the {n} layouts of {gpus} GPUs compared" if n > 1 else f"the one layout of {gpus} GPU")
        + f" ({what}; --plan to choose)"
    )
    if result.dropped:
        click.echo(
            f"not shown: {', '.join(result.dropped)} (the experts whole inside the replica: the same weights per GPU "
            "as the same layout with ep 1, which holds no sequence either)"
        )
    for line in layouts.left_out if layouts is not None else ():
        click.echo(f"not compared: {line}")
    best = result.best()
    if best["latency"] is None:
        click.echo(
            "none fits in memory: narrower weights or KV cache (--weight-precision, --kv-precision), or more GPUs"
        )
        return
    est = dict(result.rows)
    lat, thr = est[best["latency"]], est[best["throughput"]]
    click.echo(
        f"best for latency: {best['latency']} ({format_seconds(float(lat.e2e_s))} per request end to end at the "
        "load asked)"
    )
    click.echo(
        f"best for throughput: {best['throughput']} (up to {result.capacity_tokens_per_s(thr) / gpus:,.0f} "
        "generated tokens/s per GPU at full load)"
    )


def _given(name: str) -> bool:
    """Whether option `name` was given on the command line (not its default)."""
    from click.core import ParameterSource

    return click.get_current_context().get_parameter_source(name) is ParameterSource.COMMANDLINE
