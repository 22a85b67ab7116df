"""`shardwise explore`: the interactive explorer in the browser (Dash, an optional extra)."""

from __future__ import annotations

import click

from shardwise.cli.option_kit import FiniteRange

INSTALL_HINT = "shardwise explore needs Dash: pip install -e '.[explore]' in the repository (or 'shardwise[explore]')"


LOOPBACK = ("127.0.0.1", "localhost", "::1")


@click.command()
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on (0.0.0.0: every one; no authentication: anyone who reaches the port can use it).",
)
@click.option("--port", type=click.IntRange(1, 65535), default=8050, show_default=True, help="Port to listen on.")
@click.option(
    "--time-limit",
    "time_limit_s",
    type=FiniteRange(0, 3600, min_open=True),
    default=20.0,
    show_default=True,
    metavar="SECONDS",
    help="Longest a computation may run; a longer one is stopped and the page says so.",
)
@click.option(
    "--workers",
    type=click.IntRange(1, 64),
    default=None,
    help="Computations at once, each in its own process [default: min(4, CPU cores)].",
)
@click.option("--no-browser", is_flag=True, help="Do not open a browser window.")
def explore(host: str, port: int, time_limit_s: float, workers: int | None, no_browser: bool) -> None:
    """Drag the batch, the link bandwidth, the depth and width, and watch the winner change.

    Pages: crossover (the brief's experiment), winner map (two variables), planner (the best layouts
    and the (tp, pp) heatmap), serving (throughput against latency) and timeline (the pipeline's
    Gantt chart). Each runs the same command as the CLI, shows it, exports CSV/JSON/SVG/PNG, and
    keeps its controls in the URL so a view can be shared.

    \b
    Example:
      shardwise explore --port 8050
    """
    import socket

    from shardwise.errors import SpecError

    try:
        import dash  # noqa: F401
    except ImportError:
        raise SpecError(INSTALL_HINT) from None
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise SpecError(f"--port: {port} on {host} is not free ({exc.strerror}); give another") from None
    from shardwise.explore.app import create_app
    from shardwise.explore.workers import Pool

    local = host in LOOPBACK
    if not local:
        click.echo(
            f"warning: --host {host}: the explorer has no authentication: anyone who can reach port {port} can use it",
            err=True,
        )
    shown = {"0.0.0.0": "127.0.0.1", "::": "[::1]"}.get(host, f"[{host}]" if ":" in host else host)
    url = f"http://{shown}:{port}/"
    click.echo(f"shardwise explorer on {url} (Ctrl-C stops it)", err=True)
    if not no_browser:
        import threading
        import webbrowser

        threading.Timer(1.0, webbrowser.open, (url,)).start()
    import logging

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no per-request lines; errors still show
    pool = Pool(workers, time_limit_s)
    try:
        create_app(pool, hosts=LOOPBACK if local else None).run(host=host, port=port, debug=False)
    finally:
        pool.close()
