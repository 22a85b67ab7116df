"""What Hugging Face Transformers' eager GPT-2 moves beyond the priced eager stack (`Plan.hf_gpt2_ops`).

The code read: huggingface/transformers v4.12.0 (2021-10-29; the release DeepSpeedExamples'
autotuning/hf examples name, 2467552b) `src/transformers/models/gpt2/modeling_gpt2.py` and
`src/transformers/activations.py`, with PyTorch 1.x autograd's backward of each op. DeepSpeed's
fp16 engine runs the model in half precision (`model.half()`), so every tensor below is 16-bit (e
bytes per element); dropout masks are one byte per element (ATen `_fused_dropout`'s uint8 mask).

The materialised attention core, `GPT2Attention._attn` (v4.12.0): `torch.matmul(q, k^T)`, then five
element-wise passes over the b x a x s x s scores, each its own kernel, where Megatron's fused path
(priced for unfused attention: `physics.layer_parts.softmax_traffic_bytes`, 4e + 1 forward and twice
that backward) runs two:

=====================================================  =============  ===============
op                                                     forward bytes  backward bytes
=====================================================  =============  ===============
`attn_weights / (value.size(-1) ** 0.5)`               2e             2e (DivBackward)
`torch.where(causal_mask, attn_weights, masked_bias)`  2e             2e (where(mask, g, 0))
`attn_weights + attention_mask` (run_clm.py's batches  2e             0 (the mask takes no
carry attention_mask: GPT2Model makes it (b,1,1,s))                   gradient: passed on)
`nn.Softmax(dim=-1)`                                   2e             3e (_softmax_backward_data)
`self.attn_dropout`                                    2e + 1         2e + 1
total                                                  10e + 1        9e + 1
priced (fused scale-mask-softmax and dropout)          4e + 1         8e + 2
=====================================================  =============  ===============

The causal mask's bool slice of the (1, 1, 1024, 1024) `bias` buffer is 1 MiB, read from cache: not
counted. Beyond the priced path: 6e forward in 3 more kernels; e - 1 backward in 2 more.

The MLP's activation, `gelu_new` (activations.py v4.12.0, a Python function, ACT2FN["gelu_new"]):
`0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))`, eight
ATen kernels on the T x 4h output: pow 2e, mul 2e, add 3e, mul 2e, tanh 2e, add 2e, mul (0.5 x) 2e,
mul 3e = 18e forward. Backward: the last mul's two products (3e + 3e), MulBackward of 0.5 x (2e),
TanhBackward (3e), the two scalar muls (2e + 2e), PowBackward (`grad * 3 * x.pow(2)`: 2e + 2e + 3e),
the adds (pass the gradient on) and autograd's sum of x's three gradients (two adds, 3e + 3e): 28e in
12 kernels. The eager stack prices a plain activation as one kernel (2e forward, 4e backward:
`physics.layer_parts.block_elementwise_parts`, `physics.compute.BACKWARD_MEMORY_RATIO`): 16e more
forward in 7 more kernels, 24e more backward in 10 more.

The linears, `Conv1D.forward` (modeling_utils.py v4.12.0): `torch.addmm(self.bias, x, self.weight)`.
ATen's CUDA addmm with a 1-D `self` copies the broadcast bias into the output (`copy_`, write e) and
runs the GEMM with beta 1 (read e more): 2e per output element of the four linears (c_attn 3h,
attn c_proj h, mlp c_fc 4h, mlp c_proj h), one kernel each. The bias gradient's row sum is every
biased linear's, the fused stacks' too: not counted here.

The residual branch, `GPT2Block.forward`: `attn_output = self.resid_dropout(self.c_proj(...))` then
`hidden_states = attn_output + residual` (the MLP's alike): a dropout (2e + 1) and an add (3e) apart
where the priced eager stack counts one fused dropout-add (3e + 1): 2e more per hidden element and one
more kernel, twice a layer, forward (backward: the add passes the gradient on; the dropout's backward
is the priced one).

The step the rows' Trainer and DeepSpeed 0.5's ZeRO-1 run (`Plan.optimizer_step_bytes`, bytes per
parameter of the rank's partition; their DeepSpeed config names no optimizer, so transformers 4.12's
`deepspeed_init` calls `trainer.create_optimizer()`: transformers' own `AdamW`, a Python loop over the
partition's flat fp32 tensors, and DeepSpeed wraps it; deepspeedai/DeepSpeed 7567c76c stage2.py `step`):

=========================================================================  ===================
pass (code)                                                                bytes per parameter
=========================================================================  ===================
`has_overflow_partitioned_grads_serial`: `float(x.float().sum())`           2 + 4 + 4 = 10
`get_grad_norm_direct`: `g.data.double().norm(2)`                          2 + 8 + 8 = 18
`flatten(averaged_gradients).to(fp32)`                                     2 + 2 + 2 + 4 = 10
`unscale_and_clip_grads`: `grad.data.mul_(1 / scale)`                      4 + 4 = 8
AdamW (optimization.py v4.12.0): `exp_avg.mul_(b1).add_(grad)` 8 + 12,     72
`exp_avg_sq.mul_(b2).addcmul_(grad, grad)` 8 + 12 (grad read once),
`exp_avg_sq.sqrt().add_(eps)` 8 + 8, `p.addcdiv_(exp_avg, denom)` 16;
no weight decay (TrainingArguments' default 0.0)
the fp32 partition copied into the fp16 one                                4 + 2 = 6
total                                                                      124
=========================================================================  ===================

Against the fused step's 48 (`engines.training_layout.OPTIMIZER_TRAFFIC_BYTES_PER_PARAM`). Not priced:
the two host syncs per gradient tensor of the partition (the overflow check's `float`, the norm's
`.item()`, tens of microseconds each) and torch.distributed's list all-gather, which gathers into a
flat buffer and copies each rank's shard out (4 bytes per parameter of the whole model).
"""

from __future__ import annotations

import numpy as np

from shardwise.physics.kernels import memory_s
from shardwise.physics.layer_parts import LayerForward
from shardwise.specs import Gpu, Model, Plan
from shardwise.specs._checks import Number

# bytes per score element beyond the priced fused path's, as multiples of e and in bytes (table above)
SCORE_EXTRA_E = (6.0, 1.0)  # forward 6e; backward e - 1
SCORE_EXTRA_BYTES = (0.0, -1.0)
SCORE_EXTRA_KERNELS = (3, 2)
GELU_NEW_EXTRA_E = (16.0, 24.0)  # per element of the MLP's T x 4h output
GELU_NEW_EXTRA_KERNELS = (7, 10)
ADDMM_BIAS_COPY_E = 2.0  # per output element of each linear, forward
ADDMM_LINEARS = 4
RESIDUAL_EXTRA_E = 2.0  # per hidden element of each of the two residual branches, forward
RESIDUAL_BRANCHES = 2
# the Trainer + DeepSpeed 0.5 ZeRO-1 optimizer step, bytes per parameter of the partition (table above)
HF_TRAINER_ZERO1_STEP_BYTES = 10.0 + 18.0 + 10.0 + 8.0 + 72.0 + 6.0
# What gelu_new keeps for its backward pass (autograd of the chain above, PyTorch 1.x): TanhBackward0 its
# output, the last MulBackward0 both operands (`0.5 * x` and `1.0 + tanh(...)`), PowBackward0 x, the
# up-projection's output the inventory holds already; the scalar multiplies and adds keep nothing. Three
# T x f tensors at the 16-bit width beyond a fused activation's, which keeps its input alone
# (`physics.memory_activations.layer_activation_bytes`): memory, where `Plan.hf_gpt2_ops`
GELU_NEW_SAVED_WIDTHS = 3.0


def hf_gpt2_extra_bytes(
    score_elements: Number,
    mlp_elements: Number,
    linear_outputs: Number,
    hidden_elements: Number,
    e: float,
    materialised: Number,
) -> tuple[tuple[Number, Number], tuple[Number, Number]]:
    """((forward, backward) bytes, (forward, backward) kernels) one layer of transformers v4.12's
    eager GPT-2 moves on one GPU beyond the priced eager stack (table above): `score_elements` of the
    attention scores (b x a x s x s, counted where `materialised`, i.e. no flash kernel),
    `mlp_elements` through gelu_new (T x 4h), `linear_outputs` elements out of the four Conv1D
    linears (T x 9h) and `hidden_elements` in each residual branch (T x h)."""
    scores = np.asarray(materialised, dtype=bool)
    f_bytes = (
        np.where(scores, (SCORE_EXTRA_E[0] * e + SCORE_EXTRA_BYTES[0]) * score_elements, 0.0)
        + GELU_NEW_EXTRA_E[0] * e * mlp_elements
        + ADDMM_BIAS_COPY_E * e * linear_outputs
        + RESIDUAL_BRANCHES * RESIDUAL_EXTRA_E * e * hidden_elements
    )
    b_bytes = (
        np.where(scores, (SCORE_EXTRA_E[1] * e + SCORE_EXTRA_BYTES[1]) * score_elements, 0.0)
        + GELU_NEW_EXTRA_E[1] * e * mlp_elements
    )
    f_kernels = (
        np.where(scores, SCORE_EXTRA_KERNELS[0], 0) + GELU_NEW_EXTRA_KERNELS[0] + ADDMM_LINEARS + RESIDUAL_BRANCHES
    )
    b_kernels = np.where(scores, SCORE_EXTRA_KERNELS[1], 0) + GELU_NEW_EXTRA_KERNELS[1]
    return (f_bytes, b_bytes), (f_kernels, b_kernels)


def hf_gpt2_extra_s(fwd: LayerForward, gpu: Gpu, plan: Plan) -> tuple[Number, Number]:
    """(forward, backward) seconds of `hf_gpt2_extra_bytes` for one layer's forward `fwd` on `gpu`
    where `plan.hf_gpt2_ops` (0 elsewhere); the scores' passes where `plan.flash_attention` is off."""
    on = np.asarray(plan.hf_gpt2_ops, dtype=bool)
    if not np.any(on):
        return 0.0, 0.0
    gemms = (fwd.qkv, fwd.attn_out, fwd.mlp_up, fwd.mlp_down)
    (f_bytes, b_bytes), (f_kernels, b_kernels) = hf_gpt2_extra_bytes(
        fwd.scores.batch * fwd.scores.m * fwd.scores.n,
        fwd.mlp_up.m * fwd.mlp_up.n * fwd.has_mlp,
        sum(g.m * g.n for g in gemms),
        fwd.attn_out.m * fwd.attn_out.n,
        plan.bytes_per_element,
        ~np.asarray(plan.flash_attention, dtype=bool),
    )
    forward, backward = memory_s(f_bytes, gpu, f_kernels), memory_s(b_bytes, gpu, b_kernels)
    return np.where(on, forward, 0.0), np.where(on, backward, 0.0)


def gelu_new_saved_elements(model: Model, ffn: Number | None, on: Number) -> Number:
    """Elements per token one layer's gelu_new keeps beyond the activation inventory (before the TP
    split, as `StackMemory.extra_saved_elements`): 3 f where `on` (`Plan.hf_gpt2_ops`) and the MLP is
    not gated, else 0; `ffn`: the dense MLP's width (the model's where None)."""
    f = model.ffn_hidden if ffn is None else ffn
    plain = ~np.asarray(model.gated_mlp, dtype=bool)
    return np.where(np.asarray(on, dtype=bool) & plain, GELU_NEW_SAVED_WIDTHS * f, 0.0)
