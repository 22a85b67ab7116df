"""`shardwise measure`: real tensor and pipeline parallelism on torch.distributed (gloo, 2 CPU ranks)."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")  # the measure extra; CI installs it (.ci/run)

from shardwise.measure import launch  # noqa: E402
from shardwise.measure.layers import LayerShape, stack  # noqa: E402
from shardwise.measure.runs import (  # noqa: E402
    StepConfig,
    _inputs,
    _loss,
    pipeline_order,
    pipeline_parallel_step,
    tensor_parallel_step,
)

SHAPE = LayerShape(hidden=32, heads=4, ffn_hidden=64)
CFG = StepConfig(SHAPE, layers=4, seq_len=16, micro_batch=2, micro_batches=4, iters=2, warmup=1)


def reference(cfg: StepConfig) -> tuple[float, dict[str, torch.Tensor]]:
    """The unsplit model's loss and gradients (one process, no communication)."""
    model = stack(cfg.shape, cfg.layers)
    total = 0.0
    for x in _inputs(cfg, torch.device("cpu")):
        loss = _loss(model(x), cfg.micro_batches)
        loss.backward()
        total += float(loss.detach())
    return total, {n: p.grad for n, p in model.named_parameters()}


def tp_slice(name: str, full: torch.Tensor, rank: int, tp: int) -> torch.Tensor:
    """Rank `rank`'s part of an unsplit gradient (see layers.ParallelLayer)."""
    a, h, f = SHAPE.heads, SHAPE.hidden, SHAPE.ffn_hidden
    heads, cols = slice(rank * a // tp, (rank + 1) * a // tp), slice(rank * f // tp, (rank + 1) * f // tp)
    kind = name.split(".", 1)[1]
    if kind == "qkv":
        return full.reshape(3, a, h // a, h)[:, heads].reshape(-1, h)
    if kind == "proj":
        return full.reshape(h, a, h // a)[:, heads].reshape(h, -1)
    if kind == "up":
        return full[cols]
    if kind == "down":
        return full[:, cols]
    return full  # layer norms are replicated


@pytest.mark.slow
@pytest.mark.parametrize("sequence_parallel", [False, True])
def test_tensor_parallel_layers_compute_the_unsplit_models_loss_and_gradients(sequence_parallel: bool):
    from dataclasses import replace

    loss, grads = reference(CFG)
    cfg = replace(CFG, sequence_parallel=sequence_parallel)
    ranks = launch.run(tensor_parallel_step, 2, (cfg, True), timeout_s=120)
    for rank, got in enumerate(ranks):
        assert got["loss"] == pytest.approx(loss, rel=1e-5)
        for name, g in got["grads"].items():
            torch.testing.assert_close(torch.from_numpy(g), tp_slice(name, grads[name], rank, 2), rtol=1e-4, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("schedule", ["1f1b", "gpipe", "interleaved", "zb-h1"])
def test_pipeline_stages_compute_the_unsplit_models_loss_and_gradients(schedule: str):
    from dataclasses import replace

    cfg = replace(CFG, schedule=schedule)
    loss, grads = reference(cfg)
    first, last = launch.run(pipeline_parallel_step, 2, (cfg, True), timeout_s=120)
    # the loss is computed where the last layer runs: the last stage (interleaved: its last chunk)
    assert last["loss"] == pytest.approx(loss, rel=1e-5)
    seen = set()
    for got in (first, last):  # gradients are named by the layer's index in the whole model
        for name, g in got["grads"].items():
            torch.testing.assert_close(torch.from_numpy(g), grads[name], rtol=1e-4, atol=1e-6)
            seen.add(name)
    assert seen == set(grads)  # every layer ran on exactly one stage


def test_collective_curves_are_taken_per_group_size():
    from shardwise.measure.micro import fit_link, group_sizes

    assert group_sizes(2) == [2] and group_sizes(8) == [2, 4, 8] and group_sizes(6) == [2, 4, 6]
    curve = {s: 20e-6 + 2 * (4 - 1) / 4 * s / 50e9 for s in (4096, 65536, 2**20, 2**24)}
    base, bw = fit_link(curve, 4)  # an exact alpha-beta curve is recovered
    assert base == pytest.approx(20e-6, rel=1e-6) and bw == pytest.approx(50e9, rel=1e-6)


def test_one_f_one_b_fills_then_alternates_then_drains():
    def ops(schedule: str, stage: int, p: int, m: int) -> list[tuple[str, int]]:
        return [(k, i) for k, i, _ in pipeline_order(schedule, stage, p, m)]

    assert ops("1f1b", 0, 4, 6) == [
        *[("F", 0), ("F", 1), ("F", 2)],
        *[("F", 3), ("B", 0), ("F", 4), ("B", 1), ("F", 5), ("B", 2)],
        *[("B", 3), ("B", 4), ("B", 5)],
    ]
    assert ops("1f1b", 3, 4, 2) == [("F", 0), ("B", 0), ("F", 1), ("B", 1)]
    assert ops("gpipe", 1, 4, 2) == [("F", 0), ("F", 1), ("B", 0), ("B", 1)]
    for stage in range(4):  # every micro-batch forward once and backward once, forward first
        order = ops("1f1b", stage, 4, 5)
        assert sorted(order) == sorted([("F", i) for i in range(5)] + [("B", i) for i in range(5)])
        assert all(order.index(("F", i)) < order.index(("B", i)) for i in range(5))
    zb = ops("zb-h1", 0, 4, 6)  # B and W apart, every W after its B, as the simulator runs ZB-H1
    assert sorted(zb) == sorted([(k, i) for k in "FBW" for i in range(6)])
    assert all(zb.index(("B", i)) < zb.index(("W", i)) for i in range(6))
    chunks = {c for _, _, c in pipeline_order("interleaved", 0, 2, 4, 2)}
    assert chunks == {0, 1}  # interleaved: both model chunks on every stage


def fails_on_rank_one(g: launch.Group) -> int:
    if g.rank == 1:
        raise RuntimeError("boom")
    return g.rank


def hangs_on_rank_one(g: launch.Group) -> int:
    if g.rank == 1:
        time.sleep(600)
    return g.rank


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fn", "timeout_s", "message"),
    [
        # a failing rank is reported as soon as it fails: a long timeout keeps a loaded machine's slow
        # start-up of the ranks (torch and gloo imports) from reading as a hang
        (fails_on_rank_one, 120, "rank 1 failed: RuntimeError: boom"),
        (hangs_on_rank_one, 8, "did not finish within 8 s"),
    ],
)
def test_a_rank_that_fails_or_hangs_ends_the_run_with_one_line(fn, timeout_s: int, message: str):
    start = time.monotonic()
    with pytest.raises(launch.MeasureError, match=message):
        launch.run(fn, 2, timeout_s=timeout_s)
    if fn is hangs_on_rank_one:
        assert time.monotonic() - start < timeout_s + 32  # bounded: the timeout, then terminate / kill
    assert multiprocessing.active_children() == []  # no rank left behind


@pytest.mark.slow
def test_measure_micro_then_tp_and_pp_from_the_command_line(cli, tmp_path):
    """A new user's loop on a CPU: this machine as a preset, then TP and PP measured beside the
    prediction, each run appended to a CSV with the columns `calibrate` reads."""
    import csv
    import json

    machine, runs = tmp_path / "machine.yaml", tmp_path / "runs.csv"
    micro = ["measure", "micro", "-o", str(machine), "--repeats", "1", "--max-bytes", "65536"]
    code, out, err = cli([*micro, "--model", "gpt-125m", "--seq-len", "32"])
    assert code == 0, err
    assert machine.exists() and "--system" in out
    import yaml

    (preset,) = yaml.safe_load(machine.read_text()).values()
    assert 0 < preset["gpu"]["matmul_efficiency"] <= 1  # the model's GEMMs against the best square one
    from shardwise.measure.micro import table_shapes

    shapes = {(r["m"], r["n"], r["k"]) for r in preset["gpu"]["gemm_table"]}
    assert shapes == set(table_shapes(768, 3072, 32, 2))  # forward, dX and dW, whole and split, 3 token counts
    small = ["--layers", "2", "--seq-len", "32", "--micro-batches", "2", "--iters", "1", "--warmup", "0"]
    predicted_json = []
    for kind in ("tp", "pp"):
        trace = tmp_path / f"{kind}.json"
        args = [*small, "--system", str(machine), "--out", str(runs), "--trace", str(trace), "--json"]
        code, out, err = cli(["measure", kind, *args])
        assert code == 0, err
        result = json.loads(out)
        predicted_json.append(out)
        assert result["measured"]["step_s"] > 0 and result["predicted"]["step_s"] > 0
        assert any(k.startswith(kind) for k in result["measured"]["comm_s"])  # the collectives were timed
        terms = result["measured"]["terms_s"]
        assert terms["compute"] > 0 and terms["communication"] > 0
        assert terms["compute"] + terms["communication"] + terms["other"] == pytest.approx(terms["step"])
        spans = [e for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "X"]
        for rank in (0, 1):  # every rank: each micro-batch's forward and backward, and its communication
            names = {e["name"] for e in spans if e["tid"] == rank}
            assert {"forward mb0", "forward mb1", "backward mb0", "backward mb1"} <= names
            assert any(n.startswith(kind) for n in names)
    rows = list(csv.DictReader(runs.open()))
    assert [(r["tp"], r["pp"]) for r in rows] == [("2", "1"), ("1", "2")]
    assert all(float(r["step_time_s"]) > 0 and r["system"] == str(machine) and r["scope"] == "layers" for r in rows)
    # the loop closes: calibrate reads the runs and prices them as measure did (the layers only)
    from shardwise.calibration.cases import Evaluator, LayerStackCase
    from shardwise.calibration.runs import read_runs

    read = read_runs(runs)
    assert all(isinstance(r.case, LayerStackCase) for r in read)
    priced = Evaluator([r.case for r in read]).step_s({})[0]
    assert priced == pytest.approx([json.loads(o)["predicted"]["step_s"] for o in predicted_json], rel=1e-9)
    code, out, err = cli(["calibrate", str(runs), "-o", str(tmp_path / "cpu.yaml")])
    assert code == 0, err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["pp", "--layers", "3"], "--layers 3 must be a multiple of --ranks 2"),
        (["tp", "--model", "llama3-8b"], "measure runs GPT layers"),
        (
            ["tp", "--model", "gpt-125m", "--ranks", "5"],
            "--ranks 5 (the tensor-parallel size) must divide the heads (12)",
        ),
        (["tp", "--out", "runs.txt"], "-o runs.txt"),  # the earlier spelling; the message names -o
        (["micro", "-o", "machine.json"], "-o machine.json"),
        (["micro", "--model", "llama3-8b"], "measure runs GPT layers"),
        (["tp", "--sequence-parallel", "--seq-len", "33"], "--seq-len 33 must be a multiple of --ranks 2"),
        (["tp", "--dtype", "float32", "--out", "runs.csv"], "--dtype float32 is for checking the split only"),
        (["tp", "-o", "runs.csv"], "-o needs --system"),
        (
            ["pp", "--schedule", "interleaved", "--layers", "2"],
            "--layers 2 must be a multiple of 4 (2 stages x 2 chunks",
        ),
        (["tp", "--device", "cuda"], "--device cuda: 2 rank(s) on this machine need as many GPUs"),
    ],
)
def test_measure_bad_input_is_one_line(cli, args, message):
    code, _, err = cli(["measure", *args])
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_measure_without_torch_says_how_to_install(monkeypatch):
    import builtins

    from shardwise.errors import SpecError
    from shardwise.measure import require_torch

    real = builtins.__import__

    def no_torch(name, *a, **k):
        if name == "torch" or name.startswith("torch."):
            raise ImportError(name)
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_torch)
    with pytest.raises(SpecError, match=r"pip install 'shardwise\[measure\]'"):
        require_torch()


@pytest.mark.slow
def test_measure_crossover_runs_the_articles_experiment(cli, tmp_path):
    import json

    machine, fig = tmp_path / "machine.yaml", tmp_path / "crossover.png"
    assert cli(["measure", "micro", "-o", str(machine), "--repeats", "1", "--max-bytes", "65536"])[0] == 0
    args = ["measure", "crossover", "--layers", "2", "--seq-len", "32", "--batches", "1,4", "--iters", "1"]
    code, out, err = cli([*args, "--warmup", "0", "--system", str(machine), "--plot", str(fig), "--json"])
    assert code == 0, err
    result = json.loads(out)
    assert result["batches"] == [1, 4] and set(result["series"]) == {"tp=2", "pp=2"}
    for s in result["series"].values():
        assert len(s["measured"]) == len(s["predicted"]) == 2 and min(s["measured"]) > 0
    assert set(result["crossover_batch"]) == {"measured", "predicted"} and fig.exists()
    code, _, err = cli(["measure", "crossover", "--batches", "1,x"])
    assert code == 2 and "--batches" in err


def test_the_failed_rank_is_blamed_not_the_peer_that_lost_it():
    import queue

    out: queue.Queue = queue.Queue()
    out.put((1, "error", "RuntimeError: boom (runs.py:12)"))
    cause = launch._first_cause(out, 0, "RuntimeError: Connection closed by peer [127.0.0.1]:1234", wait_s=0.2)
    assert cause == (1, "RuntimeError: boom (runs.py:12)")
    assert launch._first_cause(queue.Queue(), 0, "ValueError: x", wait_s=0.05) == (0, "ValueError: x")


@pytest.mark.parametrize("args", [["tp"], ["pp", "--schedule", "interleaved"], ["micro"], ["crossover"]])
def test_every_measure_command_without_torch_is_one_line(args):
    """Without PyTorch each command says how to install it (exit 2): nothing it imports first
    may need PyTorch (a fresh `pip install -e .` has none)."""
    import subprocess
    import sys

    code = "import sys; sys.modules['torch'] = None\nfrom shardwise.cli import main\nmain(sys.argv[1:])"
    done = subprocess.run([sys.executable, "-c", code, "measure", *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: shardwise measure needs PyTorch: pip install 'shardwise[measure]' (on a machine without a GPU, "
        "pip install torch==2.13.0 installs the CPU build)"
    ]


def _children(pid: int) -> set[int]:
    """The process ids whose parent is `pid` (Linux /proc)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.add(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc to find the ranks")
def test_no_rank_outlives_a_launcher_killed_with_sigkill(tmp_path):
    """Issue 30: `kill -9` of the launcher left both ranks computing for minutes. Now the kernel
    ends them (PR_SET_PDEATHSIG), so none survives the launcher by more than a moment."""
    import signal
    import subprocess
    import sys

    code = "import sys; from shardwise.cli import main; main(sys.argv[1:])"
    args = ["measure", "pp", "--device", "cpu", "--ranks", "2", "--iters", "10000", "--seq-len", "32"]
    launcher = subprocess.Popen([sys.executable, "-c", code, *args], cwd=tmp_path, stderr=subprocess.DEVNULL)
    try:
        ranks: set[int] = set()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and launcher.poll() is None:
            # the spawned ranks (the resource tracker is a child too, and ends on its own)
            ranks = {p for p in _children(launcher.pid) if "spawn_main" in Path(f"/proc/{p}/cmdline").read_text()}
            if len(ranks) >= 2:
                break
            time.sleep(0.2)
        assert len(ranks) >= 2, "the ranks did not start"
        time.sleep(2)  # let them get into their work (past the parent check at start)
        launcher.send_signal(signal.SIGKILL)
        launcher.wait(timeout=10)
        end = time.monotonic() + 20
        while time.monotonic() < end and any(_alive(p) for p in ranks):
            time.sleep(0.2)
        survivors = [p for p in ranks if _alive(p)]
    finally:
        for p in _children(launcher.pid) | ranks:
            with contextlib.suppress(OSError):
                os.kill(p, signal.SIGKILL)
    assert not survivors, f"rank process(es) {survivors} outlived the launcher killed with SIGKILL"
