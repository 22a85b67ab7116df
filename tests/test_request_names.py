"""Names a request gives (framework, precision, Megatron-Core's modules and scopes, a stage list) and
the serving load flags that clash are refused when the request is built, in one line in the command
line's words, as `predict`/`serve` refuse the same flags (`requests.field_names`,
`serve_flags.check_load_clash`); before, `TrainingRequest(framework="nope")` and
`ServeRequest(framework="pytorch", requests=100)` constructed and failed only in `.run()`."""

from __future__ import annotations

import pytest

from shardwise.errors import SpecError
from shardwise.requests import TrainingRequest
from shardwise.requests.compare import ExperimentRequest
from shardwise.requests.serve import ServeRequest

ARGS = ["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--global-batch", "8"]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        # no preset is close to 'nope' (review 42: "closest: composer"): the presets are listed
        ({"framework": "nope"}, r"--framework: 'nope' is not allowed; give a preset \(colossalai, composer, deepspeed"),
        ({"framework": "megatron"}, r"--framework: 'megatron' is not allowed; closest: megatron-core"),
        ({"precision": "fp7"}, r"--precision: 'fp7' is not allowed; use one of bf16, fp16"),
        ({"recompute_modules": "core_attn,x"}, r"--recompute-modules: 'x' is not allowed; choose from core_attn"),
        ({"cuda_graph_scope": "moe"}, r"--cuda-graph-scope: 'moe' is not allowed; .* dropped and padded"),
        ({"stage_layers": "8,x"}, r"--stage-layers: '8,x' is not allowed"),
        ({"moe_pad_to_capacity": True}, r"--moe-pad-to-capacity needs --moe-capacity-factor > 0"),
        (
            {"moe_pad_to_capacity": True, "moe_capacity_factor": 1.0, "moe_dispatcher": "flex"},
            r"not --moe-dispatcher flex",
        ),
        (
            {"moe_capacity_factor": 1.0, "cuda_graph_scope": "moe_router,moe_preprocess"},
            r"--cuda-graph-scope moe_preprocess with token dropping unpadded",
        ),
    ],
)
def test_training_request_refuses_names_when_built(changes, message):
    with pytest.raises(SpecError, match=message) as err:
        TrainingRequest(model="llama3-8b", **changes)
    assert "\n" not in str(err.value)


def test_a_framework_file_and_any_case_are_taken():
    assert TrainingRequest(framework="TorchTitan").framework is not None
    assert TrainingRequest(framework="mine.yaml").framework == "mine.yaml"  # read when priced
    assert TrainingRequest(precision="BF16").precision == "bf16"


def test_experiment_request_checks_its_framework():
    with pytest.raises(SpecError, match=r"--framework: 'megatronn' is not allowed; closest: megatron-core"):
        ExperimentRequest(framework="megatronn")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"framework": "pytorch", "requests": 100}, r"--requests shapes .* pytorch runs static batches only"),
        ({"batching": "static", "seed": 3}, r"--seed shapes the in-flight simulation"),
        ({"concurrency": 4, "max_throughput": True}, r"--concurrency and --max-throughput exclude each other"),
        ({"batching": "static", "request_rate": 2.0}, r"--request-rate needs --batching inflight"),
    ],
)
def test_serve_request_refuses_clashing_load_flags_when_built(changes, message):
    with pytest.raises(SpecError, match=message):
        ServeRequest(**changes)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--framework", "nope"], "--framework: 'nope' is not allowed"),
        (["--moe-pad-to-capacity"], "--moe-pad-to-capacity needs --moe-capacity-factor > 0"),
        (["--recompute-modules", "x"], "--recompute-modules: 'x' is not allowed"),
    ],
)
def test_the_command_line_says_it_with_its_flags_once(cli, flags, message):
    code, _, err = cli([*ARGS, *flags])
    assert code == 2 and message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert "moe_pad_to_capacity" not in err and "recompute_modules" not in err
