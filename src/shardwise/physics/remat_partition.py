"""DeepSpeed's partitioned activation checkpoints (`Plan.partition_activations`; Megatron-DeepSpeed
--partition-activations, which `megatron/initialize.py` passes to `deepspeed.checkpointing.configure`
over the DeepSpeed config's activation_checkpointing block; off by default, store_true).

deepspeedai/DeepSpeed deepspeed/runtime/activation_checkpointing/checkpointing.py (v0.9.5; v0.6's
`get_full_inputs` does the same), `CheckpointFunction`, per checkpointed layer and micro-batch:

- forward, `partition_activations`: each floating input (`is_activation_to_checkpoint`, the layer's
  hidden states; the attention mask is boolean) is flattened, narrowed to this TP rank's 1/t and
  `clone()`d: a read and a write of 1/t of the input;
- backward, `gather_partitioned_activations`: a `torch.zeros` of the whole input, the rank's part
  copied in, `dist.all_gather(partitions, ...)` over the TP group into views of that buffer (PyTorch's
  list all-gather: NCCL into a flat scratch buffer, then a copy out to the list: a read and a write of
  the whole), before the recomputation; all on the compute stream, nothing overlaps it.

The memory side: the layer keeps 1/t of its input instead of all of it (`kept_fraction`). With one
TP rank there is no group (`mp_size == 1`): nothing is partitioned, gathered or copied.
"""

from __future__ import annotations

import numpy as np

from shardwise.specs._checks import Number


def passes_bytes(input_bytes: Number, tp: Number, on: Number) -> tuple[Number, Number]:
    """(forward, backward) bytes the partitioning moves through HBM per layer and micro-batch, for a
    checkpointed input of `input_bytes`: the forward's narrow-and-clone (2 x/t), the backward's
    zero-fill (x), copy-in of the rank's part (2 x/t) and copy-out of the gathered list (2 x)."""
    t = np.asarray(tp, dtype=float)
    live = np.asarray(on, dtype=bool) & (t > 1)
    x = np.asarray(input_bytes, dtype=float)
    forward = np.where(live, 2 * x / t, 0.0)
    backward = np.where(live, x + 2 * x / t + 2 * x, 0.0)
    return forward, backward


def gathered_bytes(input_bytes: Number, tp: Number, on: Number) -> Number:
    """Bytes the backward's TP all-gather assembles per layer and micro-batch (0 where off or t = 1)."""
    t = np.asarray(tp, dtype=float)
    return np.where(np.asarray(on, dtype=bool) & (t > 1), np.asarray(input_bytes, dtype=float), 0.0)


def kept_fraction(tp: Number, on: Number) -> Number:
    """The share of a fully recomputed layer's input that it keeps: 1/t partitioned, else 1."""
    t = np.asarray(tp, dtype=float)
    return np.where(np.asarray(on, dtype=bool), 1.0 / np.maximum(t, 1.0), 1.0)
