"""One configuration at a time gives the numbers of the vectorized path to the last bit: every
field of the estimate of a scalar scenario equals the same element of the estimate of an
array-valued scenario holding it among others (dense, mixture of experts, context parallelism,
uneven stages, every schedule), with the memos of `specs.memo` on (a configuration asked for
again, stage costs shared) and off."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from shardwise import presets
from shardwise.engines.training import estimate_training_step
from shardwise.errors import SpecError
from shardwise.specs import Plan, Scenario, memo
from shardwise.specs.distinct import MIN_CONFIGURATIONS

# model, system, nodes, the fields drawn (name -> choices) and the fields fixed
CASES = {
    "dense": (
        "gpt-96l-4096h",
        "dgx-a100",
        8,
        {
            "tp": [1, 2, 4, 8],
            "pp": [1, 2, 4, 8],
            "micro_batch": [1, 2, 4],
            "batches": [1, 3, 8, 16],
            "recompute": [0, 1, 2],
            "zero_stage": [0, 1, 2, 3],
            "sequence_parallel": [False, True],
            "schedule": [0, 1, 3],
            "grad_reduce_bf16": [False, True],
            "zero1_grad_all_reduce": [False, True],
        },
        {},
    ),
    # Megatron-Core's MLP checkpoint (recompute_modules mlp) with bf16 gradient buffers
    "mlp recompute": (
        "llama3-8b",
        "dgx-h100",
        4,
        {
            "tp": [1, 2, 4],
            "pp": [1, 2, 4],
            "micro_batch": [1, 2],
            "batches": [8, 16],
            "sequence_parallel": [False, True],
            "zero_stage": [0, 1],
            "grad_reduce_bf16": [False, True],
        },
        {"recompute": 1, "recompute_modules": ("mlp",)},
    ),
    "interleaved": (
        "llama3-8b",
        "dgx-h100",
        8,
        {
            "tp": [1, 2, 4],
            "pp": [2, 4, 8],
            "vpp": [1, 2, 4],
            "micro_batch": [1, 2],
            "batches": [8, 16, 24],
            "recompute": [0, 1, 2],
            "zero_stage": [0, 1],
            "overlap_p2p": [False, True],
            "recompute_layers": [0, 1, 3],
            "aligned_chunk_sync": [False, True],
        },
        {"schedule": "interleaved"},
    ),
    "uneven stages": (
        "gpt-96l-4096h",
        "dgx-h100",
        4,
        {
            "tp": [2, 4, 8],
            "pp": [2, 4, 8],
            "first_stage_layers": [0, 5, 9],
            "last_stage_layers": [0, 7, 10],
            "recompute_layers": [0, 2],
            "micro_batch": [1, 2],
            "batches": [4, 9],
            "schedule": [0, 1, 3],
        },
        {},
    ),
    "context parallel": (
        "llama3-8b",
        "dgx-h100",
        8,
        {
            "tp": [1, 2, 4],
            "pp": [1, 2, 4],
            "cp": [1, 2, 4],
            "micro_batch": [1, 2],
            "batches": [2, 8],
            "recompute": [0, 1],
            "zero_stage": [0, 1, 3],
            "sequence_parallel": [False, True],
        },
        {},
    ),
    "hybrid sharding": (
        "llama3-8b",
        "dgx-h100",
        4,
        {
            "tp": [1, 2],
            "pp": [1, 2],
            "cp": [1, 2],
            "micro_batch": [1, 2],
            "batches": [1, 4],
            "zero_stage": [1, 2, 3],
            "shard_group": [0, 1, 2, 4, 8],
        },
        {},
    ),
    "fsdp stack": (
        "gpt-96l-4096h",
        "dgx-a100",
        4,
        {
            "tp": [1, 2, 4],
            "pp": [1, 2, 4],
            "micro_batch": [1, 2],
            "batches": [1, 4],
            "recompute": [0, 1, 2],
            "zero_stage": [0, 1, 2, 3],
            "sequence_parallel": [False, True],
        },
        {"framework": "torchtitan"},
    ),
    # LoRA mixed with full training in one array, under a stack that keeps fp32 shards (the
    # full-training plans' weights are their fp32 shards, LoRA's frozen ones 16-bit)
    "lora": (
        "gpt-96l-4096h",
        "dgx-a100",
        4,
        {
            "tp": [1, 2, 4],
            "pp": [1, 2, 4],
            "micro_batch": [1, 2],
            "batches": [1, 4],
            "recompute": [0, 2],
            "zero_stage": [0, 1, 3],
            "sequence_parallel": [False, True],
            "lora_rank": [0, 16],
        },
        {"framework": "torchtitan"},
    ),
    # plan fields of nanotron's stack, torchtitan's compiled rotary, packing, pipeline flushes, MTP,
    # LoRA targets (every draw valid: m >= 2 pp, no cp with packing)
    "stack and schedule fields": (
        "llama3-8b",
        "dgx-h100",
        4,
        {
            "tp": [1, 2, 4],
            "pp": [1, 2, 4],
            "micro_batch": [1, 2],
            "batches": [8, 16],
            "recompute": [0, 1, 2],
            "sequence_parallel": [False, True],
            "eager_rotary": [False, True],
            "packed_document_len": [0, 1024],
            "pipeline_flushes": [1, 2],
            "layer_host_ops": [0.0, 206.0],
            "loss_bytes_per_logit": [0.0, 52.0],
            "p2p_host_ops": [0.0, 123.0],
            "tp_shard_overlap": [False, True],
            "eager_glu": [False, True],
            "layout_copies": [False, True],
            "grad_reduce_bf16": [False, True],
            "host_kernel_s": [0.0, 2e-5],
            "mtp_layers": [0, 1],
            "lora_rank": [0, 16],
        },
        {"lora_targets": "qkv,fc2"},
    ),
    # Megatron-Core's recompute modules and CUDA graphs on an MoE model, with MTP
    "recompute modules and graphs": (
        "qwen3-30b-a3b",
        "dgx-h100",
        8,
        {
            "tp": [1, 2],
            "pp": [1, 2],
            "ep": [1, 2, 4, 8],
            "micro_batch": [1, 2],
            "batches": [4, 8],
            "host_kernel_s": [0.0, 2e-5],
            "mtp_layers": [0, 1],
        },
        {
            "sequence_parallel": True,
            "recompute": 1,
            "recompute_modules": ("moe_act", "layernorm", "core_attn"),
            "cuda_graph_scope": ("attn", "moe_router", "moe_preprocess"),
        },
    ),
    # torchao's FP8 all-gather under FSDP2 (zero 3 throughout: the breakdown's named parts are the same)
    "torchao fp8": (
        "llama3-8b",
        "dgx-h100",
        4,
        {
            "tp": [1, 2],
            "pp": [1, 2],
            "micro_batch": [1, 2],
            "batches": [2, 4],
            "recompute": [0, 1, 2],
            "eager_rotary": [False, True],
            "lora_rank": [0, 8],
            "host_kernel_s": [0.0, 1e-5],
        },
        {
            "precision": "fp8",
            "fp8_recipe": "tensorwise_fp8_all_gather",
            "framework": "torchtitan",
            "per_param_sharding": True,
            "zero_stage": 3,
        },
    ),
    "mixture of experts": (
        "qwen3-30b-a3b",
        "dgx-h100",
        8,
        {
            "tp": [1, 2, 4],
            "pp": [1, 2, 4],
            "ep": [1, 2, 4, 8],
            "etp": [0, 1],
            "micro_batch": [1, 2],
            "batches": [4, 8],
            "recompute": [0, 2],
            "zero_stage": [0, 1],
            "expert_imbalance": [1.0, 1.25],
        },
        {"sequence_parallel": True},
    ),
}


def draw(case: str, n: int, seed: int = 0) -> tuple[Scenario, list[dict[str, object]]]:
    """`n` valid plans of `case`, each as plain fields, and one scenario holding them as arrays."""
    model_name, system, nodes, choices, fixed = CASES[case]
    model, cluster = presets.model(model_name), presets.system(system, nodes=nodes)
    rng = np.random.default_rng(seed)
    plans: list[dict[str, object]] = []
    for _ in range(200 * n):
        if len(plans) == n:
            break
        fields: dict[str, object] = {k: v[int(rng.integers(len(v)))] for k, v in choices.items()}
        fields = {k: (v.item() if hasattr(v, "item") else v) for k, v in fields.items()}
        fields.update(fixed)
        batches = fields.pop("batches")
        if "vpp" in fields and fields["vpp"] > 1 and fields.get("schedule") != "interleaved":
            continue
        gpus = 8 * nodes
        layout = fields["tp"] * fields["pp"] * fields.get("cp", 1)  # type: ignore[operator]
        if gpus % layout:
            continue
        fields["dp"] = gpus // layout
        m = batches * (fields["pp"] if fields.get("schedule") == "interleaved" else 1)  # type: ignore[operator]
        fields["global_batch"] = fields["dp"] * fields["micro_batch"] * m  # type: ignore[operator]
        try:
            Scenario(model, cluster, Plan(**fields))  # type: ignore[arg-type]
        except SpecError:
            continue
        plans.append(fields)
    assert len(plans) == n, f"{case}: only {len(plans)} valid plans drawn"
    arrays = {k: np.array([p[k] for p in plans]) for k in plans[0] if k not in fixed}
    if "schedule" in arrays:
        arrays["schedule"] = arrays["schedule"].astype(np.int64)
    return Scenario(model, cluster, Plan(**arrays, **fixed)), plans  # type: ignore[arg-type]


def numbers(value: object, path: str = "") -> dict[str, object]:
    """Every number of an estimate by its path: fields, nested fields and properties."""
    out: dict[str, object] = {}
    if dataclasses.is_dataclass(value):
        for f in dataclasses.fields(value):
            if f.name != "scenario":
                out.update(numbers(getattr(value, f.name), f"{path}.{f.name}"))
        for name in dir(type(value)):
            if isinstance(getattr(type(value), name, None), property) and not name.startswith("_"):
                out.update(numbers(getattr(value, name), f"{path}.{name}"))
    elif isinstance(value, dict):
        for k, v in value.items():
            out.update(numbers(v, f"{path}.{k}"))
    elif isinstance(value, (int, float, np.ndarray, np.number, np.bool_)):
        out[path] = value
    return out


def element(value: object, i: int) -> object:
    arr = np.asarray(value)
    return arr if arr.ndim == 0 else arr.reshape(-1)[i]


def assert_bitwise_equal(scalar: object, vector: object, i: int, what: str) -> None:
    a, b = numbers(scalar), numbers(vector)
    assert a.keys() == b.keys(), what
    for path, value in a.items():
        x, y = np.asarray(value, dtype=float), np.asarray(element(b[path], i), dtype=float)
        assert x.shape == () and x.tobytes() == y.tobytes(), f"{what} {path}: {x!r} != {y!r}"


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("memos", [True, False], ids=["memos on", "memos off"])
def test_one_configuration_is_the_vectorized_element_to_the_bit(case, memos):
    vector_scn, plans = draw(case, 24, seed=len(case))
    vector = estimate_training_step(vector_scn)
    model, cluster = vector_scn.model, vector_scn.cluster
    if memos:
        memo.clear_all()
        for i, fields in enumerate(plans):  # twice: the second time every answer is a kept one
            for _ in range(2):
                est = estimate_training_step(Scenario(model, cluster, Plan(**fields)))  # type: ignore[arg-type]
                assert_bitwise_equal(est, vector, i, f"{case} plan {i} {fields}")
    else:
        with memo.disabled():
            for i, fields in enumerate(plans):
                est = estimate_training_step(Scenario(model, cluster, Plan(**fields)))  # type: ignore[arg-type]
                assert_bitwise_equal(est, vector, i, f"{case} plan {i} {fields}")


def test_the_distinct_path_of_many_plans_is_each_plans_own():
    """Past MIN_CONFIGURATIONS the array is priced once per distinct configuration: the same bits."""
    small, plans = draw("dense", 40, seed=7)
    repeated = [plans[i % len(plans)] for i in range(MIN_CONFIGURATIONS + 8)]
    arrays = {k: np.array([p[k] for p in repeated]) for k in repeated[0]}
    big = Scenario(small.model, small.cluster, Plan(**arrays))  # type: ignore[arg-type]
    assert big.__dict__.get("_distinct") is not None  # validated and priced per distinct configuration
    vector = estimate_training_step(big)
    for i in (0, 1, 39, 40, MIN_CONFIGURATIONS + 7):
        fields = repeated[i]
        est = estimate_training_step(Scenario(small.model, small.cluster, Plan(**fields)))  # type: ignore[arg-type]
        assert_bitwise_equal(est, vector, i, f"plan {i}")


def test_a_kept_estimate_names_the_scenario_given():
    model, cluster = presets.model("llama3-8b"), presets.system("dgx-h100")
    first = Scenario(model, cluster, Plan(tp=2, dp=4, global_batch=8))
    again = Scenario(model, cluster, Plan(tp=2, dp=4, global_batch=8))
    a, b = estimate_training_step(first), estimate_training_step(again)
    assert a.scenario is first and b.scenario is again
    assert a.step_time_s == b.step_time_s and a.breakdown == b.breakdown


def test_a_bad_configuration_is_refused_every_time():
    """A failed check is never kept as a pass."""
    model, cluster = presets.model("llama3-8b"), presets.system("dgx-h100")
    for _ in range(2):
        with pytest.raises(SpecError, match="tp"):
            Scenario(model, cluster, Plan(tp=3, dp=1, global_batch=8))


class _Reads:
    """A plan that records the names read from it."""

    def __init__(self, plan: Plan) -> None:
        self.plan, self.names = plan, set()

    def __getattr__(self, name: str) -> object:
        self.names.add(name)
        return getattr(self.plan, name)


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_scenarios_checks_read_only_the_fields_their_verdict_is_kept_under(case):
    """`Scenario` keeps a configuration's verdict under RULE_FIELDS of the plan: the rules read
    no other plan field (else two plans with different verdicts could share one)."""
    from shardwise.specs.scenario import RULE_FIELDS

    scn, plans = draw(case, 2)
    one = Scenario(scn.model, scn.cluster, Plan(**plans[0]))  # type: ignore[arg-type]
    reads = _Reads(one.plan)
    object.__setattr__(one, "plan", reads)
    one.__dict__.pop("split", None)
    assert one._check_each()
    properties = {"expert_tp": {"etp", "tp"}, "num_gpus": {"tp", "pp", "dp", "cp"}}
    read = set().union(*(properties.get(name, {name}) for name in reads.names))
    assert read and read <= set(RULE_FIELDS), sorted(read - set(RULE_FIELDS))


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_plans_rules_read_only_the_fields_their_verdict_is_kept_under(case):
    from shardwise.specs.plan import _RULE_FIELDS

    _, plans = draw(case, 2)
    plan = Plan(**plans[0])  # type: ignore[arg-type]
    reads = _Reads(plan)
    assert Plan._check_rules(reads)  # type: ignore[arg-type]
    assert reads.names and reads.names <= set(_RULE_FIELDS), sorted(reads.names - set(_RULE_FIELDS))


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_collective_prices_read_only_the_fields_they_are_kept_and_grouped_under(case):
    """The data-parallel collectives of a configuration are kept (and, over many plans, priced
    once per group) under COLLECTIVE_READS of the plan: they read no other plan field."""
    from shardwise.engines.data_parallel import COLLECTIVE_READS, zero_collectives
    from shardwise.engines.training_layout import collective_prices_of

    scn, plans = draw(case, 2)
    plan = Plan(**plans[0])  # type: ignore[arg-type]
    one = Scenario(scn.model, scn.cluster, plan)
    reads = _Reads(plan)
    object.__setattr__(one, "plan", reads)
    one.__dict__.pop("split", None)
    with memo.disabled():
        collective_prices_of(one, zero_collectives(plan.zero_stage))
    properties = {
        "expert_tp": {"etp", "tp"},
        "expert_dp": {"tp", "cp", "dp", "ep", "etp"},
        "bytes_per_element": {"precision"},
    }
    read = set().union(*(properties.get(name, {name}) for name in reads.names))
    assert read and read <= COLLECTIVE_READS, sorted(read - COLLECTIVE_READS)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_layout_terms_read_no_batch_they_are_kept_without(case):
    """A configuration's layout terms (`training_layout._layout_terms`: all but the pipeline's makespan,
    the data-parallel exposure of ZeRO-2/3 and the memory) are kept under every plan field but the
    global batch: a dense model's read neither it nor the micro-batches it sets (a mixture of
    experts' key holds the batch); the memory reads them only through the in-flight counts it is
    kept under (`training_step_memory.step_memory`)."""
    from shardwise.engines import distinct
    from shardwise.engines.training_layout import _layout_terms
    from shardwise.engines.training_memory import memory_breakdown

    scn, plans = draw(case, 2)
    plan = Plan(**plans[0])  # type: ignore[arg-type]
    one = Scenario(scn.model, scn.cluster, plan)
    reads = _Reads(plan)
    object.__setattr__(one, "plan", reads)
    one.__dict__.pop("split", None)
    with memo.disabled(), pytest.MonkeyPatch.context() as mp:
        mp.setattr(distinct, "GROUPING", False)
        lay = _layout_terms(one)
        assert reads.names
        if not scn.model.is_moe:
            assert not reads.names & {"global_batch", "num_micro_batches"}
        # the memory, kept per layout and micro-batches in flight, reads the batch through those alone
        reads.names.clear()
        memory_breakdown(one, lay.params, 3.0, lay.split, lay.expert_params, lay.moe_split, lay.trained)
        assert reads.names and not reads.names & {"global_batch", "num_micro_batches"}


def test_plain_rule_check_agrees_with_the_full_one():
    """`specs.plan_checks._plain_rules_hold` (one plan of plain ints) passes exactly the plans the full
    check passes, over a grid with broken batches, stage counts and interleaving."""
    from shardwise.specs.plan import _RULE_FIELDS, Schedule, _plain_rules_hold

    passed = 0
    for gb in (6, 8, 12, 16):
        for dp in (1, 2, 3):
            for pp in (1, 2, 4):
                for vpp in (1, 2):
                    for schedule in (Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED):
                        for first in (0, 3):
                            fields = {"global_batch": gb, "dp": dp, "micro_batch": 1, "pp": pp, "vpp": vpp}
                            fields |= {"schedule": schedule, "first_stage_layers": first}
                            with memo.disabled():
                                try:  # the full check run on the plan itself, whatever the fast one said
                                    Plan(**fields)._check_rules()  # type: ignore[arg-type]
                                    full = True
                                except SpecError:
                                    full = False
                            values = [fields.get(name, 0) for name in _RULE_FIELDS]
                            assert _plain_rules_hold(*values) == full, fields
                            passed += full
    assert 0 < passed < 2 * 4 * 3 * 3 * 2 * 2
