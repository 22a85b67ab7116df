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
