"""What a parallel plan's fields imply (`specs.plan.Plan` inherits them): its GPU count, the ranks
ZeRO shards over, the expert groups, the micro-batches per step. Properties only, no fields: the
Plan's fields, their documentation and their checks stay in `specs.plan` and `specs.plan_checks`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from shardwise.specs.hardware import PRECISION_BYTES

if TYPE_CHECKING:
    from shardwise.specs._checks import Number


class PlanLayout:
    """The derived properties of `specs.plan.Plan`, read from its fields."""

    if TYPE_CHECKING:  # the Plan's fields these read
        tp: Number
        pp: Number
        dp: Number
        cp: Number
        ep: Number
        etp: Number
        shard_group: Number
        global_batch: Number
        micro_batch: Number
        first_stage_layers: Number
        last_stage_layers: Number
        stage_layers: tuple[int, ...] | None
        framework: str
        memory_stack: str
        precision: str

    @property
    def uneven_stages(self) -> bool:
        """Whether the stage split is given (explicitly or by first/last counts)."""
        return self.stage_layers is not None or bool(
            np.any(np.asarray(self.first_stage_layers) > 0) or np.any(np.asarray(self.last_stage_layers) > 0)
        )

    @property
    def num_gpus(self) -> Number:
        return self.tp * self.pp * self.dp * self.cp

    @property
    def zero_ranks(self) -> Number:
        """The ranks ZeRO shards the dense model state over: the shard group, or all dp x cp."""
        dp, cp, group = self.dp, self.cp, self.shard_group
        if type(dp) is int and type(cp) is int and type(group) is int:  # one plan of plain numbers
            return group if group > 0 else dp * cp
        ranks = np.asarray(self.dp) * np.asarray(self.cp)
        out = np.where(np.asarray(self.shard_group) > 0, self.shard_group, ranks)
        return out.item() if out.ndim == 0 else out

    @property
    def replicas(self) -> Number:
        """The shard groups that hold the same state (hybrid sharding; 1 without it)."""
        return self.dp * self.cp // self.zero_ranks

    @property
    def expert_tp(self) -> Number:
        """etp: the ranks that split each expert's matrices (tp unless set apart)."""
        if type(self.etp) is int and type(self.tp) is int:  # one plan of plain numbers
            return self.tp if self.etp == 0 else self.etp
        etp = np.where(np.asarray(self.etp) == 0, self.tp, self.etp)
        return etp.item() if etp.ndim == 0 else etp

    @property
    def expert_dp(self) -> Number:
        """The ranks that hold the same experts and reduce their gradients: tp cp dp / (ep etp)."""
        return self.tp * self.cp * self.dp // (self.ep * self.expert_tp)

    @property
    def memory_stack_key(self) -> str:
        """The entry of `physics.memory_stacks.STACKS` that prices this plan's memory: `memory_stack`
        (a framework file's `like:`), else `framework`'s own (a label without one: Megatron-Core's)."""
        return self.memory_stack or self.framework

    @property
    def num_micro_batches(self) -> Number:
        """m: micro-batches per pipeline per step."""
        return self.global_batch // (self.dp * self.micro_batch)

    @property
    def bytes_per_element(self) -> float:
        """Activation / weight bytes: fp8 training keeps bf16 activations between layers."""
        return max(PRECISION_BYTES[self.precision], 2.0)
