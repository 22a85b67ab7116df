"""Activation and model-state memory against Korthikanti et al. 2022 Table 2 and ZeRO."""

import pytest

from shardwise.physics.memory import layer_activation_bytes, layers_in_flight, model_state_bytes
from shardwise.specs import Recompute, Schedule


def act(model, b, t, sp, rc):
    return layer_activation_bytes(model, b, t, sp, rc, False, 2.0)


@pytest.fixture()
def dims(gpt3):
    s, b, h, a = gpt3.seq_len, 2, gpt3.hidden, gpt3.heads
    return s, b, h, a


def test_no_parallelism_is_sbh_34_plus_5as_over_h(gpt3, dims):
    s, b, h, a = dims
    assert act(gpt3, b, 1, False, Recompute.NONE) == pytest.approx(s * b * h * (34 + 5 * a * s / h))


def test_tensor_parallel(gpt3, dims):
    s, b, h, a = dims
    t = 8
    expected = s * b * h * (10 + 24 / t + 5 * a * s / (h * t))
    assert act(gpt3, b, t, False, Recompute.NONE) == pytest.approx(expected)


def test_tensor_and_sequence_parallel(gpt3, dims):
    s, b, h, a = dims
    t = 8
    assert act(gpt3, b, t, True, Recompute.NONE) == pytest.approx(s * b * h / t * (34 + 5 * a * s / h))


def test_selective_recompute_drops_the_attention_scores(gpt3, dims):
    s, b, h, _ = dims
    t = 8
    assert act(gpt3, b, t, False, Recompute.SELECTIVE) == pytest.approx(s * b * h * (10 + 24 / t))
    assert act(gpt3, b, t, True, Recompute.SELECTIVE) == pytest.approx(34 * s * b * h / t)


def test_full_recompute_keeps_only_the_layer_input(gpt3, dims):
    s, b, h, _ = dims
    assert act(gpt3, b, 8, False, Recompute.FULL) == pytest.approx(2 * s * b * h)


def test_flash_attention_stores_no_score_matrix(gpt3, dims):
    s, b, h, a = dims
    with_flash = layer_activation_bytes(gpt3, b, 1, False, Recompute.NONE, True, 2.0)
    assert with_flash == pytest.approx(s * b * h * 34 + 4 * a * s * b)


def test_first_stage_in_flight_micro_batches():
    l, p, m = 96, 8, 64
    stage = l / p  # layers on the stage
    assert layers_in_flight(stage, p, 1, m, Schedule.GPIPE, 0) == m * l / p
    assert layers_in_flight(stage, p, 1, m, Schedule.ONE_F_ONE_B, 0) == l  # p micro-batches of l/p layers
    assert layers_in_flight(stage, p, 1, m, Schedule.ONE_F_ONE_B, p - 1) == l / p
    # Korthikanti Sec. 4.2.3: interleaving multiplies the first stage's memory by 1 + (p-1)/(p v).
    v = 3
    assert layers_in_flight(stage, p, v, m, Schedule.INTERLEAVED, 0) == pytest.approx(l * (1 + (p - 1) / (p * v)))
    # an uneven stage holds in-flight micro-batches of its own layers
    assert layers_in_flight(15, p, 1, m, Schedule.ONE_F_ONE_B, 0) == 15 * p


def test_zero_partitions_optimizer_then_gradients_then_weights():
    n, dp = 1e9, 8
    w0, g0, o0 = model_state_bytes(n, dp, 0, "bf16")
    assert (w0, g0, o0) == (2e9, 4e9, 12e9)  # bf16 weights, fp32 grads, fp32 Adam state
    assert model_state_bytes(n, dp, 1, "bf16") == (2e9, 4e9, 12e9 / dp)
    assert model_state_bytes(n, dp, 2, "bf16") == (2e9, 4e9 / dp, 12e9 / dp)
    assert model_state_bytes(n, dp, 3, "bf16") == (2e9 / dp, 4e9 / dp, 12e9 / dp)
    assert model_state_bytes(n, dp, 0, "fp16")[1] == 2e9  # the classic 2 + 2 + 12 = 16 bytes


@pytest.mark.parametrize(
    ("model", "extra"),
    [
        ("gpt-96l-4096h", {}),
        ("llama3-8b", {"flash_attention": False}),
        ("mixtral-8x7b", {"etp": 1}),
    ],
)
def test_the_model_state_floor_never_exceeds_the_memory_total(model, extra):
    """The planner drops plans whose floor exceeds the GPU without pricing their activations: the
    floor is a lower bound of the total on every plan (ZeRO 0-3, every schedule and recompute)."""
    import numpy as np

    from shardwise import presets
    from shardwise.engines.training import training_memory, training_memory_floor_bytes
    from shardwise.specs import Plan, Scenario

    rng = np.random.default_rng(7)
    n = 4000
    m = presets.model(model)
    tp = rng.choice([1, 2, 4, 8], n)
    pp = rng.choice([1, 2, 4, 8], n)
    dp = 64 // (tp * pp)
    mb = rng.choice([1, 2, 4], n)
    vpp = np.where((pp > 1) & (rng.random(n) < 0.4) & (m.layers % (2 * pp) == 0), 2, 1)
    schedule = np.where(vpp > 1, 2, np.where(pp > 1, rng.choice([0, 1, 3], n), 1))
    kw = {"ep": np.where(dp * tp % 8 == 0, 8, 1)} if m.is_moe else {}
    plan = Plan(
        tp=tp,
        pp=pp,
        dp=dp,
        micro_batch=mb,
        global_batch=dp * mb * pp * rng.integers(1, 5, n),
        vpp=vpp,
        schedule=schedule,
        recompute=rng.integers(0, 3, n),
        zero_stage=rng.integers(0, 4, n) * (dp > 1),
        sequence_parallel=(tp > 1) if m.is_moe else (tp > 1) & (rng.random(n) < 0.5),
        **kw,
        **extra,
    )
    scn = Scenario(m, presets.system("dgx-h100", nodes=8), plan)
    floor = np.asarray(training_memory_floor_bytes(scn))
    total = np.asarray(training_memory(scn).total_bytes)
    assert np.all(floor <= total)
    assert np.all(floor > 0.3 * total.min())  # a floor that says something
