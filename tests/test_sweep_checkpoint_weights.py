"""crossover/sweep with --workload decode/prefill price a quantised checkpoint's weights as `serve`
does (task r47d #4): DeepSeek-V3's and Kimi K2's FP8 blocks, gpt-oss's MXFP4 experts were priced in
bf16 by the sweep while serve took the checkpoint's storage; one default, one note."""

from __future__ import annotations

import csv
import io

import pytest
from click.testing import CliRunner

from shardwise.cli import cli as main

BASE = ["--system", "dgx-h100", "--plan", "tp=8", "--vary", "batch=1,64", "-o", "-"]


def _sweep(model: str, *extra: str) -> tuple[list[dict[str, str]], str]:
    out = CliRunner().invoke(main, ["sweep", "--model", model, *BASE, *extra])
    assert out.exit_code == 0, out.output
    return list(csv.DictReader(io.StringIO(out.stdout))), out.stderr


def test_decode_sweep_prices_gpt_oss_mxfp4_weights_as_serve_and_says_so():
    stored, err = _sweep("gpt-oss-120b", "--workload", "decode")
    sixteen, err16 = _sweep("gpt-oss-120b", "--workload", "decode", "--precision", "bf16")
    # decode at batch 64 reads the weights: 4-bit experts take less time than bf16 ones
    assert float(stored[1]["time_s[tp=8]"]) < 0.8 * float(sixteen[1]["time_s[tp=8]"])
    note = "weights mxfp4: the checkpoint's, as gpt-oss-120b's published checkpoint stores them (hf_weights)"
    assert note in err and "--precision to price another" in err
    assert note not in err16  # --precision given: the user's, as serve's --weight-precision
    serve = CliRunner().invoke(main, ["serve", "--model", "gpt-oss-120b", "--system", "dgx-h100", "--plan", "tp=8"])
    assert serve.exit_code == 0 and note in serve.stderr


@pytest.mark.parametrize(
    ("model", "workload"), [("deepseek-v3", "prefill"), ("kimi-k2", "decode"), ("llama3.1-8b", "decode")]
)
def test_the_sweeps_serving_weights_are_serves(model, workload):
    from shardwise.requests.experiment import build_experiment
    from shardwise.requests.serve import ServeRequest
    from shardwise.requests.training import TrainingRequest

    o = {
        "model_name": model,
        "system": "dgx-h100",
        "gpus": None,
        "nodes": None,
        "links": (),
        "plans": ("tp=8",),
        "workload": workload,
        "cost_model": "physical",
        "batch": 8,
        "micro_batch": 1,
    }
    exp = build_experiment(o, [])
    served = ServeRequest(TrainingRequest(model=model, system="dgx-h100"), plans=("tp=8",)).setting()
    want = {"deepseek-v3": "fp8", "kimi-k2": "fp8", "llama3.1-8b": None}[model]
    assert exp.serving_weights == want
    assert served.workload.weight_precision == (want or "bf16")


def test_training_sweeps_keep_the_run_precision():
    args = ["sweep", "--model", "gpt-oss-120b", "--system", "dgx-h100", "--plan", "tp=8,sp=on", "--vary", "batch=8,64"]
    out = CliRunner().invoke(main, [*args, "--workload", "train", "-o", "-"])
    assert out.exit_code == 0, out.output
    assert "the checkpoint's" not in out.stderr
