"""Review 41 #5: FSDP2 at ZeRO-2 (reshard_after_forward False) reduce-scatters unit by unit in every
backward it syncs, as at ZeRO-3: torch's `foreach_reduce` allocates each unit's reduce-scatter input
at the reduce dtype beside the unit's unsharded 16-bit gradients. Those buffers are counted at ZeRO-2
under FSDP2 too (they were 0 there); a stack without FSDP2 keeps none at ZeRO-2."""

from __future__ import annotations

import pytest

from shardwise import presets
from shardwise.engines.training_buffers import zero3_buffers
from shardwise.physics.memory import stack_memory
from shardwise.requests.training import TrainingRequest

BASE = "--model llama3.1-8b --seq-len 4096 --system dgx-h100 --nodes 1 --global-batch 256 --tp 1 --micro-batch 1"


def _reduce_bytes(framework: str, zero: int) -> float:
    scn = TrainingRequest.from_argv(f"{BASE} --framework {framework} --zero {zero}").scenario()
    return float(zero3_buffers(scn.model, scn.plan, stack_memory(framework), False)[1])


@pytest.mark.parametrize("framework", ["torchtitan", "fsdp2"])
def test_fsdp2_zero2_holds_the_reduce_scatter_buffers_of_zero3(framework):
    z2, z3 = _reduce_bytes(framework, 2), _reduce_bytes(framework, 3)
    assert z2 > 0 and z2 == pytest.approx(z3)
    # the largest unit is the output matrix (FSDP wraps it on its own): vocab x hidden at the stack's bytes
    m = presets.model("llama3.1-8b")
    assert z2 == pytest.approx(stack_memory(framework).zero3_reduce_bytes_per_param * m.vocab * m.hidden)


def test_deepspeed_zero2_keeps_its_buckets_not_fsdp_units():
    assert _reduce_bytes("deepspeed", 2) == 0.0
