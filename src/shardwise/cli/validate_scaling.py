"""`shardwise validate inference_scaling`: serving scaling ratios (TP(k)/TP(k/2), TP(k)/PP(k),
PP(k)/PP(1), EP(k)/TP(k), PP(k)/TP(k)),
measured against predicted, per GPU and link type, with the share of right directions."""

from __future__ import annotations

from dataclasses import asdict

import click

ROWS_HEAD = ("run", "ratio", "configuration", "GPU", "link", "predicted", "measured", "error", "direction")
SUMMARY_HEAD = ("ratio", "link", "GPU", "cases", "MAPE of the ratio", "direction right")


def show_scaling(as_json: bool, markdown: bool) -> None:
    from shardwise.analyses.serving_scaling import CITATION, LEFT_OUT, scaling_rows, summarize

    rows = scaling_rows()
    summary = summarize(rows)
    if as_json:
        from shardwise import export

        click.echo(
            export.dumps(
                {
                    "source": CITATION,
                    "rows": [
                        {
                            **asdict(r),
                            "error": r.error,
                            "direction_right": r.direction_right,
                            "within_noise": r.within_noise,
                        }
                        for r in rows
                    ],
                    "summary": [asdict(s) for s in summary],
                    "left_out": LEFT_OUT,
                }
            )
        )
        return
    from shardwise.cli.render import console, print_table

    cells = [
        (
            r.key,
            r.ratio,
            r.label,
            r.gpu,
            r.link,
            f"{r.predicted:.2f}",
            f"{r.measured:.2f}",
            f"{r.error:+.1%}",
            "right" if r.direction_right else "wrong",
        )
        for r in rows
    ]
    totals = [
        (
            s.ratio,
            s.link,
            s.gpus,
            str(s.cases),
            f"{s.mape:.1%}",
            f"{s.direction_right} of {s.cases} ({s.direction_right / s.cases:.0%})",
        )
        for s in summary
    ]
    title = "serving scaling ratios, predicted against measured (throughput with the larger plan / the smaller)"
    print_table(ROWS_HEAD, cells, title, {5, 6, 7}, markdown)
    if markdown:
        click.echo("")
    print_table(SUMMARY_HEAD, totals, "per ratio, link type and GPU", {3, 4}, markdown)
    wrong = [r for r in rows if not r.direction_right]
    noisy = [r.key for r in wrong if r.within_noise]
    printed = [r for r in wrong if r.within_noise is not None]
    listed = f" ({', '.join(noisy)})" if noisy else ""
    note = (
        f"source: {CITATION}; a ratio above 1 is a gain, the direction is right when both agree on it; no constant "
        f"was set from these rows; {len(wrong)} directions wrong, {len(noisy)} of the {len(printed)} with a printed "
        f"deviation (llama-bench's repetitions) within 2 standard deviations of 1{listed}, the other "
        f"{len(wrong) - len(printed)} unknown (no deviation printed)"
        f"; {LEFT_OUT}"
    )
    if markdown:
        click.echo(f"\n{note[0].upper()}{note[1:]}.")
    else:
        console().print(note)
