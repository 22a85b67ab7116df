"""Facts the launch needs that a priced model does not carry: the CUDA architecture of a GPU preset,
the layers of each stage and model chunk, the mixture-of-experts layers."""

from __future__ import annotations

import numpy as np

from shardwise.specs import Gpu, Model, Plan


def cuda_major(gpu: Gpu) -> int:
    """The compute capability's major version of a GPU as Megatron-LM's launch rule needs it (it asks
    CUDA_DEVICE_MAX_CONNECTIONS=1 below 10): 10 for data-centre Blackwell (GEMM kernels `sm100`),
    else 9, Hopper and older (RTX Blackwell, sm120, is not told apart: it gets the variable,
    harmless there)."""
    return 10 if gpu.gemm_kernels == "sm100" else 9


def i(x: object) -> int:
    return int(np.asarray(x))


def stage_layers(model: Model, plan: Plan) -> list[int]:
    """Transformer layers of each pipeline stage, in order, as the plan prices them."""
    from shardwise.specs.stages import plan_split, stage_layer_list

    return stage_layer_list(plan_split(model.layers, plan), i(plan.pp))


def chunk_layers(stages: list[int], vpp: int) -> list[list[int]]:
    """Each stage's layers over its `vpp` model chunks (interleaved schedule): as even as
    possible, the first stage's extra layers in its later chunks (its first chunk also holds the
    embedding), the others' in their earlier chunks (the last stage's last chunk holds the loss)."""
    out = []
    for r, n in enumerate(stages):
        base, extra = divmod(n, vpp)
        if r == 0:
            out.append([base + (1 if j >= vpp - extra else 0) for j in range(vpp)])
        else:
            out.append([base + (1 if j < extra else 0) for j in range(vpp)])
    return out


def moe_layer_pattern(model: Model) -> list[int]:
    """1 for each mixture-of-experts layer, 0 for a dense one (`Model.dense_layers`, `moe_every`)."""
    d, k = model.dense_layers, model.moe_every
    return [0 if j < d or (j - d) % k != k - 1 else 1 for j in range(i(model.layers))]


# The MLP's activation (`Model.activation`) in words, gated or not, for a launch's "you add" line.
_ACTIVATION_WORDS = {
    "silu": "SiLU",
    "gelu": "erf GELU",
    "gelu_tanh": "tanh-approximated GELU",
    "quick_gelu": "quick GELU x sigmoid(1.702 x)",
    "relu": "ReLU",
    "squared_relu": "squared ReLU",
}


def activation_flags(
    model: Model, flags: dict[tuple[str, bool], tuple[str, ...]], tool: str
) -> tuple[tuple[str, ...], str | None]:
    """The flags `tool` takes for the model's MLP (`flags`: (activation, gated) -> flags, () for the
    tool's default), or none and the line the launch adds where it has no flag for it (GeGLU under
    Megatron-LM: never --swiglu, which is SiLU)."""
    key = (model.activation, bool(model.gated_mlp))
    if key in flags:
        return flags[key], None
    kind = ("a gated MLP (GLU) on " if model.gated_mlp else "an MLP on ") + _ACTIVATION_WORDS[model.activation]
    return (), (
        f"the MLP's activation, {kind} (activation {model.activation}): {tool} has no flag for it; "
        "set the model's activation function in code"
    )
