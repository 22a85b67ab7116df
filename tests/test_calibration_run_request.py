"""A runs CSV's row may state how the run ran with any cluster, plan or stack field of the
training request (`calibration.run_request`): a JAX remat policy, a hybrid-sharding group, a
network, a kernel switch. Without them the dgxc-benchmarking MaxText runs were priced with no
rematerialisation (182 GB of activations, "does not fit") and their calibration absorbed it."""

from __future__ import annotations

import pytest

from shardwise.calibration.run_request import REQUEST_COLUMNS
from shardwise.calibration.runs import parse_runs
from shardwise.engines.training import estimate_training_step
from shardwise.errors import SpecError
from shardwise.requests.training import TrainingRequest

HEAD = "id,model,system,num_gpus,tp,pp,global_batch,micro_batch,framework,precision,zero,recompute"
MAXTEXT = "r1,llama3-70b,dgx-h100,128,1,1,256,2,maxtext,bf16,3"  # dgxc-benchmarking's Llama 3 70B on 128 GPUs


def test_a_selective_policy_column_prices_the_remat_policy_the_run_ran():
    """`selective_policy` is the request's field (`--selective-policy`): MaxText's save_qkv_proj
    recomputes what it does not save, so the step is longer and the activations fit."""
    (plain,) = parse_runs(f"{HEAD},step_time_s\n{MAXTEXT},none,15.6\n", "runs.csv")
    (remat,) = parse_runs(f"{HEAD},selective_policy,step_time_s\n{MAXTEXT},selective,save_qkv_proj,15.6\n", "runs.csv")
    request = TrainingRequest(
        model="llama3-70b", system="dgx-h100", num_gpus=128, global_batch=256, micro_batch=2, framework="maxtext",
        precision="bf16", zero=3, recompute="selective", selective_policy="save_qkv_proj",
    )  # fmt: skip
    assert remat.scenario == request.scenario()
    slow, fast = estimate_training_step(remat.scenario), estimate_training_step(plain.scenario)
    assert float(slow.step_time_s) > 1.1 * float(fast.step_time_s)  # the recomputed forward work
    assert float(slow.memory.total_bytes) < 0.5 * float(fast.memory.total_bytes)


def test_a_request_field_with_a_value_it_does_not_allow_is_one_line_naming_it():
    text = f"{HEAD},selective_policy,step_time_s\n{MAXTEXT},selective,save_everything,15.6\n"
    with pytest.raises(SpecError, match=r"runs.csv line 2: .*selective[_-]policy.*save_everything") as err:
        parse_runs(text, "runs.csv")
    assert "save_qkv_proj" in str(err.value)  # the allowed values are named


def test_a_misspelt_request_column_is_refused_with_the_closest_name():
    text = f"{HEAD},selective_polcy,step_time_s\n{MAXTEXT},selective,save_qkv_proj,15.6\n"
    with pytest.raises(SpecError, match="unknown column 'selective_polcy'; did you mean 'selective_policy'"):
        parse_runs(text, "runs.csv")


def test_the_columns_are_the_requests_plan_and_stack_fields_less_the_calibration_and_servers():
    for name in ("selective_policy", "shard_group", "inter_link", "nics_per_node", "attention_kernel", "schedule"):
        assert name in REQUEST_COLUMNS
    for name in ("calibration", "nodes", "hidden", "tp", "recompute"):  # a file, a count, the model, the layout
        assert name not in REQUEST_COLUMNS
    text = "model,system,num_gpus,tp,pp,global_batch,calibration,step_time_s\nllama3-8b,dgx-h100,8,2,1,64,c.yaml,7\n"
    with pytest.raises(SpecError, match="unknown column 'calibration'"):
        parse_runs(text, "runs.csv")


def test_a_shard_group_and_a_network_change_the_run_priced():
    """Hybrid sharding (FSDP inside 128 GPUs, data parallelism across) and a stated network are read."""
    head = "model,system,num_gpus,tp,pp,global_batch,micro_batch,framework,zero"
    row = "llama3-70b,dgx-h100,512,1,1,1024,2,maxtext,3"
    (flat,) = parse_runs(f"{head},step_time_s\n{row},9\n", "runs.csv")
    (hybrid,) = parse_runs(f"{head},shard_group,step_time_s\n{row},128,9\n", "runs.csv")
    (slow,) = parse_runs(f"{head},inter_link,nics_per_node,step_time_s\n{row},eth-100g,4,9\n", "runs.csv")
    assert hybrid.scenario.plan.shard_group == 128 and flat.scenario.plan.shard_group == 0
    assert slow.scenario.cluster != flat.scenario.cluster
