"""torchtitan's mixture-of-experts memory: what its op-level selective checkpointing keeps of the routed
experts, its fp32 score multiply, and a loss compiled alone (torchtitan issue #1789 and PR #1993)."""

from __future__ import annotations

import numpy as np
import pytest

from shardwise import presets
from shardwise.engines.training import training_memory
from shardwise.physics import memory as mem
from shardwise.physics.memory_activations import op_sac_routed_bytes
from shardwise.requests.training import TrainingRequest
from shardwise.specs.plan import Recompute

GIB = 2**30
# torchtitan's DeepSeek-V3 16B flavor: Moonlight-16B's shape with its vocabulary and dense width
DSV3_16B = {"vocab": 102400, "ffn_hidden": 10944}


def _gib(mbs: int, ep: int, recompute: str, framework: str = "torchtitan", **plan: object) -> dict[str, float]:
    model = presets.model("moonlight-16b", **DSV3_16B).with_(seq_len=4096)
    request = TrainingRequest(
        system="dgx-h100", gpus_per_node=8, nodes=1, tp=1, pp=1, dp=8, ep=ep, micro_batch=mbs,
        global_batch=8 * mbs, recompute=recompute, zero=3, precision="bf16", framework=framework, **plan,
    )  # fmt: skip
    memory = training_memory(request.build(model).scenario)
    return {k: float(np.asarray(v)) / GIB for k, v in memory.as_dict().items()}


def test_op_sac_keeps_only_the_all_to_all_outputs_of_the_routed_experts():
    """The save list names the functional all-to-all (two h-wide outputs per copy) and topk, not the
    grouped GEMMs: only topk at ep 1, or where the all-to-all is no functional collective."""
    model = presets.model("moonlight-16b", **DSV3_16B)
    copies = 4096 * 6
    topk = 12.0 * copies
    assert float(op_sac_routed_bytes(model, 4096, 1.0, 2.0, 8, True)) == 2 * 2.0 * 2048 * copies + topk
    assert float(op_sac_routed_bytes(model, 4096, 1.0, 2.0, 1, True)) == topk
    assert float(op_sac_routed_bytes(model, 4096, 1.0, 2.0, 8, False)) == topk
    kw = {"model": model, "tokens": 4096, "etp": 1, "imbalance": 1.0, "bytes_per_element": 2.0}
    megatron = mem.routed_expert_activation_bytes(**kw, recompute=Recompute.SELECTIVE)
    assert float(op_sac_routed_bytes(model, 4096, 1.0, 2.0, 8, True)) < float(megatron)


def test_the_score_multiply_keeps_an_fp32_copy_eager_and_the_expert_output_compiled():
    """torchtitan multiplies the scores in fp32 after the experts (DeepSeek-V3, Qwen3) or before (Llama 4)."""
    assert mem.moe_score_copy_bytes("torchtitan", "deepseek_v3") == 4.0
    assert mem.moe_score_copy_bytes("torchtitan", "llama4") == 4.0
    assert mem.moe_score_copy_bytes("torchtitan-compile", "qwen3_moe") == 2.0
    assert mem.moe_score_copy_bytes("torchtitan-compile", "llama4") == 0.0
    assert mem.moe_score_copy_bytes("megatron-core", "deepseek_v3") == 0.0
    model = presets.model("moonlight-16b", **DSV3_16B)
    kw = {"model": model, "tokens": 4096, "etp": 1, "imbalance": 1.0, "bytes_per_element": 2.0}
    plain = mem.routed_expert_activation_bytes(**kw, recompute=Recompute.NONE)
    scored = mem.routed_expert_activation_bytes(**kw, recompute=Recompute.NONE, score_copy_bytes=2.0)
    assert float(scored - plain) == pytest.approx(2.0 * 2048 * 4096 * 6)
    # the engine applies it: torchtitan-compile at batch 4, 26 MoE layers of 16384 x 6 copies
    after = _gib(4, 1, "none", "torchtitan-compile")["activations"]
    scores_first = presets.model("moonlight-16b", **DSV3_16B).with_(seq_len=4096, architecture="llama4")
    request = TrainingRequest(
        system="dgx-h100", gpus_per_node=8, nodes=1, tp=1, pp=1, dp=8, ep=1, micro_batch=4, global_batch=32,
        recompute="none", zero=3, precision="bf16", framework="torchtitan-compile",
    )  # fmt: skip
    before = float(np.asarray(training_memory(request.build(scores_first).scenario).as_dict()["activations"])) / GIB
    assert after - before == pytest.approx(2.0 * 2048 * 4 * 4096 * 6 * 26 / GIB, rel=0.01)


def test_issue_1789_fits_at_batch_4_and_runs_out_at_8():
    """8 H100 (79.11 GiB), FSDP 8, EP 8, per-op SAC, the loss compiled alone: batch 8 ran out of memory,
    batch 4 logged 73.32 GiB reserved; EP 1 at batch 8 ran at 'almost 96%'."""
    run = {"loss_kernel": "compiled", "functional_a2a": True}  # torchtitan of 2025-10, before #4085
    fits = _gib(4, 8, "selective", **run)
    assert fits["total"] < 79.11 and fits["total"] == pytest.approx(73.32, rel=0.05)
    assert _gib(8, 8, "selective", **run)["total"] > 79.11
    assert 0.9 * 79.11 < _gib(8, 1, "selective", **run)["total"] < 79.11


def test_a_loss_compiled_alone_keeps_six_bytes_a_logit():
    eager, compiled = mem.stack_memory("torchtitan"), mem.stack_memory("torchtitan", "compiled")
    assert (eager.logits_bytes_per_element, compiled.logits_bytes_per_element) == (12.0, 6.0)
    assert compiled.saved_logits_bytes_per_element == eager.saved_logits_bytes_per_element
    saved = _gib(4, 8, "selective")["total"] - _gib(4, 8, "selective", loss_kernel="compiled")["total"]
    assert saved == pytest.approx(6.0 * 4 * 4096 * 102400 / GIB, rel=0.01)
