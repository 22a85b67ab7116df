"""DeepSpeed's partitioned activation checkpoints (`Plan.partition_activations`, Megatron-DeepSpeed
--partition-activations; `physics.remat_partition`): under full recomputation each layer keeps 1/tp
of its input and all-gathers it over TP before recomputing it; nothing without full recomputation or
with one TP rank; the flag, the framework-file key, the public rows that state it, the refusals."""

from __future__ import annotations

import numpy as np
import pytest

from shardwise import presets
from shardwise.analyses import public_runs
from shardwise.engines.training import estimate_training_step
from shardwise.errors import SpecError
from shardwise.physics import remat_partition
from shardwise.requests.training import TrainingRequest, refuse_idle_flags

GLM = dict(
    model="glm-130b",
    system="dgx-a100-40gb",
    num_gpus=768,
    tp=4,
    pp=8,
    global_batch=4224,
    micro_batch=1,
    recompute="full",
    zero=1,
    precision="fp16",
    framework="megatron-deepspeed",
    sequence_parallel=False,
    flash_attention=False,
)


def _est(**over: object):
    return estimate_training_step(TrainingRequest(**{**GLM, **over}).scenario())


def test_partitioned_checkpoints_cost_a_tp_all_gather_and_keep_a_tp_share_of_the_input():
    whole, part = _est(), _est(partition_activations=True)
    assert whole.scenario.plan.partition_activations is False  # the preset's default: off
    # time: the backward's all-gather of each layer input over the 4 TP ranks, exposed, and the copies
    assert part.step_time_s > whole.step_time_s
    assert part.step_time_s < 1.02 * whole.step_time_s  # a 50 MB gather beside a ~70 ms layer
    assert part.breakdown.tp_comm_s > whole.breakdown.tp_comm_s
    # memory: the kept inputs shrink to a quarter (the first stage holds pp micro-batches of 9 layers)
    s, h, e = 2048, 12288, 2
    layers_in_flight = 8 * 9
    freed = whole.memory.activations_bytes - part.memory.activations_bytes
    assert freed == pytest.approx(layers_in_flight * e * s * h * 3 / 4, rel=0.05)


def test_nothing_changes_without_full_recomputation_or_a_tp_group():
    assert _est(tp=1, pp=8, micro_batch=1, num_gpus=192, partition_activations=True).step_time_s == pytest.approx(
        _est(tp=1, pp=8, micro_batch=1, num_gpus=192).step_time_s
    )
    fw = presets.framework("megatron-deepspeed")
    assert fw.get("partition_activations", False) is False
    # the pieces: nothing gathered or copied where off or at tp 1
    f, b = remat_partition.passes_bytes(100.0, np.array([1, 4]), True)
    assert list(f) == [0.0, 50.0] and list(b) == [0.0, 100.0 + 50.0 + 200.0]
    assert list(remat_partition.gathered_bytes(100.0, np.array([1, 4]), np.array([True, False]))) == [0.0, 0.0]
    assert list(remat_partition.kept_fraction(np.array([1, 4]), True)) == [1.0, 0.25]


def test_the_flag_is_refused_without_full_recomputation(cli):
    with pytest.raises(SpecError, match="--partition-activations needs --recompute full"):
        refuse_idle_flags(TrainingRequest(**{**GLM, "recompute": "selective", "partition_activations": True}))
    args = ["predict", "--model", "gpt-1.3b", "--system", "dgx-2", "--num-gpus", "16", "--tp", "2"]
    code, _, err = cli([*args, "--global-batch", "64", "--partition-activations"])
    assert code == 2 and "--recompute full" in err and "Traceback" not in err


def test_a_framework_file_turns_it_on(tmp_path):
    path = tmp_path / "glm.yaml"
    path.write_text("like: megatron-deepspeed\npartition_activations: true\n")
    on = _est(framework=str(path))
    assert on.scenario.plan.partition_activations is True
    assert on.step_time_s == pytest.approx(_est(partition_activations=True).step_time_s)
    bad = tmp_path / "bad.yaml"
    bad.write_text("like: megatron-deepspeed\npartition_activations: yes please\n")
    with pytest.raises(SpecError, match="partition_activations"):
        _est(framework=str(bad))


def test_glm_130b_rows_that_state_it_are_priced_with_it_and_others_are_not():
    rows = {r["id"]: r for r in public_runs.raw_rows()}
    for row_id in ("PUB-1107", "PUB-1108"):  # GLM-130B's config: partition_activations on
        assert public_runs.request_for(rows[row_id]).partition_activations is True
    # the Megatron-DeepSpeed example scripts pass no --partition-activations
    for row_id in ("PUB-0999", "PUB-1001"):
        assert not public_runs.request_for(rows[row_id]).partition_activations


def test_emit_deepspeed_writes_the_flags_and_megatron_refuses(cli):
    skip = ("sequence_parallel", "flash_attention", "zero")
    args = ["predict", *(a for k, v in GLM.items() if k not in skip for a in (f"--{k.replace('_', '-')}", str(v)))]
    code, out, err = cli([*args, "--partition-activations", "--emit", "deepspeed"])
    assert code == 0, err
    assert "--deepspeed-activation-checkpointing --partition-activations" in out
    code, out, err = cli([*args, "--partition-activations", "--emit", "megatron"])
    assert code == 2 and "DeepSpeed's" in err


def test_plan_searches_recomputation_with_the_flag_and_keeps_it_only_on_full_recomputation(cli):
    args = ["plan", "--model", "gpt-1.3b", "--system", "dgx-2", "--num-gpus", "16", "--global-batch", "64"]
    code, out, err = cli([*args, "--framework", "megatron-deepspeed", "--partition-activations", "--top", "3"])
    assert code == 0, err
    assert "selective" in out or "full" in out or "none" in out
