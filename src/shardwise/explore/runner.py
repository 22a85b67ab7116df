"""Answer a page's shardwise command in this process: its JSON (or the CSV table it would write or
print), or the one-line error the command line prints.

Every command the explorer's pages build is asked through the request layer (`shardwise.requests`:
`REQUESTS`), never the command line: nothing is printed or redirected, so any number of threads
may run at once. Only the commands and flags the pages build are answered (`RUNNABLE`), a second
line of defence behind the server, which builds every command from checked controls (`checks`);
a table is never written anywhere but in memory (or a fresh temporary folder)."""

from __future__ import annotations

import json
import shlex
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAX_OUTPUT_BYTES = 32 << 20  # what one command may print or write as a table and still be drawn
IN_MEMORY_ROWS = 20_000  # a table of at most this many rows is built in memory (a few MB), not in a file


# The commands the pages build and the flags they give them; flags not in VALUED take no value.
_COMMON = {"--model", "--calibration", "--json"}
RUNNABLE: dict[str, set[str]] = {
    "crossover": _COMMON
    | {"--layers", "--hidden", "--heads", "--gpu", "--intra-link", "--plan", "--workload", "--vary", "--global-batch"}
    | {"--csv"},
    "sweep": _COMMON | {"--gpu", "--intra-link", "--plan", "--workload", "--vary", "--csv", "--breakdown"},
    "plan": _COMMON
    | {"--system", "--nodes", "--global-batch", "--objective", "--csv", "--inter-link", "--nics-per-node"}
    | {"--framework", "--precision"},
    "serve": _COMMON
    | {"--system", "--plan", "--input-len", "--output-len", "--with-frontier", "--ttft-max", "--tpot-max"}
    | {"--weight-precision", "--kv-precision", "--concurrency", "--request-rate", "--framework"},
    "timeline": _COMMON | {"--system", "--nodes", "--tp", "--pp", "--vpp", "--global-batch", "--schedule"},
}
FLAGS_WITHOUT_VALUE = {"--json", "--breakdown", "--with-frontier"}


@dataclass(frozen=True)
class Outcome:
    """What a command gave: its parsed JSON and the CSV table it wrote (`--csv NAME`) or printed
    (`--csv -`), or the error line (as the CLI prints it, without "error: ")."""

    args: tuple[str, ...]
    data: Any = None
    error: str | None = None
    table: str | None = None
    then: tuple[str, ...] = ()  # a second command the view ran too (the serving page's target search)

    @property
    def command(self) -> str:
        """The command line that reproduces this view (without `--json`, which the page adds), and
        on a second line the second command's, if it ran one."""
        runs = [self.args, *([self.then] if self.then else [])]
        return "\n".join("shardwise " + shlex.join([a for a in args if a != "--json"]) for args in runs)


def refusal(args: list[str]) -> str | None:
    """Why the explorer does not run `shardwise ARGS` (None: it does): a command or flag its pages
    never build, or a table written anywhere but under a bare name (`--csv plans.csv`, or `-`)."""
    if not args or args[0] not in RUNNABLE:
        return f"the explorer runs only {', '.join(RUNNABLE)} (not {args[0] if args else 'nothing'!r})"
    allowed, rest = RUNNABLE[args[0]], list(args[1:])
    while rest:
        flag = rest.pop(0)
        if flag not in allowed:
            return f"the explorer does not give {args[0]} the argument {flag!r}"
        if flag in FLAGS_WITHOUT_VALUE:
            continue
        if not rest:
            return f"{flag} needs a value"
        value = rest.pop(0)
        if value.startswith("--"):
            return f"{flag} {value!r}: a value that looks like an option"
        if flag == "--csv" and value != "-" and (Path(value).name != value or not value.endswith(".csv")):
            return f"--csv {value!r}: the explorer writes a table only under a bare name (NAME.csv)"
    return None


def run(args: list[str]) -> Outcome:
    """The answer `shardwise ARGS --json` gives (or the table of `--csv -`), asked through the
    request layer: the same checks and messages as the command line, nothing printed, safe in
    any thread."""
    refused = refusal(list(args))
    if refused:
        return Outcome(tuple(args), error=refused)
    return _request(list(args))


def _columns_csv(columns: dict[str, Any]) -> str:
    """A table of columns as the command line writes it (`tables.write_columns`), as text: built
    in memory up to IN_MEMORY_ROWS rows (a planner's table), else written to a scratch file first
    (a file larger than the explorer draws fails at the worker's file-size cap, not in memory)."""
    from shardwise.tables import csv_text, write_columns

    rows = len(next(iter(columns.values()))) if columns else 0
    if rows <= IN_MEMORY_ROWS:
        text = csv_text(columns)
        size = len(text.encode("utf-8"))
        if size > MAX_OUTPUT_BYTES:
            raise _TooLarge(size)
        return text
    with tempfile.TemporaryDirectory(prefix="shardwise-run-") as scratch:
        path = Path(scratch) / "table.csv"
        write_columns(columns, path)
        if path.stat().st_size > MAX_OUTPUT_BYTES:
            raise _TooLarge(path.stat().st_size)
        return path.read_text(encoding="utf-8")


class _TooLarge(Exception):
    def __init__(self, size_bytes: int) -> None:
        super().__init__(size_bytes)
        self.size_bytes = size_bytes


Answer = tuple[Any, Callable[[], str]]  # the JSON, and the table (CSV text) when asked for


def _plan(argv: list[str]) -> Answer:
    """`plan`'s request: its JSON and every evaluated plan's columns."""
    from shardwise.requests.plan import PlanRequest

    result = PlanRequest.from_argv(argv).run()
    return result.as_dict(), lambda: _columns_csv(result.search.table_columns())


def _timeline(argv: list[str]) -> Answer:
    """`timeline`'s request: its JSON (no figure: the page draws its own)."""
    from shardwise.requests.timeline import TimelineRequest

    return TimelineRequest.from_argv(argv).run().as_dict(), lambda: ""


def _crossover(argv: list[str]) -> Answer:
    """`crossover`'s request: the series as JSON and as the CSV `-o FILE.csv` writes (no figure)."""
    from shardwise.requests.compare import CrossoverRequest

    answer = CrossoverRequest.from_argv(argv).run()
    return answer.as_dict(), answer.csv_text


def _sweep(argv: list[str]) -> Answer:
    """`sweep`'s request: its summary and the grid (one row per link and point)."""
    from shardwise.requests.compare import SweepRequest

    answer = SweepRequest.from_argv(argv).run()
    return answer.as_dict(), lambda: _columns_csv(answer.columns())


def _serve(argv: list[str]) -> Answer:
    """`serve`'s request: the plans priced, or the latency-target search (no figure); the page
    shows no pipeline-scaling split, so none is priced."""
    from shardwise.requests.serve import ServeRequest
    from shardwise.requests.serve_result import ServeResult

    result = ServeRequest.from_argv(argv).run()
    return result.as_dict(pipeline_scaling=False) if isinstance(result, ServeResult) else result.as_dict(), lambda: ""


# every command the pages build, asked through the request layer (`shardwise.requests`): run
# directly, in any thread, nothing printed
REQUESTS: dict[str, Callable[[list[str]], Answer]] = {
    "plan": _plan,
    "timeline": _timeline,
    "crossover": _crossover,
    "sweep": _sweep,
    "serve": _serve,
}


def _request(args: list[str]) -> Outcome:
    """A command answered by its request (`REQUESTS`): the same JSON and table the command line
    gives, with the request's own one-line errors."""
    from shardwise import export
    from shardwise.errors import SpecError

    table_name = _value(args, "--csv")
    argv = [a for a in args[1:] if a != "--json"]
    if table_name is not None:
        i = argv.index("--csv")
        del argv[i : i + 2]
    try:
        data, table_of = REQUESTS[args[0]](argv)
        table = None if table_name is None else table_of()
    except SpecError as exc:
        return Outcome(tuple(args), error=str(exc))
    except _TooLarge as exc:
        return Outcome(tuple(args), error=_too_large(exc.size_bytes))
    if table is not None and len(table) > MAX_OUTPUT_BYTES:
        return Outcome(tuple(args), error=_too_large(len(table)))
    if table_name == "-":
        return Outcome(tuple(args), table=table)
    text = export.dumps(data)
    if len(text) > MAX_OUTPUT_BYTES:
        return Outcome(tuple(args), error=_too_large(len(text)))
    return Outcome(tuple(args), data=json.loads(text), table=table)


def _value(args: list[str], flag: str) -> str | None:
    i = args.index(flag) if flag in args else -1
    return args[i + 1] if 0 <= i < len(args) - 1 else None


def _too_large(size_bytes: int) -> str:
    return (
        f"the result is {size_bytes / 1e6:.0f} MB, more than the explorer draws ({MAX_OUTPUT_BYTES / 1e6:.0f} MB): "
        "narrow the search (fewer points or plans), or run the command below in a terminal"
    )
