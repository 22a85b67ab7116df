"""A transformer layer's sizes as `shardwise measure` splits them (no PyTorch here: the command
line checks the split before it needs PyTorch)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LayerShape:
    hidden: int
    heads: int
    ffn_hidden: int

    def check(self, tp: int) -> None:
        from shardwise.errors import SpecError

        if self.heads % tp or self.ffn_hidden % tp:
            raise SpecError(
                f"--ranks {tp} (the tensor-parallel size) must divide the heads ({self.heads}) and the MLP hidden "
                f"size ({self.ffn_hidden})"
            )
        if self.hidden % self.heads:
            raise SpecError(f"--hidden {self.hidden} must be a multiple of --heads {self.heads}")
