"""Unaligned GEMM dimensions under a cuBLAS before 11.0 (`Plan.cublas_before_11`, `physics.gemm_align`)."""

from __future__ import annotations

import dataclasses

import numpy as np

from shardwise import presets
from shardwise.analyses.search_space import stack_execution
from shardwise.engines.training import estimate_training_step
from shardwise.physics.gemm_align import CUDA_CORE_SHARE, on_cuda_cores, tensor_core_aligned
from shardwise.physics.layer_parts import gemm
from shardwise.physics.linears import linear_times
from shardwise.specs import Plan, Scenario

V100 = presets.gpu("v100-sxm2-32gb")


def test_a_dimension_is_aligned_at_16_bytes_of_its_operands():
    assert bool(tensor_core_aligned(8192, 50304, 768, 2.0))  # Megatron's GPT-2 vocabulary, padded to 128
    assert not bool(tensor_core_aligned(8192, 50257, 768, 2.0))  # Hugging Face's, not padded
    assert not bool(tensor_core_aligned(8192, 50304 / 2 + 4, 768, 2.0))  # a share of a split dimension
    assert not bool(tensor_core_aligned(8192, 4096, 1004, 2.0))  # K counts too
    assert bool(tensor_core_aligned(8192, 4096, 1004, 4.0))  # 32-bit operands: 4 elements
    assert not bool(tensor_core_aligned(8192, 4096, 8, 1.0))  # 8-bit operands: 16 elements
    got = tensor_core_aligned(np.array([8.0, 12.0, 16.0]), 64, 64, 2.0)
    assert got.tolist() == [True, False, True]


def test_only_a_library_before_cublas_11_leaves_the_tensor_cores():
    assert bool(on_cuda_cores(8192, 50257, 768, 2.0, True))
    assert not bool(on_cuda_cores(8192, 50257, 768, 2.0, False))  # cuBLAS 11: tensor cores, loss not priced
    assert not bool(on_cuda_cores(8192, 50304, 768, 2.0, True))


def test_an_unaligned_linear_runs_all_three_gemms_at_the_cuda_cores_rate():
    """GPT-2 small's LM head at 8 x 1024 tokens: compute-bound, so nearly 1 / CUDA_CORE_SHARE slower (the
    launch gap and the kernel's fixed time do not scale)."""
    head = gemm(8 * 1024, 50257, 768, 2.0)
    tc = linear_times(head, V100, "fp16")
    cores = linear_times(head, V100, "fp16", cublas_before_11=True)
    for a, b in zip(dataclasses.astuple(tc), dataclasses.astuple(cores), strict=True):
        assert 0.85 / CUDA_CORE_SHARE < b / a <= 1.0 / CUDA_CORE_SHARE
    padded = gemm(8 * 1024, 50304, 768, 2.0)
    assert linear_times(padded, V100, "fp16", cublas_before_11=True) == linear_times(padded, V100, "fp16")


def _gpt2(model: str = "gpt2-124m", **over: object) -> Scenario:
    """GPT-2 at micro-batch 8 on a DGX-2's 16 V100s, ZeRO-1, fp16 (DeepSpeedExamples' autotuning rows)."""
    fw = stack_execution("deepspeed", {}, "fp16")
    fw.update(over)
    plan = Plan(dp=16, global_batch=128, micro_batch=8, zero_stage=1, precision="fp16", flash_attention=False, **fw)
    return Scenario(presets.model(model), presets.system("dgx-2", nodes=1), plan)


def test_gpt2s_head_alone_moves_the_step_and_an_aligned_model_does_not():
    off, on = _gpt2(), _gpt2(cublas_before_11=True)
    assert float(estimate_training_step(on).step_time_s) > 1.3 * float(estimate_training_step(off).step_time_s)
    aligned = presets.model("gpt2-124m").__class__(**{**dataclasses.asdict(off.model), "vocab": 50304})
    a_off = dataclasses.replace(off, model=aligned)
    a_on = dataclasses.replace(on, model=aligned)
    assert estimate_training_step(a_on).step_time_s == estimate_training_step(a_off).step_time_s


def test_no_public_row_runs_a_cublas_before_11():
    """The autotuning rows' CUDA is not stated; DeepSpeed's V100 CI of the time ran torch 1.8.2+cu111."""
    from shardwise.analyses import public_stacks
    from shardwise.analyses.public_runs import raw_rows, skip_reason

    rows = [r for r in raw_rows() if not skip_reason(r)]
    assert rows and not any(public_stacks.execution(r)[1].get("cublas_before_11") for r in rows)


def test_cublas_before_11_is_refused_where_no_such_cublas_runs(cli):
    """A cuBLAS before 11.0 runs on Volta and Turing at most (review 46 #2): one line, exit 2, elsewhere."""
    args = ["predict", "--model", "gpt2-xl", "--global-batch", "16", "--cublas-before-11"]
    code, _, err = cli([*args, "--system", "dgx-h100"])
    assert code == 2 and "runs on Volta and Turing GPUs at most, not on h100-sxm5-80gb" in err
    assert len(err.strip().splitlines()) == 1
    code, _, err = cli([*args, "--system", "dgx-1-v100"])
    assert code == 0, err
