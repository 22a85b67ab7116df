"""Review 47 #4 and #8: a calibration records its runs' stacks and says so when applied under another
stack (its interval then holds the uncalibrated prediction); a run nothing explains is refused
quoting the column and value the user wrote."""

from pathlib import Path

import numpy as np
import pytest
import yaml

from shardwise import presets
from shardwise.calibration import store
from shardwise.calibration.fit import Fit
from shardwise.calibration.intervals import spread, stack_note
from shardwise.calibration.parameters import NEUTRAL
from shardwise.calibration.spreads import uncalibrated_log_sd
from shardwise.specs import Plan, Scenario

ROOT = Path(__file__).resolve().parent.parent
SLOW = ROOT / "examples" / "calibration" / "torchtitan-8b-slow.csv"


def _fit(name: str, value: float) -> Fit:
    zero = np.zeros(1)
    return Fit((name,), {**NEUTRAL, name: value}, np.array([[1e-4]]), 0.02, {}, zero, zero, dof=10.0)


def _case(framework: str, scale: float = 1.0) -> Scenario:
    from shardwise.calibration.parameters import apply

    cluster = apply(presets.system("dgx-h100", 1), {"matmul_efficiency_scale": scale})
    return Scenario(presets.model("llama3.1-8b"), cluster, Plan(tp=1, dp=8, global_batch=64, framework=framework))


def test_a_gemm_scale_of_another_stack_widens_the_interval_to_hold_the_uncalibrated_prediction():
    fitted = _fit("matmul_efficiency_scale", 0.745)
    case = _case("megatron-core", 0.745)
    same = spread([case], fitted, "c", ("h100-sxm5-80gb",), ("megatron-core",))
    other = spread([case], fitted, "c", ("h100-sxm5-80gb",), ("torchtitan",))
    unknown = spread([case], fitted, "c", ("h100-sxm5-80gb",), None)
    assert float(unknown.log_sd[0]) == pytest.approx(float(same.log_sd[0]))  # not recorded: not widened
    shift = abs(np.log(0.745))  # a step of GEMMs: ln t moves by about -ln(scale)
    uncal = uncalibrated_log_sd(case.cluster.gpu, "megatron-core", "")
    assert float(other.log_sd[0]) > float(same.log_sd[0])
    assert float(other.log_sd[0]) >= uncal
    assert other.other_gpu and "fitted on runs of torchtitan" in other.basis
    # 1.28 sd reaches past the shift: the uncalibrated prediction lies inside the interval
    assert 1.2816 * float(other.log_sd[0]) > shift


def test_a_network_scale_is_the_fabrics_and_carries_to_another_stack():
    fitted = _fit("inter_node_bandwidth_scale", 0.5)
    case = _case("megatron-core")
    same = spread([case], fitted, "c", ("h100-sxm5-80gb",), ("megatron-core",))
    other = spread([case], fitted, "c", ("h100-sxm5-80gb",), ("torchtitan",))
    assert float(other.log_sd[0]) == pytest.approx(float(same.log_sd[0]))
    assert "runs of" not in other.basis


def test_the_stacks_are_recorded_checksummed_and_an_older_file_loads_as_unknown(tmp_path):
    fitted = _fit("matmul_efficiency_scale", 0.9)
    doc = store.document(fitted, [], ["r1"], ["h100-sxm5-80gb"], np.array([1.0]), stacks=["torchtitan"])
    assert doc["stacks"] == ["torchtitan"]
    cal = store.from_document(doc, "new.yaml")
    assert cal.stacks == ("torchtitan",)
    edited = {**doc, "stacks": ["megatron-core"]}
    with pytest.raises(Exception, match="checksum"):
        store.from_document(edited, "edited.yaml")
    old = store.with_checksum({k: v for k, v in doc.items() if k not in ("stacks", "checksum")})
    before = store.from_document(old, "old.yaml")
    assert before.stacks is None
    assert "does not record its runs' stacks" in stack_note(before, "megatron-core")
    assert "fitted on runs of torchtitan, not megatron-core" in stack_note(cal, "megatron-core")
    assert stack_note(cal, "torchtitan") == ""
    from dataclasses import replace

    assert "fitted on serving runs only, not megatron-core" in stack_note(replace(cal, stacks=()), "megatron-core")


def test_predict_under_another_stack_notes_it_and_holds_the_uncalibrated_prediction(cli, tmp_path):
    out = tmp_path / "slow.yaml"
    code, _, err = cli(["calibrate", str(SLOW), "--params", "matmul_efficiency_scale", "-o", str(out)])
    assert code == 0, err
    assert yaml.safe_load(out.read_text())["stacks"] == ["torchtitan"]
    job = ["predict", "--model", "llama3.1-8b", "--system", "dgx-h100", "--global-batch", "64", "--json"]
    import json

    code, text, err = cli([*job, "--framework", "megatron-core"])
    plain = json.loads(text)["step_time_s"]
    code, text, err = cli([*job, "--framework", "megatron-core", "--calibration", str(out)])
    assert code == 0, err
    got = json.loads(text)
    assert "fitted on runs of torchtitan, not megatron-core" in " ".join(got["notes"])
    assert got["step_time_s_low"] < plain < got["step_time_s_high"]
    code, text, err = cli([*job, "--framework", "torchtitan", "--calibration", str(out)])
    assert "fitted on runs of" not in " ".join(json.loads(text)["notes"])


def test_a_unit_slip_is_refused_quoting_the_column_written(cli, tmp_path):
    runs = tmp_path / "k.csv"
    runs.write_text(
        "model,system,num_gpus,tp,pp,global_batch,tokens_per_s_per_gpu\nllama3.1-8b,dgx-h100,8,1,1,32,6.3\n"
    )
    code, _, err = cli(["calibrate", str(runs), "-o", str(tmp_path / "k.yaml")])
    assert code == 2 and "Traceback" not in err
    first, second = err.strip().split("\n")
    assert "tokens_per_s_per_gpu 6.3 is 1/" in first and "tokens/s per GPU" in first and "a unit slip?" in first
    assert "step_time_s" not in first and "GEMM efficiency" not in first and len(first) < 400
    assert second.lstrip().startswith("tried") and "GEMM efficiency" in second
    # the predicted figure is in the unit written: about 1,580 x 6.3 tokens/s per GPU
    predicted = float(first.split("the predicted ")[1].split(" ")[0].replace(",", ""))
    assert 5_000 < predicted < 20_000
