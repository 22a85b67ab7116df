"""What a comparison holds fixed and what it compares: `Experiment` (a model on GPUs of one kind,
links to compare, plans relative to the GPU count), `PlanSpec` and `LinkSpec`. Their text forms
are parsed at the edges (`plan_text.parse_plan_spec`, `presets.parse_link_spec`)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from shardwise.calibration.spreads import model_family, serving_log_sd, serving_unmeasured, uncalibrated_log_sd
from shardwise.specs.hardware import Gpu, Link
from shardwise.specs.model import Model
from shardwise.specs.pcie import PcieTopology

WORKLOADS = ("train", "forward", "prefill", "decode")
COST_MODELS = ("physical", "textbook")


@dataclass(frozen=True)
class PlanSpec:
    """A plan relative to the GPU count: `tp=8`, `pp=8`, `tp=2,pp=4`, `tp=all` (all GPUs);
    dp fills the GPUs that tp x pp leave. Other keys: vpp, mb (micro-batch), schedule,
    recompute, sp (on/off), zero, shard (hybrid sharding: ZeRO over groups of that many data-parallel
    ranks, `Plan.shard_group`), first and last (layers on the first / last pipeline stage; the
    middle stages split the rest), cp (context-parallel ranks per sequence: training and
    whole-sequence forward passes), ep and etp (a mixture of experts' expert layout, folded into
    the same GPUs; serving spreads the experts over the TP GPUs, etp = tp / ep). Checked when
    parsed."""

    label: str
    tp: int | str = 1
    pp: int | str = 1
    options: tuple[tuple[str, Any], ...] = ()  # Plan keyword arguments, already typed

    KEYS = ("tp", "pp", "cp", "vpp", "mb", "schedule", "recompute", "sp", "zero", "shard", "first", "last", "ep", "etp")

    def degrees(self, gpus: Any) -> tuple[Any, Any, Any]:
        """(tp, pp, dp) on `gpus` GPUs (arrays allowed); dp = gpus / (tp pp cp), NaN if not whole.
        "all" is every GPU the other axes leave: `pp=all,tp=2` on 8 GPUs is pp 4 (it was pp 8, refused
        as "tp x pp = 16"; review 50 #12); where they leave no whole number, every GPU (refused)."""
        g = np.asarray(gpus)
        cp = dict(self.options).get("cp", 1)

        def resolved(axis: int | str, other: int | str) -> Any:
            if axis != "all":
                return np.asarray(axis)
            rest = cp * (1 if other == "all" else int(other))
            return np.where(g % rest == 0, g // rest, g)

        tp, pp = resolved(self.tp, self.pp), resolved(self.pp, self.tp)
        return tp, pp, g / (tp * pp * cp)

    def plan_kwargs(self) -> dict[str, Any]:
        return dict(self.options)

    @property
    def is_pure(self) -> bool:
        """Only tp or only pp (what the textbook model can price)."""
        return (self.tp == 1) != (self.pp == 1) and not self.options


@dataclass(frozen=True)
class LinkSpec:
    """A link to compare: `nvlink3` (preset), `pcie=pcie4`, `nvlink=600GB/s`,
    `pcie=32GB/s,latency=2us,efficiency=0.76`. A bare rate is the sustained rate (efficiency 1)."""

    label: str
    link: Link
    # how `--cost-model textbook` took the rate (`requests.textbook_links`): "" (the physical model)
    basis: str = ""


@dataclass(frozen=True)
class Experiment:
    """What stays fixed while one variable moves. Defaults: the brief's experiment (Sec. 8)."""

    model: Model
    gpu: Gpu
    gpus: int = 8
    gpus_per_node: int = 8
    inter_node_link: Link | None = None
    host_cpu: str = "intel"  # the servers' CPU maker: NCCL's network post per ring step (Cluster.host_cpu)
    nvls: bool = True  # may NCCL reduce inside the NVLink switch (Cluster.nvls; a system's `nvls: false`)
    pcie: PcieTopology | None = None  # a system's PCIe switches and sockets, for its PCIe links (Cluster.pcie)
    links: tuple[LinkSpec, ...] = ()
    plans: tuple[PlanSpec, ...] = ()
    batch: int = 8
    micro_batch: int = 1
    workload: str = "train"
    cost_model: str = "physical"
    plan_defaults: dict[str, Any] = field(default_factory=dict)
    # N where the stack's default recomputes every N-th layer of a dense model whole, for a training
    # plan whose `recompute=` key and the request leave it open (`presets.stack_defaults.resolve_recompute`,
    # counted by `specs.stages.every_nth_whole`); 0: none
    recompute_every: int = 0
    # --workload decode/prefill: the weights' storage of the model's checkpoint (`requests.checkpoint_weights`:
    # DeepSeek-V3's fp8, gpt-oss's mxfp4), as `serve` prices it; None: the run's precision, as the KV cache's
    serving_weights: str | None = None
    # `shardwise calibrate`'s fitted values (calibration.parameters), applied to every cluster
    calibration: tuple[tuple[str, float], ...] = ()
    # the 80% bands: one relative width (log space) for every plan, and where it comes from; None:
    # the uncalibrated model's measured spread for this GPU (training) or for serving
    prediction_log_sd: float | None = None
    spread_basis: str = "uncalibrated, the model's spread on public runs"
    # the calibration's fit (calibration.fit.Fit), for each point's own interval
    calibration_fit: Any = field(default=None, compare=False, repr=False)
    # the GPUs the calibration's runs measured (() : not recorded)
    calibration_gpus: tuple[str, ...] = ()
    # the calibration's stack-bound fitted parameters where its runs ran another stack (() : none)
    calibration_other_stack: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.prediction_log_sd is None:
            object.__setattr__(self, "prediction_log_sd", self._uncalibrated_log_sd())
            unmeasured = serving_unmeasured(self.gpu.name, model_family(self.model)) if self.workload != "train" else ""
            if unmeasured:  # the number says so, as serve's does (`spreads.serving_log_sd`)
                object.__setattr__(self, "spread_basis", f"unmeasured: {unmeasured}; {self.spread_basis}")

    def _uncalibrated_log_sd(self) -> float:
        """The uncalibrated model's measured spread for this GPU and stack (training) or serving's."""
        if self.workload != "train":
            return serving_log_sd(self.gpu.name, model_family(self.model))
        framework = self.plan_defaults.get("framework") or "megatron-core"
        return uncalibrated_log_sd(self.gpu, framework, model_family(self.model))  # a GPU file: its like:'s fit

    @property
    def floor_log_sd(self) -> float:
        """The narrowest band a calibration may give: on a GPU or under a stack its runs did not
        measure, the uncalibrated model's spread (`calibration.intervals.spread`); else 0."""
        if self.calibration_fit is None:
            return 0.0
        other_gpu = bool(self.calibration_gpus) and self.gpu.name not in self.calibration_gpus
        return self._uncalibrated_log_sd() if other_gpu or self.calibration_other_stack else 0.0

    def with_(self, **changes: Any) -> Experiment:
        return replace(self, **changes)

    @property
    def hardware(self) -> str:
        """'gpt-96l-4096h on 8 x a100-sxm4-80gb' (+ the inter-node link when it spans servers): what
        every figure's title names."""
        text = f"{self.model.name} on {self.gpus} x {self.gpu.name}"
        if self.gpus > self.gpus_per_node and self.inter_node_link is not None:
            text += f", {self.gpus // self.gpus_per_node} servers over {self.inter_node_link.name}"
        return text
