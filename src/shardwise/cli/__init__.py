"""The `shardwise` command. The only argv reader; subcommands are imported when run, so
`shardwise --help` stays fast."""

from __future__ import annotations

import errno
import importlib
import sys

import click

# command name -> (module, attribute, one-line help shown by `shardwise --help`)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "calibrate": (
        "shardwise.cli.calibrate",
        "calibrate",
        "Fit the model's physical parameters to your own measured runs (with error bars).",
    ),
    "crossover": (
        "shardwise.cli.crossover",
        "crossover",
        "Where TP overtakes PP (or any plan another) as one variable moves.",
    ),
    "explore": (
        "shardwise.cli.explore",
        "explore",
        "The interactive explorer in the browser: crossover, winner map, planner, serving, timeline.",
    ),
    "measure": (
        "shardwise.cli.measure",
        "measure",
        "Run TP, PP or DP for real (torch.distributed) beside the prediction.",
    ),
    "plan": (
        "shardwise.cli.plan",
        "plan",
        "Search every TP x PP x DP layout for the fastest; say why it wins.",
    ),
    "predict": ("shardwise.cli.predict", "predict", "Time, throughput and memory of one training step."),
    "presets": (
        "shardwise.cli.presets_cmd",
        "presets",
        "List the built-in GPUs, links, systems, models, frameworks and serving engines.",
    ),
    "scenario": ("shardwise.cli.scenario", "scenario", "The brief's scenarios: a figure and a finding for each claim."),
    "serve": (
        "shardwise.cli.serve",
        "serve",
        "Serving: time to first token, per token, throughput and memory of each plan.",
    ),
    "sensitivity": (
        "shardwise.cli.sensitivity",
        "sensitivity",
        "Crossover batch vs depth and width; which input matters most.",
    ),
    "sweep": ("shardwise.cli.sweep", "sweep", "A grid over several variables: every plan, every link, winner maps."),
    "timeline": (
        "shardwise.cli.timeline",
        "timeline",
        "Simulate a pipeline step operation by operation; Gantt chart, trace.",
    ),
    "validate": ("shardwise.cli.validate", "validate", "Compare predictions with published measurements."),
}


class PipeClosed(Exception):
    """stdout's reader closed the pipe (`| head -1`): not an OSError, which click's own handler
    would end with status 1, where `main` ends it with status 0 and no message."""


class LazyGroup(click.Group):
    """A click group that imports a subcommand's module only when that subcommand runs."""

    def invoke(self, ctx: click.Context) -> object:
        from shardwise.files import watching_inputs

        try:
            with watching_inputs():  # no output may replace a file the command read (atomic.py)
                return super().invoke(ctx)
        except BrokenPipeError:
            raise PipeClosed from None

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module, attr, _ = COMMANDS[cmd_name]
        return getattr(importlib.import_module(module), attr)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """As click's, but an unknown command names the closest ones (`scenarios`: 'scenario')."""
        name = click.utils.make_str(args[0])
        if name not in COMMANDS and not name.startswith("-") and not ctx.resilient_parsing:
            import difflib

            close = difflib.get_close_matches(name, list(COMMANDS), n=2, cutoff=0.6)
            hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            ctx.fail(f"No such command {name!r}{hint} (`shardwise --help` lists them)")
        cmd_name, cmd, rest = super().resolve_command(ctx, args)
        if cmd is not None and not ctx.resilient_parsing:
            from shardwise.cli.repeated import refuse_repeated

            refuse_repeated(cmd, rest)  # click would keep the last of `--tp 2 ... --tp 4` without a word
        return cmd_name, cmd, rest

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, short) for name, (_, _, short) in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="shardwise")
def cli() -> None:
    """shardwise: how long a transformer takes to train or to serve under tensor (TP), pipeline
    (PP), data (DP), context (CP) and expert (EP) parallelism on your GPUs and links, and which
    split to pick.

    \b
    Examples:
      shardwise predict --model gpt3-175b --system dgx-a100 --nodes 8 \\
          --tp 8 --pp 8 --global-batch 64 --micro-batch 1 --recompute full
      shardwise plan --model llama3-70b --system dgx-h100 --nodes 8 --global-batch 512
      shardwise serve --model llama3-70b --system dgx-h100 --plan tp=8 --plan tp=2,pp=4
    """
    # runs before a subcommand, not for --help or --version: faster array temporaries, the same
    # results (`shardwise.allocator`)
    from shardwise.allocator import reuse_freed_memory

    reuse_freed_memory()


def main(argv: list[str] | None = None) -> None:
    """Entry point: bad input becomes one line on stderr and exit status 2, never a traceback."""
    import signal

    from shardwise.errors import USER_ERRORS

    def terminated(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)  # unwinds: a file being written is removed, not left half-done

    args = sys.argv[1:] if argv is None else list(argv)
    if not args:  # plain `shardwise`: the help, as `--help` prints it (not an error)
        with click.Context(cli, info_name="shardwise") as ctx:
            click.echo(cli.get_help(ctx))
        return
    previous = signal.signal(signal.SIGTERM, terminated) if _main_thread() else None
    try:
        cli.main(args=args, prog_name="shardwise", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.exceptions.ClickException as exc:
        click.echo(f"error: {_out_of_range(exc) or exc.format_message()}", err=True)
        sys.exit(2)
    except USER_ERRORS as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except (BrokenPipeError, PipeClosed):  # the reader closed the pipe (`| head -1`): done, quietly, status 0
        _quiet_stdout()  # the interpreter's last flush would say 'Exception ignored' and exit 120
        sys.exit(0)
    except OSError as exc:  # the answer could not be written (stdout on a full disk): one line, as for -o
        if exc.filename is not None or exc.errno not in _WRITE_ERRNOS:
            raise
        _quiet_stdout()
        reason = "no space left on the device" if exc.errno == errno.ENOSPC else exc.strerror
        click.echo(f"error: cannot write the output ({reason})", err=True)
        sys.exit(2)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _out_of_range(exc: click.exceptions.ClickException) -> str:
    """A number outside an option's click range said as our own checks say it ("--seed: -1 is not
    allowed; it must be a whole number from 0 to 4294967295"), not click's "Invalid value for
    '--seed': -1 is not in the range 0<=x<=4294967295."; "" for any other error."""
    param = getattr(exc, "param", None)
    kind = getattr(param, "type", None)
    if not isinstance(kind, click.IntRange | click.FloatRange) or " is not in the range" not in exc.message:
        return ""
    value = exc.message.split(" is not in the range")[0]
    name = max(param.opts, key=len) if param.opts else param.name
    what = "a whole number" if isinstance(kind, click.IntRange) else "a number"
    low = None if kind.min is None else f"{'above' if kind.min_open else 'from'} {kind.min}"
    high = None if kind.max is None else f"{'below' if kind.max_open else 'to'} {kind.max}"
    if low and high:
        bound = f"{low} {high}" if not kind.min_open and not kind.max_open else f"{low} and {high}"
    else:
        bound = (
            {"from": ">=", "above": ">", "to": "<=", "below": "<"}[(low or high).split()[0]]
            + " "
            + ((low or high).split()[1])
        )
    return f"{name}: {value} is not allowed; it must be {what} {bound}"


# a write that failed for want of room or a device, not a bug: EIO, ENOSPC, EFBIG, EDQUOT
_WRITE_ERRNOS = (errno.EIO, errno.ENOSPC, errno.EFBIG, errno.EDQUOT)


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush of what could not be written
    raises nothing more (the Python docs' advice for a closed pipe)."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()
