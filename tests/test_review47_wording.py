"""Review 47's findings #6, #7, #9, #10 and #11: what predict says of the attention kernel and HFU,
a streamed sweep's estimate and --yes, stack-capability notes, SIGTERM in the atomic writer, plan's
JSON names and whole bytes."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PREDICT = ["predict", "--model", "llama3.1-8b", "--system", "dgx-h100", "--global-batch", "64"]


def _header(out: str) -> str:
    """The answer's text with rich's wrapping undone (lines joined by spaces)."""
    return " ".join(out.split())


# #6 ------------------------------------------------------------------------------------------------


def test_megatron_deepspeed_names_its_unfused_attention_and_hfu_counts_the_square(cli):
    code, out, _ = cli([*PREDICT, "--framework", "megatron-deepspeed"])
    text = _header(out)
    assert code == 0
    assert "attention unfused: the s x s scores written (--flash-attention for a run with --use-flash-attn-v2)" in text
    assert "(counts the whole s x s attention square of the unfused kernel)" in text
    assert "recomputation counted" not in text and "counts recomputation" not in text  # nothing is recomputed


@pytest.mark.parametrize(
    ("extra", "attention", "hfu"),
    [
        ([], None, "(nothing recomputed)"),  # the fused default: no attention words
        (["--recompute", "full"], None, "(counts recomputation)"),
        (["--framework", "torchtitan"], "attention: PyTorch SDPA's FlashAttention-2 (sdpa-flash2)", "(counts"),
        (
            ["--no-flash-attention"],
            "attention unfused: the s x s scores written (as --no-flash-attention asks)",
            "square",
        ),
    ],
)
def test_the_framework_line_names_a_kernel_other_than_the_fused_default(cli, extra, attention, hfu):
    code, out, _ = cli([*PREDICT, *extra])
    text = _header(out)
    assert code == 0 and hfu in text
    framework = text[text.index("framework:") : text.index("step time")]
    assert ("attention" in framework) == (attention is not None)
    if attention:
        assert attention in framework


def test_the_framework_line_names_flashattention3_and_an_fp16_grad_reduce(cli):
    """review 49 #5 and #8: a FlashAttention-3 run read like the default; an fp16 run's 16-bit gradient
    reduction was called bf16."""
    code, out, _ = cli(["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--global-batch", "64",
                        "--framework", "torchtitan", "--attention-kernel", "flash3"])  # fmt: skip
    assert code == 0 and "attention: FlashAttention-3 (flash3)" in _header(out)
    code, out, _ = cli(["predict", "--model", "llama3-8b", "--system", "dgx-1-v100", "--num-gpus", "8",
                        "--global-batch", "64", "--framework", "deepspeed"])  # fmt: skip
    framework = _header(out)[: _header(out).index("step time")]
    assert code == 0 and "fp16 grad reduce" in framework and "bf16 grad reduce" not in framework


# #9 ------------------------------------------------------------------------------------------------


def test_fsdp1_notes_a_pipeline_it_does_not_run(cli):
    code, _, err = cli([*PREDICT, "--framework", "fsdp", "--pp", "2"])
    assert code == 0 and "fsdp runs no pipeline parallelism (pp=2); priced as asked" in err
    code, _, err = cli([*PREDICT, "--framework", "fsdp", "--tp", "2"])  # FSDP1 + TP: DTensor's 2D extension
    assert code == 0 and "runs no" not in err


def test_deepspeed_pipeline_note_names_the_presets_zero3_not_a_request(cli):
    code, _, err = cli([*PREDICT, "--framework", "deepspeed", "--pp", "2"])
    assert code == 0
    assert "not the preset's default ZeRO-3; priced at ZeRO-3 (--zero 1 prices what runs)" in err
    assert "priced as asked" not in err
    code, _, err = cli([*PREDICT, "--framework", "deepspeed", "--pp", "2", "--zero", "3"])
    assert code == 0 and "not ZeRO-3; priced as asked" in err and "preset's default" not in err
    code, _, err = cli([*PREDICT, "--framework", "deepspeed", "--pp", "2", "--zero", "1"])
    assert code == 0 and "PipelineEngine" not in err


# #7 ------------------------------------------------------------------------------------------------


def test_the_sweep_estimate_scales_with_rows_columns_format_and_pipelines():
    from shardwise.analyses import sweep_cost

    class P:
        def __init__(self, pp: int | str) -> None:
            self.pp = pp

    csv = sweep_cost.sweep_seconds(64_000_000, 3, [P(1)], ".csv")
    # 64 M rows of 15 columns at 0.32 us a cell, plus 0.15 us a configuration: about 5 minutes
    assert csv == pytest.approx(64e6 * (15 * 0.32e-6 + 0.15e-6))
    assert sweep_cost.sweep_seconds(64_000_000, 3, [P(1)], ".parquet") < csv / 4
    piped = sweep_cost.sweep_seconds(1_000_000, 3, [P(8)], ".parquet")
    assert piped == pytest.approx(1e6 * (3.8e-6 + 15 * 0.06e-6))
    assert sweep_cost.sweep_seconds(1_000_000, 3, [P("all")], ".parquet") == piped
    assert sweep_cost.sweep_seconds(1_000_000, 3, [P(1)], ".csv", breakdown=True) > sweep_cost.sweep_seconds(
        1_000_000, 3, [P(1)], ".csv"
    )
    assert [sweep_cost.duration_words(s) for s in (40, 720, 5 * 3600)] == ["40 s", "12 min", "5.0 h"]


SWEEP = ["sweep", "--model", "llama3.1-8b", "--system", "dgx-h100", "--plan", "tp=8"]


def test_a_streamed_sweep_over_ten_minutes_needs_yes(cli, tmp_path):
    from shardwise.analyses import sweep_cost  # first: without it the sweep below would run for an hour

    # 64 x 100,000 x 1,000 = 6.4e9 ... too many; 64 x 10,000 x 1,000 = 640 M CSV rows: about 53 min
    big = ["--vary", "batch=1..64", "--vary", "seq_len=1..100000:10000", "--vary", "bandwidth=1GB/s..900GB/s:1000"]
    out_path = tmp_path / "g.csv"
    code, out, err = cli([*SWEEP, *big, "-o", str(out_path)])
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert err.startswith("error: --yes: this sweep writes 640,000,000 configurations") and "-o FILE.parquet" in err
    assert f"(over {sweep_cost.REFUSE_ABOVE_S / 60:.0f} min)" in err
    assert list(tmp_path.iterdir()) == []


def test_yes_runs_it_and_the_estimate_and_progress_lines_go_to_stderr(cli, tmp_path, monkeypatch):
    from shardwise.analyses import sweep_cost
    from shardwise.cli import sweep as sweep_cli

    monkeypatch.setattr(sweep_cost, "REFUSE_ABOVE_S", 0.0)  # a tiny grid stands for a long one
    monkeypatch.setattr(sweep_cli, "ESTIMATE_FROM_S", 0.0)
    monkeypatch.setattr(sweep_cli, "PROGRESS_LINE_S", 0.0)
    small = ["--vary", "batch=1..8", "--vary", "seq_len=1024,2048"]
    code, _, err = cli([*SWEEP, *small, "-o", str(tmp_path / "g.csv")])
    assert code == 2 and "--yes" in err and not (tmp_path / "g.csv").exists()
    code, out, err = cli([*SWEEP, *small, "-o", str(tmp_path / "g.csv"), "--yes"])
    assert code == 0 and (tmp_path / "g.csv").is_file() and "grid written to" in out
    assert "sweep: 16 configurations to" in err and "of one free core" in err
    code, _, err = cli([*SWEEP, *small, "-o", str(tmp_path / "g.csv"), "--yes", "--no-progress"])
    assert code == 0 and "sweep: 16 configurations to" in err  # the estimate is not a progress line


def test_the_periodic_line_counts_what_is_done(monkeypatch, capsys):
    from shardwise.cli import sweep as sweep_cli

    monkeypatch.setattr(sweep_cli, "PROGRESS_LINE_S", 0.0)
    seen: list[int] = []
    step = sweep_cli._with_lines(seen.append, 100)
    step(25)
    step(75)  # the last block: no line, the summary follows
    err = capsys.readouterr().err
    assert seen == [25, 75]
    assert err.startswith("sweep: 25 of 100 configurations (25%) in ") and "left" in err
    assert len(err.strip().splitlines()) == 1


# #10 -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "status"), [("SIGTERM", 143), ("SIGHUP", 129)])
def test_the_atomic_writer_unwinds_on_a_signal_in_a_library_process(tmp_path, name, status):
    """A Python program (no shardwise command line, so no handler of its own) killed while a file is
    written: status 128 + the signal, and neither the file nor its temporary is left."""
    code = textwrap.dedent(
        f"""
        import os, signal
        from pathlib import Path
        from shardwise.atomic import atomic_path
        with atomic_path("g.csv") as tmp:
            Path(tmp).write_text("half")
            assert Path(tmp).name.startswith("g.partial-") and tmp.endswith(".csv")
            os.kill(os.getpid(), signal.{name})
            for _ in range(10**8):  # the handler runs between bytecodes
                pass
        """
    )
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, timeout=120)
    assert run.returncode == status, run.stderr.decode()
    assert list(tmp_path.iterdir()) == []
    assert b"Traceback" not in run.stderr


def test_the_atomic_writer_leaves_a_handler_the_program_set(tmp_path):
    import signal

    from shardwise.atomic import atomic_path

    def mine(signum: int, frame: object) -> None:
        pass

    before = signal.signal(signal.SIGTERM, mine)
    try:
        with atomic_path(tmp_path / "g.csv") as tmp:
            assert signal.getsignal(signal.SIGTERM) is mine
            Path(tmp).write_text("x\n")
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, before)
    assert [p.name for p in tmp_path.iterdir()] == ["g.csv"]


# #11 -----------------------------------------------------------------------------------------------


def test_plan_json_names_its_search_time_and_gives_whole_bytes(cli):
    code, out, _ = cli(["plan", "--model", "llama3.1-8b", "--system", "dgx-h100", "--global-batch", "64", "--json"])
    data = json.loads(out)
    assert code == 0 and "seconds" not in data and data["search_time_s"] > 0
    held = data["within_headroom"]["fastest"]
    assert held and all(isinstance(r["memory_bytes"], int) for r in held)


def test_the_a100_80gb_pcie_is_a_300_w_card(cli):
    code, out, _ = cli(["presets", "show", "a100-pcie-80gb"])
    text = _header(out)
    assert code == 0 and "300 W TDP" in text and "250 W TDP" not in text
