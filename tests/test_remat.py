"""JAX remat policies (physics/remat.py): what each recomputes and keeps, how the training step and
the memory estimate read them, and how the public MaxText / Paxml runs are mapped to them."""

import itertools

import pytest

from shardwise.physics import remat


def test_the_down_projection_is_never_recomputed():
    """Its output feeds only the residual whose result the next layer keeps: dead code for XLA."""
    assert all("down" not in parts for parts in remat.RECOMPUTED.values())


def test_policies_recompute_more_as_they_keep_less():
    r = remat.RECOMPUTED
    chain = ["minimal_flash", "minimal", "save_dot_except_mlpwi", "save_qkv_proj", "save_nothing"]
    for lighter, heavier in itertools.pairwise(chain):
        assert r[lighter] < r[heavier], (lighter, heavier)


def test_recompute_seconds_add_the_recomputed_parts():
    # qkv 1, proj 2, up 4, attention 8, element-wise 16
    times = (1.0, 2.0, 4.0, 8.0, 16.0)
    assert remat.recompute_s("minimal_flash", *times) == 16.0
    assert remat.recompute_s("minimal", *times) == 24.0
    assert remat.recompute_s("save_dot_except_mlpwi", *times) == 28.0
    assert remat.recompute_s("save_qkv_proj", *times) == 30.0
    assert remat.recompute_s("save_nothing", *times) == 31.0


@pytest.mark.parametrize(
    ("stack_name", "ours"),
    [
        ("save_dot_with_no_batch_dim", "minimal"),
        ("SAVE_DOT_ONLY", "minimal"),
        ("save_qkv_out_proj", "save_dot_except_mlp"),
        ("full", "save_nothing"),
        ("minimal_flash", "minimal_flash"),
    ],
)
def test_the_stacks_names_map_to_ours(stack_name, ours):
    assert remat.canonical(stack_name) == ours


def _kept(policy):
    # Llama 2 70B's shape, one sequence of 4096 tokens, no TP
    return remat.kept_bytes(policy, 4096, 1, 8192, 8192, 1024, 28672, True, 1, False, 2.0, 4.0, 64)


def test_memory_kept_falls_as_the_policy_keeps_less():
    chain = ["minimal_flash", "minimal", "save_dot_except_mlpwi", "save_qkv_proj", "save_nothing"]
    kept = [_kept(p) for p in chain]
    assert all(a > b for a, b in itertools.pairwise(kept))
    assert _kept("save_nothing") == 2.0 * 4096 * 8192  # the layer input alone


def _step(policy, recompute="selective", model="llama2-7b"):
    from shardwise import presets
    from shardwise.engines.training import estimate_training_step
    from shardwise.specs import Plan, Scenario

    plan = Plan(
        dp=8,
        global_batch=16,
        micro_batch=2,
        recompute=recompute,
        zero_stage=3,
        selective_policy=policy,
        **{k: v for k, v in presets.framework("maxtext").items() if k not in ("zero_stage", "selective_policy")},
    )
    return estimate_training_step(Scenario(presets.model(model), presets.system("dgx-h100"), plan))


def test_jax_full_remat_costs_less_than_megatron_full_recompute_and_more_than_minimal_flash():
    none = float(_step("minimal_flash", "none").step_time_s)
    flash = float(_step("minimal_flash").step_time_s)
    nothing = float(_step("save_nothing").step_time_s)
    full = float(_step("attention", "full").step_time_s)
    assert none < flash < nothing < full


def test_jax_policies_change_memory_in_their_order():
    from shardwise import presets
    from shardwise.engines.training import training_memory
    from shardwise.specs import Plan, Scenario

    def activations(policy):
        plan = Plan(dp=8, global_batch=16, micro_batch=2, recompute="selective", zero_stage=3, selective_policy=policy)
        scn = Scenario(presets.model("llama2-7b"), presets.system("dgx-h100"), plan)
        return float(training_memory(scn).activations_bytes)

    assert activations("minimal_flash") > activations("save_qkv_proj") > activations("save_nothing")


def _row(**kw):
    row = {
        "framework": "maxtext",
        "source": "GitHub NVIDIA/dgxc-benchmarking maxtext/README_70b.md",
        "model": "llama2-70b",
        "precision": "bf16",
        "recompute": "",
        "parse_notes": "FSDP+DP layout: tp=pp=cp=1",
        "framework_version": "",
        "fsdp": "64",
    }
    return {**row, **kw}


@pytest.mark.parametrize(
    ("row", "policy"),
    [
        (_row(), "save_dot_except_mlpwi"),  # dgxc maxtext/configure.sh (v24.11.1, v25.01.1), BF16
        (_row(precision="fp8"), "save_dot_except_mlp"),
        (_row(model="llama3-70b", precision="fp8"), "save_qkv_proj"),
        (_row(parse_notes="remat_policy=minimal_flash; attention=cudnn-flash-te"), "minimal_flash"),
        (
            _row(framework="paxml", source="GitHub NVIDIA/dgxc-benchmarking paxml/README_175b.md", model="gpt3-175b"),
            "save_dot_except_mlp",
        ),
        (
            _row(
                framework="paxml",
                source="GitHub NVIDIA/JAX-Toolbox rosetta/rosetta/projects/pax/README.md (Paxml on GPU, 24.04)",
                model="gpt3-175b",
                parse_notes="te=on; remat_policy=not-stated",
            ),
            "save_nothing",
        ),
        (_row(framework="fsdp", parse_notes="remat_policy=minimal"), ""),  # only the JAX stacks
        (_row(model="gpt-125m", framework="paxml", source="x"), ""),  # nothing stated: none
    ],
)
def test_public_jax_rows_take_the_policy_their_source_states(row, policy):
    from shardwise.analyses import public_stacks

    assert public_stacks.jax_remat_policy(row) == policy
    assert public_stacks.recompute(row) == ("selective" if policy else "none")
    if policy:
        assert public_stacks.execution(row)[1]["selective_policy"] == policy


def test_paxml_2310_rows_run_without_flash_attention():
    from shardwise.analyses import public_stacks

    row = _row(framework="paxml", source="x", model="gpt3-5b", framework_version="paxml:23.10")
    assert public_stacks.execution(row)[1]["flash_attention"] is False
    assert "flash_attention" not in public_stacks.execution({**row, "framework_version": "paxml:24.04"})[1]
