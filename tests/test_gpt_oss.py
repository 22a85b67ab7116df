"""GPT-OSS as Megatron-Core trains it (issue 32): the clamped gated activation and the experts'
output bias run as eager kernels, what the routed experts keep for the backward pass, and the
memory of the published Megatron-Bridge runs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shardwise import presets
from shardwise.engines.moe import experts_parts
from shardwise.engines.training import estimate_training_step, training_memory
from shardwise.errors import SpecError
from shardwise.physics import moe as pm
from shardwise.physics.collectives import Fabric
from shardwise.physics.kernels import memory_s
from shardwise.physics.memory_activations import routed_expert_activation_bytes
from shardwise.specs import Recompute, Scenario

OSS = presets.model("gpt-oss-120b")


def _config(tmp_path, **extra) -> str:
    cfg = {
        "model_type": "gpt_oss",
        "num_hidden_layers": 24,
        "hidden_size": 2880,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "intermediate_size": 2880,
        "vocab_size": 201088,
        "max_position_embeddings": 131072,
        "num_local_experts": 32,
        "experts_per_token": 4,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-05,
        "attention_bias": True,
        "tie_word_embeddings": False,
        **extra,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return str(path)


def test_the_clamp_is_read_from_swiglu_limit(tmp_path):
    """openai/gpt-oss-20b's config.json: swiglu_limit 7.0; a config without it clamps nothing."""
    assert presets.model(_config(tmp_path, swiglu_limit=7.0)).glu_clamp
    assert not presets.model(_config(tmp_path)).glu_clamp
    assert not presets.model(_config(tmp_path, swiglu_limit=None)).glu_clamp
    with pytest.raises(SpecError, match="swiglu_limit"):
        presets.model(_config(tmp_path, swiglu_limit="7"))
    assert OSS.glu_clamp and presets.model("gpt-oss-20b").glu_clamp
    assert not presets.model("qwen3-30b-a3b").glu_clamp


def test_the_clamp_and_the_output_bias_move_these_bytes():
    """By hand: c routed copies, the clamp 4 passes over c x 2f forward and 3.5 backward, the bias
    6 passes over c x h forward and 8 backward, in 16 bits; kernels 3 + 2 per local expert + 1."""
    tokens, ep = 16384, 8
    ef = pm.experts_forward(OSS, tokens, ep, 1, 2.0)
    c = ef.up.m * ef.up.batch  # the copies reaching the busiest rank
    f, h = OSS.expert_ffn_hidden, OSS.hidden
    assert ef.clamp_bytes == pytest.approx(4.0 * 2 * c * 2 * f)
    assert ef.eager_bytes == pytest.approx(4.0 * 2 * c * 2 * f + 6.0 * 2 * c * h)
    assert ef.eager_backward_bytes == pytest.approx(3.5 * 2 * c * 2 * f + 8.0 * 2 * c * h)
    assert ef.eager_kernels == pytest.approx(3 + 2 * ef.up.batch + 1)
    plain = pm.experts_forward(OSS.with_(glu_clamp=False, bias=False), tokens, ep, 1, 2.0)
    assert plain.eager_bytes == plain.eager_backward_bytes == plain.eager_kernels == 0
    assert pm.experts_forward(presets.model("qwen3-30b-a3b"), tokens, ep, 1, 2.0).eager_bytes == 0


def _published(run_id: str) -> Scenario:
    """The scenario of a public run (its recipe's layout, recomputation and overlap)."""
    from shardwise.analyses import public_moe, public_validation

    row = next(r for r in public_validation.raw_rows() if r["id"] == run_id)
    return public_validation.scenario_for(public_moe.resolved(row))


@pytest.mark.parametrize("run_id", ["PUB-0138", "PUB-0141"])  # GB300 (nothing recomputed), B200 (moe_act)
def test_the_eager_kernels_add_their_time_to_the_layer_and_moe_act_reruns_the_clamp(run_id):
    scn = _published(run_id)
    cluster, plan = scn.cluster, scn.plan
    fabric = Fabric(cluster.intra_node_link, cluster.inter_node_link)
    place = {"ep": min(plan.ep, cluster.gpus_per_node), "etp": 1, "tp": 1}
    models = (OSS, OSS.with_(glu_clamp=False, bias=False))
    oss, plain = (experts_parts(Scenario(m, cluster, plan), fabric, place, training=True)[0] for m in models)
    served = [experts_parts(Scenario(m, cluster, plan), fabric, place)[0].compute_forward_s for m in models]
    assert served[0] == pytest.approx(served[1])  # serving engines fuse the clamp and the bias
    ef = pm.experts_forward(OSS, 16384, plan.ep, 1, 2.0, plan.expert_imbalance)
    gpu = cluster.gpu
    moe_act = plan.recompute == Recompute.SELECTIVE and "moe_act" in plan.recompute_modules
    assert moe_act == (run_id == "PUB-0141")
    redo = memory_s(ef.clamp_bytes, gpu, pm.CLAMP_FORWARD_KERNELS) if moe_act else 0.0
    eager_f = memory_s(ef.eager_bytes, gpu, ef.eager_kernels)
    eager_b = memory_s(ef.eager_backward_bytes, gpu, ef.eager_backward_kernels) + redo
    assert float(oss.compute_forward_s - plain.compute_forward_s) == pytest.approx(float(eager_f), rel=1e-6)
    assert float(oss.compute_backward_s - plain.compute_backward_s) == pytest.approx(float(eager_b), rel=1e-6)


def test_routed_experts_keep_what_te_grouped_mlp_saves():
    """Per routed copy: the up-projection's input (h), its output (2f) and the activation's output
    (f); GPT-OSS's clamp keeps its clamped copy (2f more); moe_act frees the activation's output and
    the clamp's copy; fp32 router probabilities per token and expert; full recomputation nothing."""
    tokens, e = 16384.0, 2.0
    c = tokens * OSS.experts_per_token
    h, f = OSS.hidden, OSS.expert_ffn_hidden
    probs = 4.0 * tokens * OSS.experts
    plain = OSS.with_(glu_clamp=False)
    assert routed_expert_activation_bytes(plain, tokens, 1, 1.0, e, Recompute.NONE) == pytest.approx(
        e * c * (h + 3 * f) + probs
    )
    assert routed_expert_activation_bytes(OSS, tokens, 1, 1.0, e, Recompute.NONE) == pytest.approx(
        e * c * (h + 5 * f) + probs
    )
    for model in (OSS, plain):
        kept = routed_expert_activation_bytes(model, tokens, 1, 1.0, e, Recompute.SELECTIVE, ("moe_act",))
        assert kept == pytest.approx(e * c * (h + 2 * f) + probs)
        assert routed_expert_activation_bytes(model, tokens, 1, 1.0, e, Recompute.FULL) == 0.0
    # expert tensor parallelism gathers the inputs, splits the FFN columns
    assert routed_expert_activation_bytes(plain, tokens, 4, 1.0, e, Recompute.NONE) == pytest.approx(
        e * c * (4 * h + 3 * f) + probs
    )


def _b200(**changes) -> Scenario:
    """Megatron-Bridge 26.04's GPT-OSS-120B on 64 B200 (PUB-0141), with `changes` to its plan."""
    scn = _published("PUB-0141")
    return Scenario(scn.model, scn.cluster, scn.plan.with_(**changes))


def test_layernorm_recomputation_drops_an_moe_layers_pre_mlp_norm_output():
    """Megatron-Core's MoE layers norm the router's input with a TENorm apart; recomputing
    "layernorm" frees its output, s b h 16-bit elements a layer (tp 1)."""
    off = training_memory(_b200(recompute_modules=("moe_act",)))
    on = training_memory(_b200())
    freed = OSS.layers * 2.0 * OSS.seq_len * 4 * OSS.hidden
    assert float(off.activations_bytes - on.activations_bytes) == pytest.approx(freed, rel=0.02)


def test_the_overlapped_all_to_alls_hold_one_more_layer_without_a_pipeline():
    """combined_1f1b_schedule_for_no_pipelining: the next micro-batch's forward of layer i runs
    beside the backward of layer L - 1 - i, which is then released: one layer more, not a second
    micro-batch's whole model."""
    plain, paired = training_memory(_b200()), training_memory(_b200(moe_overlap=True))
    assert _b200().plan.pp == 1 and _b200().plan.num_micro_batches > 1
    extra = float(paired.activations_bytes - plain.activations_bytes)
    per_layer = float(plain.activations_bytes) / OSS.layers  # about one layer's (the logits aside)
    assert 0.0 < extra < 1.5 * per_layer


def test_the_published_b200_run_fits_in_memory():
    """Megatron-Bridge 26.04 ran GPT-OSS-120B on 64 B200 (EP 8, 4 sequences a micro-batch, layernorm
    and moe_act recomputed: scripts/performance/configs/gpt_oss/gpt_oss_workload_base_configs.py,
    GPT_OSS_120B_PRETRAIN_CONFIG_B200_BF16_V2 at v0.4.0); it was called out of memory at 213 GB of
    178 while the routed experts kept copies Megatron-Core does not and moe_act freed nothing."""
    scn = _b200()
    assert scn.plan.recompute_modules == ("layernorm", "moe_act") and scn.plan.ep == 8
    est = estimate_training_step(scn)
    assert float(np.asarray(est.memory.total_bytes)) < float(scn.cluster.gpu.memory_bytes)
    assert float(np.asarray(est.memory.total_bytes)) > 0.8 * float(scn.cluster.gpu.memory_bytes)
