"""What a stack's optimizer step copies (InternEvo's HybridZeroOptimizer), the gradients' dtype a
stack keeps whatever the plan says, and NCCL's NVLink SHARP buffers of communicators that span
servers."""

import pytest

from shardwise.engines.training_memory import stage_buffers
from shardwise.engines.training_states import stage_states
from shardwise.physics.memory import stack_memory
from shardwise.physics.memory_runtime import (
    NCCL_CHANNELS,
    NCCL_CONNECTION_BYTES,
    NVLS_BUFFER_BYTES,
    NVLS_CHANNELS,
    communicator_bytes,
    local_ranks,
)
from shardwise.specs import Plan


def test_internevo_keeps_16_bit_gradients_whatever_the_plans_reduction():
    n = 1e9
    params = (n, n, n)
    none = (0.0, 0.0, 0.0)
    evo = stage_states(Plan(dp=1, global_batch=4, framework="internevo"), params, none)
    mega = stage_states(Plan(dp=1, global_batch=4, framework="megatron-core"), params, none)
    # autograd's 16-bit .grad accumulated over the micro-batches (2 B) against Megatron's fp32 main_grad (4 B)
    assert evo[0][1] == pytest.approx(2 * n) and mega[0][1] == pytest.approx(4 * n)
    assert evo[0][0] == mega[0][0] and evo[0][2] == mega[0][2]  # weights and Adam state alike
    # sharded by ZeRO-2 and ZeRO-3 as before
    z3 = stage_states(Plan(dp=4, global_batch=4, zero_stage=3, framework="internevo"), params, none)
    assert z3[0][1] == pytest.approx(2 * n / 4)


def test_internevo_step_holds_the_fp32_gradient_beside_unfused_adamws_temporaries():
    from shardwise.physics.memory_stacks import INTERNEVO_STEP_BYTES_PER_PARAM, UNFUSED_ADAMW_TEMP_BYTES_PER_PARAM

    evo = stack_memory("internevo")
    # torch <= 2.0's AdamW builds sqrt(v) and the out-of-place + eps over the whole flat shard (8 B)
    # while the fp32 gradient (4 B) is the master's .grad
    assert UNFUSED_ADAMW_TEMP_BYTES_PER_PARAM == 8.0 and INTERNEVO_STEP_BYTES_PER_PARAM == 12.0
    assert evo.optimizer_step_bytes_per_param == 12.0 and evo.step_frees_grads
    n, acts = 1e9, 1e9
    dp1 = Plan(dp=1, global_batch=4, zero_stage=1, framework="internevo")
    # HybridZeroOptimizer: the 16-bit gradients (2 B, in the model state) are freed before AdamW runs
    assert stage_buffers(dp1, evo, n, acts) == pytest.approx((12 - 2) * n - acts)
    assert stage_buffers(dp1, evo, n, 12 * n) == 0.0  # activations larger: the step adds nothing
    # ZeRO-1 over 4 ranks: each steps its quarter (3 B) after every 16-bit gradient (2 B) is gone
    dp4 = Plan(dp=4, global_batch=4, zero_stage=1, framework="internevo")
    assert stage_buffers(dp4, evo, n, 0.0) == pytest.approx(1 * n)
    dp8 = Plan(dp=8, global_batch=8, zero_stage=1, framework="internevo")
    assert stage_buffers(dp8, evo, n, 0.0) == 0.0  # 1.5 B < 2 B freed: the step is not the peak
    # the FSDP path (ZeRO-3) keeps its sharded 16-bit gradients through the step: all 12 B / dp added
    z3 = Plan(dp=4, global_batch=4, zero_stage=3, framework="internevo")
    assert stage_buffers(z3, evo, n, 0.0) == pytest.approx(12 * n / 4)
    # Megatron-Core's distributed optimizer steps in place
    assert stage_buffers(dp4, stack_memory("megatron-core"), n, 0.0) == 0.0


def test_nvls_buffers_count_the_communicators_ranks_in_each_server():
    ring = NCCL_CHANNELS * NCCL_CONNECTION_BYTES
    head = NVLS_CHANNELS * 2 * NVLS_BUFFER_BYTES  # 32 MiB a head
    assert head == 32 * 2**20

    def local(size, span):
        return float(local_ranks(size, span, 8))

    # inside one server: every rank; 16 ranks over two servers (tp 1): 8 in each; data parallelism
    # over 4 servers with tp 2 beneath it: 4 in each; tp 4 beneath: 2; tp 8: 1
    assert [local(8, 8), local(16, 16), local(16, 32), local(8, 32), local(4, 32)] == [8, 8, 4, 2, 1]
    assert communicator_bytes(8, 8, True) == pytest.approx(ring + 8 * head)
    assert communicator_bytes(16, local(16, 16), True) == pytest.approx(ring + 8 * head)  # spans servers
    assert communicator_bytes(16, local(16, 32), True) == pytest.approx(ring + 4 * head)
    assert communicator_bytes(8, local(8, 32), True) == pytest.approx(ring)  # 2 a server: too few for NVLS
    assert communicator_bytes(16, 8, False) == pytest.approx(ring)  # NVLS off
    assert communicator_bytes(1, 1, True) == 0.0


def test_nanotron_runs_the_nvls_buffers_of_its_nccl_2_18():
    from shardwise import presets
    from shardwise.engines.training import training_memory, training_memory_floor_bytes
    from shardwise.physics.memory_runtime import NVLS_HEAD_BYTES, NVLS_HEAD_BYTES_NCCL_2_18, RUNTIME_FLOOR_BYTES
    from shardwise.specs import Scenario

    # NCCL 2.18.1 nvls.cc: 16 channels x 2 x (NCCL_BUFFSIZE 4 MiB + NVLS_MEM_ALIGN_SIZE 2 MiB) a head
    assert NVLS_HEAD_BYTES == 32 * 2**20 and NVLS_HEAD_BYTES_NCCL_2_18 == 192 * 2**20
    assert stack_memory("nanotron").nvls_head_bytes == NVLS_HEAD_BYTES_NCCL_2_18
    assert stack_memory("megatron-core").nvls_head_bytes is None
    assert stack_memory("nanotron").nccl_tree_at_init and not stack_memory("megatron-core").nccl_tree_at_init
    ring = NCCL_CHANNELS * NCCL_CONNECTION_BYTES
    model, system = presets.model("llama3-8b"), presets.system("dgx-h100")
    for framework, head in (("nanotron", NVLS_HEAD_BYTES_NCCL_2_18), ("megatron-core", NVLS_HEAD_BYTES)):
        scn = Scenario(model, system, Plan(tp=8, global_batch=8, framework=framework))
        memory = training_memory(scn)
        # the tp communicator, 8 heads in one server; nanotron's also the default group's and
        # world_pg's over every rank (its local_pg is the tp group, the same 8 ranks), each with
        # its tree connected beside the ring (NCCL 2.18.1)
        groups, connections = (3, 2) if framework == "nanotron" else (1, 1)
        expected = RUNTIME_FLOOR_BYTES + groups * (connections * ring + 8 * head)
        assert float(memory.reserved_bytes) == pytest.approx(expected)
        # the planner's floor counts the same reserve, and stays under the total
        floor = float(training_memory_floor_bytes(scn))
        assert float(memory.reserved_bytes) < floor <= float(memory.total_bytes)


def test_nanotron_pipeline_pairs_and_the_tied_embeddings_group():
    """With pp > 1 a nanotron rank also holds the two-rank communicator PyTorch makes for its
    pipeline neighbour's sends, and with tied embeddings the first and last stages' group: one
    ring's buffers each; untied, the tied group goes; at pp 1 neither exists."""
    from dataclasses import replace

    from shardwise import presets
    from shardwise.engines.training_memory import runtime_reserve_bytes
    from shardwise.specs import Scenario

    ring = NCCL_CHANNELS * NCCL_CONNECTION_BYTES
    tied = presets.model("llama3.2-1b")  # tie_word_embeddings true (review 41)
    untied = replace(tied, tied_embeddings=False)
    system = presets.system("dgx-h100")

    def reserve(model, pp):
        plan = Plan(tp=2, pp=pp, dp=8 // (2 * pp), global_batch=64, micro_batch=1, framework="nanotron")
        return float(runtime_reserve_bytes(Scenario(model, system, plan)))

    assert reserve(tied, 2) - reserve(untied, 2) == pytest.approx(ring)
    assert reserve(tied, 1) == pytest.approx(reserve(untied, 1))
