"""Varying `hidden` keeps the model's own shape ratios (review 47 #1): every width was an MHA model
with a 4h MLP, so a Llama's grid point at its own width missed the Llama it named (sensitivity:
crossover 60 against hidden, 43 against layers, for the same 32-layer, 4096-wide model)."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest
from click.testing import CliRunner

from shardwise import presets
from shardwise.analyses.evaluate import shape_for_hidden
from shardwise.cli import cli as main

SYSTEM = ["--system", "dgx-h100"]


def _rows(args: list[str]) -> list[dict[str, str]]:
    out = CliRunner().invoke(main, ["sweep", *SYSTEM, "--plan", "tp=8", "--plan", "pp=8", *args, "-o", "-"])
    assert out.exit_code == 0, out.output
    return list(csv.DictReader(io.StringIO(out.stdout)))


@pytest.mark.parametrize("name", ["llama3.1-8b", "gpt-6.7b", "qwen3-32b"])
def test_sweep_at_the_models_own_width_equals_the_sweep_without_the_axis(name):
    """A Llama (GQA, SwiGLU 3.5h), a GPT (MHA, 4h) and Qwen3-32B (head_dim 128 set apart from
    hidden / heads = 80): the cells at the model's own hidden are the cells without `--vary hidden`."""
    own = presets.model(name).hidden
    model = ["--model", name, "--vary", "batch=8,64"]
    plain = _rows(model)
    varied = [r for r in _rows([*model, "--vary", f"hidden={own},{2 * own}"]) if float(r["hidden"]) == own]
    assert len(varied) == len(plain) == 2
    for a, b in zip(plain, varied, strict=True):
        for plan in ("tp=8", "pp=8"):
            assert float(a[f"time_s[{plan}]"]) == pytest.approx(float(b[f"time_s[{plan}]"]), rel=1e-12)


@pytest.mark.parametrize(("name", "layers", "hidden"), [("llama3.1-8b", 32, 4096), ("qwen3-32b", 64, 5120)])
def test_sensitivity_against_hidden_at_the_own_width_equals_against_layers_at_the_own_depth(name, layers, hidden):
    args = ["sensitivity", "--model", name, *SYSTEM, "--no-plot", "--ignore-memory", "--json"]
    out = CliRunner().invoke(main, [*args, "--layers-values", str(layers), "--hidden-values", str(hidden)])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    (by_layers,) = data["crossover_batch_vs_layers"].values()
    (by_hidden,) = data["crossover_batch_vs_hidden"].values()
    assert by_hidden[0]["crossover_batch"] == by_layers[0]["crossover_batch"]


def test_a_wider_llama_keeps_its_head_dim_its_kv_groups_and_its_mlp_ratio():
    llama = presets.model("llama3.1-8b")  # 32 heads of 128, 8 KV heads, ffn 14336 = 3.5 h
    wide = shape_for_hidden(llama, np.array([2048.0, 4096.0, 8192.0]), 1)
    assert list(wide["heads"]) == [16, 32, 64] and list(wide["kv_heads"]) == [4, 8, 16]
    assert list(wide["ffn_hidden"]) == [7168, 14336, 28672]  # Llama 3.1 70B's 8192 -> 28672 (3.5 h)
    # TP 8 must split the KV heads too: 2048 and 2560 take the nearest head count that it can
    narrow = shape_for_hidden(llama, np.array([2048.0, 2560.0, 8192.0]), 8)
    h, heads, kv = (np.asarray(narrow[k]) for k in ("hidden", "heads", "kv_heads"))
    assert np.all(h % heads == 0) and np.all(heads == 4 * kv) and np.all(kv % 8 == 0)
    assert heads[-1] == 64  # where the model's head dim works, it stands
    qwen = presets.model("qwen3-32b")  # head_dim 128 set apart from 5120 / 64 = 80
    q = shape_for_hidden(qwen, np.array([10240.0]), 8)
    assert (int(q["heads"][0]), int(q["kv_heads"][0])) == (128, 16)
    assert qwen.with_(hidden=10240, heads=128, kv_heads=16).head_dim == 128


def test_the_hidden_flag_on_a_named_model_keeps_its_ratios():
    """`crossover --model llama3.1-8b --hidden 4096` is the Llama itself (it was an MHA, 4h model)."""
    base = ["crossover", "--model", "llama3.1-8b", *SYSTEM, "--vary", "batch=8,64", "-o", "-"]
    plain = CliRunner().invoke(main, base)
    same = CliRunner().invoke(main, [*base, "--hidden", "4096"])
    assert plain.exit_code == same.exit_code == 0, plain.output + same.output
    assert plain.stdout == same.stdout


def _predict(args: list[str]) -> dict:
    out = CliRunner().invoke(main, ["predict", "--model", "llama3.1-8b", *SYSTEM, "--json", *args])
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)


@pytest.mark.parametrize("hidden", [5120, 8192])
def test_predict_hidden_on_a_named_model_equals_the_sweep_cell_at_that_hidden(hidden):
    """One rule for --hidden in every command (task r47d #1): predict changed `hidden` alone
    (llama3.1-8b at 8192: 32 heads of 256, ffn 14336) while the sweep kept the ratios (64 heads of
    128, 16 KV heads, ffn 28672). The sweep's defaults given to predict: ZeRO-0, no SP, no recompute."""
    flags = ["--global-batch", "64", "--tp", "8", "--zero", "0", "--no-sequence-parallel", "--recompute", "none"]
    got = _predict([*flags, "--hidden", str(hidden)])["step_time_s"]
    out = CliRunner().invoke(
        main,
        [
            "sweep",
            "--model",
            "llama3.1-8b",
            *SYSTEM,
            "--plan",
            "tp=8",
            "--vary",
            "batch=64",
            "--vary",
            f"hidden={hidden}",
            "-o",
            "-",
        ],
    )
    assert out.exit_code == 0, out.output
    (row,) = csv.DictReader(io.StringIO(out.stdout))
    assert got == pytest.approx(float(row["time_s[tp=8]"]), rel=1e-12)


def test_every_command_builds_the_same_model_for_hidden_and_the_users_shape_flags_win():
    from shardwise.requests.build import build_model

    wide = build_model({"model": "llama3.1-8b", "hidden": 8192, "tp": 8})
    assert (wide.heads, wide.kv_heads, wide.ffn_hidden) == (64, 16, 28672)
    own = build_model({"model": "llama3.1-8b", "hidden": 4096})
    assert own == presets.model("llama3.1-8b")
    given = build_model({"model": "llama3.1-8b", "hidden": 8192, "heads": 32, "ffn_hidden": 20000})
    assert (given.heads, given.kv_heads, given.ffn_hidden) == (32, 8, 20000)  # 4 query heads per KV head kept
    kv = build_model({"model": "llama3.1-8b", "hidden": 8192, "kv_heads": 8})
    assert (kv.heads, kv.kv_heads) == (64, 8)


def test_serve_and_plan_take_the_same_shape_for_hidden():
    out = CliRunner().invoke(
        main, ["serve", "--model", "llama3.1-8b", *SYSTEM, "--hidden", "8192", "--plan", "tp=8", "--json"]
    )
    assert out.exit_code == 0, out.output
    plan = CliRunner().invoke(
        main, ["plan", "--model", "llama3.1-8b", *SYSTEM, "--hidden", "8192", "--global-batch", "64", "--json"]
    )
    assert plan.exit_code == 0, plan.output
    from shardwise.requests.serve import ServeRequest
    from shardwise.requests.training import TrainingRequest

    req = ServeRequest(TrainingRequest(model="llama3.1-8b", system="dgx-h100", hidden=8192), plans=("tp=8",))
    model = req.setting().model
    assert (model.heads, model.kv_heads, model.ffn_hidden) == (64, 16, 28672)


def test_a_width_no_tp_split_fits_is_still_a_valid_model():
    """review 49 #4: llama3-8b at hidden 5000 with tp 8 compared was 39 query heads over 9 KV heads (no
    model); now the multiple of its 4 query heads per KV head nearest 5000 / 128 that divides 5000,
    40 heads of 125 over 10 KV heads, which the tp 8 plan then refuses in its own line."""
    from shardwise import presets
    from shardwise.analyses.evaluate import shape_for_hidden

    shape = {k: int(v) for k, v in shape_for_hidden(presets.model("llama3-8b"), 5000, 8).items()}
    assert shape["heads"] == 40 and shape["kv_heads"] == 10 and 5000 % shape["heads"] == 0
