"""Hardware value types: a GPU, a link, a cluster. SI units, the unit in every name.

Bandwidths are one direction, per GPU (what one GPU can send while it also receives the
same amount). Numeric fields may be numpy arrays so that one call evaluates a grid.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from shardwise.precisions import FP4_PRECISIONS
from shardwise.specs import _checks as chk
from shardwise.specs._checks import Number, SpecError
from shardwise.specs.memo import hash_once
from shardwise.specs.pcie import PcieTopology
from shardwise.specs.precision_rates import (  # noqa: F401 (re-exported: specs.hardware's names)
    MXFP8_GEMM_RELATIVE,
    NVFP4_OPERAND_RATE_RATIO,
    NVFP4_SM103_RATE_RATIO,
    PRECISION_BYTES,
    SM103_FP4_PEAK_RATIO,
    is_fp8,
    is_narrow,
    is_nvfp4,
)

# PyTorch SDPA's flash backend by platform: its build of FlashAttention-2 (CUDA) or AOTriton (ROCm)
SDPA_FLASH_BACKENDS = ("fa2", "aotriton")
# The GEMM kernels a GPU's libraries run (`physics.gemm` module docstring): "generic" (multistage
# tiles: Ampere, Ada, consumer, AMD), "sm90" (Hopper), "sm100" (data-centre Blackwell)
GEMM_KERNELS = ("generic", "sm90", "sm100")
# Who makes the GPU: what software stacks run on it at all (CUDA or ROCm; `engines.engine_formats`)
VENDORS = ("nvidia", "amd")


@dataclass(frozen=True)
class GemmTable:
    """Measured 16-bit GEMM rates by shape (`shardwise measure micro`): entry j is C[m_j x n_j] =
    A[m_j x k_j] B[k_j x n_j], run at `relative_rate[j]` x peak x `matmul_efficiency` (a rate
    relative to the GPU's sustained one, so a calibrated efficiency scales the table with it).
    `physics.gemm.table_time_s` prices a GEMM at the rate of the nearest measured shape."""

    m: tuple[float, ...]
    n: tuple[float, ...]
    k: tuple[float, ...]
    relative_rate: tuple[float, ...]

    def __post_init__(self) -> None:
        sizes = {len(self.m), len(self.n), len(self.k), len(self.relative_rate)}
        if len(sizes) != 1 or not self.m:
            raise SpecError("gemm_table: m, n, k and the rates must be non-empty lists of one length")
        for name in ("m", "n", "k", "relative_rate"):
            chk.positive(f"gemm_table: {name}", np.asarray(getattr(self, name), dtype=float))


@hash_once
@dataclass(frozen=True)
class Gpu:
    """One accelerator.

    `matmul_efficiency` is the fraction of the dense peak that a large, well-shaped GEMM reaches
    (the "maximum achievable matmul FLOPS" of Bekman's ml-engineering MAMF table);
    `memory_efficiency` the fraction of the HBM bandwidth that a streaming kernel reaches.
    `kernel_launch_s` is the idle gap the GPU pays per dependent kernel. `sm_count` (streaming
    multiprocessors, or compute units) sets how many GEMM tiles run at once (`physics.gemm`);
    `gemm_table` (measured rates by shape) replaces that model for 16-bit GEMMs where given.
    """

    name: str
    peak_flops_per_s_16bit: Number  # dense BF16/FP16 tensor-core peak
    memory_bytes: Number
    memory_bandwidth_bytes_per_s: Number
    peak_flops_per_s_fp8: Number = 0.0  # 0 = not supported
    matmul_efficiency: Number = 0.8
    memory_efficiency: Number = 0.85
    kernel_launch_s: Number = 3e-6
    matmul_efficiency_fp8: Number = 0.0  # 0: the same as matmul_efficiency
    sm_count: Number = 0  # streaming multiprocessors (compute units); 0 = unknown: plain roofline GEMMs
    mxfp8: bool = False  # tensor cores apply MX block scales (Blackwell and later)
    # tensor cores take BF16 (Ampere, CDNA2 and later); false: FP16 only (Volta, Turing: NVIDIA's V100 and T4
    # datasheets list FP16 tensor TFLOPS alone), where bf16 is refused (`peak_flops_per_s`, `requests.precision`)
    bf16: bool = True
    # runs the fused attention kernels the stacks ask for: FlashAttention-2 (Dao-AILab/flash-attention
    # csrc/flash_attn/flash_api.cpp: TORCH_CHECK(is_sm90 || is_sm8x, "FlashAttention only supports Ampere
    # GPUs or newer"), PyTorch SDPA's flash backend (sdp_utils.cpp check_flash_attention_hardware_support:
    # sm80+) and cuDNN's fused attention under Transformer Engine (dot_product_attention/utils.py
    # get_attention_backend: "Disabling FusedAttention as it requires compute capability sm80+"); false:
    # before Ampere (V100, sm70), where each stack falls back (`requests.attention`)
    flash_attention: bool = True
    # FP8 GEMMs take their operands in any layout (data-centre Blackwell, sm_100-119 and sm_130+), so a
    # per-tensor FP8 cast writes no transposed copy for the weight gradient; Hopper's take only TN
    # (Transformer Engine transformer_engine.cpp `nvte_is_non_tn_fp8_gemm_supported`, quantizer.cpp
    # `with_transpose = columnwise_usage && !is_non_tn_fp8_gemm_supported`; RTX Blackwell, sm_120, not)
    fp8_any_layout: bool = False
    peak_flops_per_s_fp4: Number = 0.0  # dense FP4 (NVFP4 / MXFP4) peak; 0 = not supported
    peak_ops_per_s_int8: Number = 0.0  # dense INT8 tensor peak (`physics.mmq_ids.int8_ops_per_s`)
    int8_mma: bool = True  # INT8 tensor-core MMA (Turing on, CDNA); false: Volta (dp4a, `physics.mmq_ids`)
    gemm_table: GemmTable | None = None  # measured 16-bit GEMM rates by shape (`measure micro`)
    # FlashAttention-2's forward efficiency relative to the GEMMs' at its plateau (0: the fused kernel's,
    # `physics.attention_kernels.FLASH_RELATIVE_EFFICIENCY`; Hopper runs FA2 below it, Ampere above it)
    flash2_efficiency: Number = 0.0
    # FlashAttention-2's backward throughput (2.5x the forward's FLOPs) relative to the GEMMs', where
    # measured apart from its forward (0: the forward's efficiency x Dao 2023's 63/73; ROCm's CK kernels
    # fall further behind in the backward)
    flash2_backward_efficiency: Number = 0.0
    # Which kernels PyTorch SDPA's flash backend runs on this GPU: "fa2" (PyTorch's build of
    # FlashAttention-2, CUDA) or "aotriton" (ROCm's AOTriton); `physics.attention_kernels.sdpa_flash_fractions`
    sdpa_flash_backend: str = "fa2"
    # The board's power limit (W; 0 = not given): what sets the clock of sustained tensor-core work
    # (`physics.power`), used where a GPU's efficiency is carried over from a sibling's benchmark
    tdp_w: Number = 0.0
    # SMs (CUs) one collective's kernels hold while it overlaps compute, one per channel (0: NCCL's 16 on
    # NVLink, `engines.tp_overlap.NCCL_OVERLAP_SMS`; RCCL runs 56 on an 8-GPU MI300X mesh), `collective_sms`
    collective_sms: Number = 0
    # What the GPU copies to and from pinned host memory, bytes/s one direction, sustained (PCIe or
    # NVLink-C2C; its share where GPUs share the link): what activation offload crosses
    # (`physics.offload`). 0 = not given (offload cannot be priced)
    host_link_bytes_per_s: Number = 0.0
    # Parameters per second one GPU's share of its host CPU updates with a CPU Adam (the host's rate
    # over the GPUs that step at once): what optimizer offload waits for. 0 = not given
    host_adam_params_per_s: Number = 0.0
    gemm_kernels: str = "generic"  # `GEMM_KERNELS`: the tiles tried, stream-K and the TMA fetch priced
    # L2 capacity and read bandwidth, where split-K's partials go when they fit (0: not given, HBM's)
    l2_bytes: Number = 0.0
    l2_bandwidth_bytes_per_s: Number = 0.0
    # products of at most this many rows run as matrix-vector kernels that reduce K inside the kernel,
    # with no split-K reduction kernel (llama.cpp's mmvq / mul_mat_vec; set by `engines.serving`; 0: none)
    matvec_max_rows: int = 0
    mmq_token_tiles: bool = False  # a prompt's experts as llama.cpp's MMQ tiles them (`physics.mmq_ids`; serving)
    vendor: str = "nvidia"  # `VENDORS`: NVIDIA (CUDA) or AMD (ROCm), which serving engines run on it
    # the built-in whose fitted sustained efficiency a GPU file's `like:` carries ("": its own name), and
    # the file's fields (YAML names, ", "-joined) that change what that fit measured: the 80% interval's
    # GPU term is looked up under them (`presets.like_files.gpu_fit`, `calibration.spreads.gpu_term`)
    fit_name: str = ""
    fit_changed: str = ""

    def __post_init__(self) -> None:
        chk.text("gpu: name", self.name)
        p = f"gpu {self.name!r}"
        chk.within(f"{p}: peak_flops_per_s_16bit", self.peak_flops_per_s_16bit, 1e9, 1e18, "FLOP/s")
        chk.within(f"{p}: memory_bytes", self.memory_bytes, 1e6, 1e15, "bytes")
        chk.within(f"{p}: memory_bandwidth_bytes_per_s", self.memory_bandwidth_bytes_per_s, 1e6, 1e16, "B/s")
        chk.non_negative(f"{p}: peak_flops_per_s_fp8", self.peak_flops_per_s_fp8)
        chk.unit_fraction(f"{p}: matmul_efficiency", self.matmul_efficiency)
        chk.unit_fraction(f"{p}: memory_efficiency", self.memory_efficiency)
        chk.within(f"{p}: kernel_launch_s", self.kernel_launch_s, 0.0, 1.0, "s")
        chk.non_negative(f"{p}: matmul_efficiency_fp8", self.matmul_efficiency_fp8)
        if (chk.as_array(self.matmul_efficiency_fp8) > 1).any():
            bad = self.matmul_efficiency_fp8
            raise SpecError(f"{p}: matmul_efficiency_fp8: {bad} is not allowed; it must be in [0, 1] (0: not measured)")
        chk.non_negative_int(f"{p}: sm_count", self.sm_count)
        chk.boolean(f"{p}: mxfp8", self.mxfp8)
        chk.boolean(f"{p}: bf16", self.bf16)
        chk.boolean(f"{p}: flash_attention", self.flash_attention)
        chk.boolean(f"{p}: fp8_any_layout", self.fp8_any_layout)
        chk.boolean(f"{p}: int8_mma", self.int8_mma)
        chk.non_negative(f"{p}: peak_flops_per_s_fp4", self.peak_flops_per_s_fp4)
        chk.within(f"{p}: host_link_bytes_per_s", self.host_link_bytes_per_s, 0.0, 1e13, "B/s")
        chk.within(f"{p}: host_adam_params_per_s", self.host_adam_params_per_s, 0.0, 1e13, "parameters/s")
        chk.within(f"{p}: flash2_efficiency", self.flash2_efficiency, 0.0, 1.0, "(a fraction; 0: as fused)")
        chk.within(
            f"{p}: flash2_backward_efficiency",
            self.flash2_backward_efficiency,
            0.0,
            1.0,
            "(a fraction; 0: from the forward's)",
        )
        chk.one_of(f"{p}: sdpa_flash_backend", self.sdpa_flash_backend, SDPA_FLASH_BACKENDS)
        chk.within(f"{p}: tdp_w", self.tdp_w, 0.0, 1e5, "W (0: not given)")
        chk.within(f"{p}: collective_sms", self.collective_sms, 0.0, 1024.0, "SMs (0: NCCL's 16)")
        chk.one_of(f"{p}: gemm_kernels", self.gemm_kernels, GEMM_KERNELS)
        chk.one_of(f"{p}: vendor", self.vendor, VENDORS)
        chk.within(f"{p}: l2_bytes", self.l2_bytes, 0.0, 1e11, "bytes (0: not given)")
        chk.within(f"{p}: l2_bandwidth_bytes_per_s", self.l2_bandwidth_bytes_per_s, 0.0, 1e15, "B/s (0: not given)")
        chk.non_negative_int(f"{p}: matvec_max_rows", self.matvec_max_rows)
        chk.within(f"{p}: peak_ops_per_s_int8", self.peak_ops_per_s_int8, 0.0, 1e18, "OP/s (0: 2x the 16-bit peak)")
        chk.text(f"{p}: fit_name", self.fit_name)
        chk.text(f"{p}: fit_changed", self.fit_changed)

    @property
    def sixteen_bit(self) -> str:
        """The 16-bit tensor-core format: bf16, else fp16 (a GPU without BF16: `bf16`)."""
        return "bf16" if bool(np.all(self.bf16)) else "fp16"

    def no_bf16(self, asked: str, use: str) -> SpecError:
        """The one-line refusal of bf16 (`asked`, as the caller names it) on a GPU without it, with the
        fix in the caller's terms (`use`): the API's and the command line's alike."""
        return SpecError(f"{asked}: gpu {self.name!r} has no BF16 tensor cores (FP16 only); use {use}")

    @staticmethod
    def peak_field(precision: str) -> str:
        """The field holding a compute precision's dense peak, the one `peak_flops_per_s` reads:
        FP8 and MXFP8 the FP8 peak, FP4 (serving's GEMMs on NVFP4 activations) and NVFP4 the FP4
        peak, 16-bit otherwise (a swept peak moves this field alone: `analyses.evaluate`)."""
        if is_fp8(precision):
            return "peak_flops_per_s_fp8"
        if precision in FP4_PRECISIONS or is_nvfp4(precision):
            return "peak_flops_per_s_fp4"
        return "peak_flops_per_s_16bit"

    def peak_flops_per_s(self, precision: str) -> Number:
        """Dense tensor-core peak for a compute precision (fp8 falls back to an error if absent)."""
        if precision == "bf16" and self.sixteen_bit != "bf16":
            raise self.no_bf16("precision: bf16", "precision='fp16'")
        if precision in ("bf16", "fp16"):
            return self.peak_flops_per_s_16bit
        if is_fp8(precision):
            if not (chk.as_array(self.peak_flops_per_s_fp8) > 0).all():
                use = "bf16 or fp16" if self.sixteen_bit == "bf16" else "fp16"
                raise SpecError(f"precision: {precision} is not supported by gpu {self.name!r}; use {use}")
            if precision == "mxfp8" and not self.mxfp8:
                raise SpecError(
                    f"precision: mxfp8 (block-scaled FP8) needs Blackwell tensor cores; gpu {self.name!r} has "
                    "none; use fp8 (per-tensor scaling)"
                )
            return self.peak_flops_per_s_fp8
        if precision in FP4_PRECISIONS or is_nvfp4(precision):
            if not (chk.as_array(self.peak_flops_per_s_fp4) > 0).all():
                raise SpecError(
                    f"precision: {precision} needs FP4 tensor cores (Blackwell); gpu {self.name!r} has none; "
                    "use fp8" + (" or mxfp8" if self.mxfp8 else "")
                )
            return self.peak_flops_per_s_fp4
        raise SpecError(f"precision: {precision!r} is not allowed; choose one of bf16, fp16, fp8, mxfp8, nvfp4")

    def matmul_efficiency_for(self, precision: str) -> Number:
        """Achievable fraction of the peak of `precision` for a layer's GEMMs."""
        eff = self.matmul_efficiency
        # FP8 and FP4: FP8's share of its own peak (no best-shape FP4 GEMM rate is published) ...
        if is_narrow(precision) and (chk.as_array(self.matmul_efficiency_fp8) > 0).all():
            eff = self.matmul_efficiency_fp8
        # ... and for FP4 (training's nvfp4, serving's fp4), capped by the operand byte rate
        # (NVFP4_OPERAND_RATE_RATIO: the tensor cores take 4-bit operands with their scales at FP8's
        # bytes; Blackwell Ultra's at NVFP4_SM103_RATE_RATIO, measured)
        if is_nvfp4(precision) or precision in FP4_PRECISIONS:
            fp8, fp4 = chk.as_array(self.peak_flops_per_s_fp8), chk.as_array(self.peak_flops_per_s_fp4)
            ratio = np.divide(fp8, fp4, out=np.zeros(np.broadcast(fp8, fp4).shape), where=fp4 > 0)
            ultra = fp4 >= SM103_FP4_PEAK_RATIO * fp8
            rate = np.where(ultra, NVFP4_SM103_RATE_RATIO, NVFP4_OPERAND_RATE_RATIO)
            cap = np.where(ratio > 0, np.minimum(1.0, rate * ratio), 1.0)
            return eff * (cap if np.ndim(cap) else float(cap))
        return eff * MXFP8_GEMM_RELATIVE if precision == "mxfp8" else eff

    def with_(self, **changes: object) -> Gpu:
        return replace(self, **changes)  # type: ignore[arg-type]


@hash_once
@dataclass(frozen=True)
class Link:
    """A link between GPUs (NVLink, PCIe) or a NIC (InfiniBand, Ethernet), one direction per GPU.

    A collective over this link is priced by the pipelined alpha-beta model of
    `physics.collectives`: `base_latency_s` once per call (launch and synchronisation, NCCL's
    "baseLat"), `latency_s` per ring step / hop, and `bandwidth_bytes_per_s * efficiency` as the
    sustained rate (NCCL's large-message bus bandwidth over the line rate). `nvls_efficiency` is
    the share of that rate an all-reduce reduced inside the switch (NVLink SHARP) reaches; 0 where
    the switch cannot reduce (NCCL's nvlsEfficiency, src/graph/tuning.cc: Hopper 0.85, Blackwell 0.74).
    `ll_bandwidth_bytes_per_s` is the most bus bandwidth NCCL's LL protocol reaches on an NVLink
    server (its llMaxBws: Volta 39, Ampere 87.7, Hopper 141, Blackwell 282 GB/s); a link with one
    also runs LL128 inside a server. 0 (PCIe, networks, a link given by its rate): neither is
    priced, only the chunked Simple protocol. `mesh_links` is the number of point-to-point links
    among which `bandwidth_bytes_per_s` is split where the server's GPUs are wired as a full mesh
    without a switch (AMD Infinity Fabric: 7 on an 8-GPU MI300X server); a group of g GPUs in the
    server then drives only g - 1 of them, and a send between two GPUs one. 0: a switch or a
    shared bus, every group gets the whole rate.
    """

    name: str
    bandwidth_bytes_per_s: Number
    latency_s: Number = 1e-6
    efficiency: Number = 0.8
    base_latency_s: Number = 20e-6
    nvls_efficiency: Number = 0.0
    ll_bandwidth_bytes_per_s: Number = 0.0
    mesh_links: Number = 0

    def __post_init__(self) -> None:
        chk.text("link: name", self.name)
        p = f"link {self.name!r}"
        chk.within(f"{p}: bandwidth_bytes_per_s", self.bandwidth_bytes_per_s, 1e3, 1e16, "B/s")
        chk.within(f"{p}: latency_s", self.latency_s, 0.0, 1.0, "s")
        chk.fraction(f"{p}: efficiency", self.efficiency)
        chk.within(f"{p}: base_latency_s", self.base_latency_s, 0.0, 1.0, "s")
        chk.within(f"{p}: nvls_efficiency", self.nvls_efficiency, 0.0, 1.0, "(0: no NVLS)")
        chk.within(f"{p}: ll_bandwidth_bytes_per_s", self.ll_bandwidth_bytes_per_s, 0.0, 1e16, "B/s (0: no LL/LL128)")
        chk.within(f"{p}: mesh_links", self.mesh_links, 0.0, 1024.0, "(0: a switch, no mesh)")

    @property
    def effective_bandwidth_bytes_per_s(self) -> Number:
        return self.bandwidth_bytes_per_s * self.efficiency

    def with_(self, **changes: object) -> Link:
        return replace(self, **changes)  # type: ignore[arg-type]


# Serving engines' own all-reduce kernels (physics.custom_allreduce); "none": NCCL only.
CUSTOM_ALL_REDUCE_KERNELS = ("none", "vllm", "trtllm", "sglang")
# The host CPU's vendor as NCCL tells them apart for its network post per ring step
# (`physics.collectives.NET_POST_S`): Intel x86, AMD x86, Arm (Grace)
HOST_CPUS = ("intel", "amd", "arm")


@hash_once
@dataclass(frozen=True)
class Cluster:
    """`nodes` servers of `gpus_per_node` GPUs. Inside a server GPUs talk over `intra_node_link`;
    across servers each GPU has `inter_node_link` (its share of the NICs).

    `step_overhead_s` and `micro_batch_overhead_s` are the software stack's fixed costs that no
    kernel model sees (Python, the data loader, logging, host-side scheduling): once per optimizer
    step, and once per micro-batch on every pipeline stage (so they grow the bubble too). They are
    0 unless measured: `shardwise calibrate` fits them from the user's own runs."""

    name: str
    gpu: Gpu
    gpus_per_node: int
    nodes: int
    intra_node_link: Link
    inter_node_link: Link | None = None
    notes: str = field(default="", compare=False)
    step_overhead_s: Number = 0.0
    micro_batch_overhead_s: Number = 0.0
    # tokens of a micro-batch at which its GEMMs would run at half their large-batch rate
    # (`physics.gemm_ramp`; 0: no ramp unless calibrated)
    gemm_half_rate_tokens: Number = 0.0
    # the share of the inter-node rate that an all-to-all (MoE dispatch and combine, Ulysses'
    # exchange) and a pipeline send/receive reach, beside the ring and tree collectives' (1 unless
    # calibrated: `calibration.parameters`)
    inter_node_all_to_all_scale: Number = 1.0
    inter_node_p2p_scale: Number = 1.0
    # GPUs in a server reach each other's memory (peer-to-peer); off: NCCL stages through host
    # memory (`physics.custom_allreduce.without_p2p`)
    p2p: bool = True
    # NCCL may reduce in the NVLink switch (NVLS) where the server's link can (NCCL_NVLS_ENABLE)
    nvls: bool = True
    # the serving engine's own all-reduce kernel on small messages ("none": NCCL only)
    custom_all_reduce: str = "none"
    # a PCIe server's switches and sockets (`specs.pcie`; None: one uniform link, as before);
    # training and serving price their groups on it (`physics.pcie`, `physics.collectives.Fabric`)
    pcie: PcieTopology | None = None
    # the servers' host CPU vendor (HOST_CPUS): what NCCL's network proxy pays to post a ring step
    # across servers (`physics.collectives`); Intel's price unless a system preset says otherwise
    host_cpu: str = "intel"

    def __post_init__(self) -> None:
        chk.text("cluster: name", self.name)
        if self.host_cpu not in HOST_CPUS:
            raise SpecError(
                f"cluster {self.name!r}: host_cpu: {self.host_cpu!r} is not allowed; choose {', '.join(HOST_CPUS)}"
            )
        for flag in ("p2p", "nvls"):
            if not isinstance(getattr(self, flag), bool):
                got = getattr(self, flag)
                raise SpecError(f"cluster {self.name!r}: {flag}: {got!r} is not allowed; give true or false")
        kernels = CUSTOM_ALL_REDUCE_KERNELS
        if self.custom_all_reduce not in kernels:
            raise SpecError(
                f"cluster {self.name!r}: custom_all_reduce: {self.custom_all_reduce!r} is not allowed; "
                f"choose {', '.join(kernels)}"
            )
        chk.text(f"cluster {self.name!r}: notes", self.notes)
        if self.pcie is not None and not isinstance(self.pcie, PcieTopology):
            got = _short_type(self.pcie)
            raise SpecError(f"cluster {self.name!r}: pcie: {got} is not allowed; give a PcieTopology")
        for name, kind in (("gpu", Gpu), ("intra_node_link", Link)):
            if not isinstance(getattr(self, name), kind):
                got = _short_type(getattr(self, name))
                raise SpecError(f"cluster {self.name!r}: {name}: {got} is not allowed; give a {kind.__name__}")
        if self.inter_node_link is not None and not isinstance(self.inter_node_link, Link):
            got = _short_type(self.inter_node_link)
            raise SpecError(f"cluster {self.name!r}: inter_node_link: {got} is not allowed; give a Link or None")
        chk.positive_int(f"cluster {self.name!r}: gpus_per_node", self.gpus_per_node)
        chk.positive_int(f"cluster {self.name!r}: nodes", self.nodes)
        chk.within(f"cluster {self.name!r}: step_overhead_s", self.step_overhead_s, 0.0, 3600.0, "s")
        chk.within(f"cluster {self.name!r}: micro_batch_overhead_s", self.micro_batch_overhead_s, 0.0, 60.0, "s")
        chk.within(f"cluster {self.name!r}: gemm_half_rate_tokens", self.gemm_half_rate_tokens, 0.0, 1e6, "tokens")
        for kind in ("all_to_all", "p2p"):
            scale = f"inter_node_{kind}_scale"
            chk.within(f"cluster {self.name!r}: {scale}", getattr(self, scale), 1e-3, 100.0, "x")
        if self.inter_node_link is None and (chk.as_array(self.nodes) > 1).any():
            raise SpecError(
                f"cluster {self.name!r}: nodes={self.nodes} needs an inter_node_link "
                "(e.g. --inter-link ib-hdr); a single node needs none"
            )

    @property
    def num_gpus(self) -> Number:
        return self.gpus_per_node * self.nodes

    def with_(self, **changes: object) -> Cluster:
        return replace(self, **changes)  # type: ignore[arg-type]


def _short_type(value: object) -> str:
    text = repr(value)
    return f"{text if len(text) <= 40 else text[:37] + '...'} ({type(value).__name__})"
