"""Measuring tensor, pipeline and data parallelism for real on torch.distributed (`shardwise measure`).

PyTorch is an optional extra (`pip install 'shardwise[measure]'`); nothing here imports it at
module level, so `import shardwise` stays light. The same code runs gloo on CPUs and NCCL on GPUs:
the device is chosen by what the machine has.
"""

from __future__ import annotations

from shardwise.errors import SpecError

INSTALL_HINT = (
    "shardwise measure needs PyTorch: pip install 'shardwise[measure]' "
    "(on a machine without a GPU, pip install torch==2.13.0 installs the CPU build)"
)


def require_torch() -> None:
    """Raise a one-line SpecError (exit 2) when PyTorch is not installed."""
    try:
        import torch
        import torch.distributed  # noqa: F401
    except ImportError:
        raise SpecError(INSTALL_HINT) from None
