"""Time of one transformer layer's kernels on one GPU, forward, backward and what selective
recomputation redoes, split by kind of work (`LayerTimes`).

The kernels apart: `physics.kernels` (T_op = max(F / (peak * eta_mm), Q / (BW * eta_mem)) +
t_launch; GEMMs by the tile/wave model of `physics.gemm`), `physics.linears` (each linear layer's
forward, input-gradient and weight-gradient GEMMs, about twice the forward in the backward,
Narayanan et al. 2021 Sec. 5.1), `physics.casts` (their FP8 and FP4 casts),
`physics.attention_kernels` (how fast a fused attention kernel runs). Memory-bound kernels read
the saved input and the incoming gradient and write the outgoing one, BACKWARD_MEMORY_RATIO x the
forward traffic.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardwise.physics import fp8_recipes
from shardwise.physics.attention import BACKWARD_TILE_OVERHEAD_TOKENS as BWD_TILE
from shardwise.physics.attention import CAUSAL_PLATEAU, backward_slowdown, forward_slowdown, window_slowdown
from shardwise.physics.attention import FORWARD_TILE_OVERHEAD_TOKENS as FWD_TILE
from shardwise.physics.attention_flash34 import FlashProfile

# re-exported: the names the engines, physics.lora and the tests read here
from shardwise.physics.attention_kernels import (  # noqa: F401
    AOTRITON_BACKWARD_FRACTION,
    AOTRITON_FORWARD_FRACTION,
    FLASH_BACKWARD_FLOPS,
    FLASH_BACKWARD_RATIO,
    FLASH_RELATIVE_EFFICIENCY,
    SDPA_FLASH_BACKWARD_FRACTION,
    SDPA_FLASH_FORWARD_FRACTION,
    attention_backward_relative_efficiency,
    attention_precision,
    attention_relative_efficiency,
    flash2_head_dim_factors,
    flash34_profile,
    priced_kernel,
    sdpa_flash_fractions,
    torch_ring_s,
)
from shardwise.physics.casts import (  # noqa: F401
    FP8_CAST_BYTES_PER_ELEMENT,
    FP8_GATHERED_TRANSPOSE_BYTES_PER_ELEMENT,
    MXFP8_CAST_BYTES_PER_ELEMENT,
    ROWWISE_CAST_BYTES_PER_ELEMENT,
    Returned,
    cast_bytes_per_element,
    cast_kernels_per_tensor,
    cast_times,
    norm_fed_saving,
    norm_fp8_saved_bytes,
    norm_writes_fp8,
    torchao_cast_times,
    weight_cast_s,
)
from shardwise.physics.flops import LayerForward
from shardwise.physics.kernels import gemm_s, gemms_s, memory_s, roofline_s  # noqa: F401
from shardwise.physics.linears import (  # noqa: F401
    FUSED_ACCUMULATE_BYTES,
    UNFUSED_ACCUMULATE_BYTES,
    GemmTimes,
    linear_times,
    linears_times,
)
from shardwise.specs import Gpu
from shardwise.specs._checks import Number
from shardwise.specs.hardware import is_fp8, is_narrow
from shardwise.specs.plan import TORCH_RING_KERNELS

# dX and dW per forward GEMM: the backward is twice the forward's FLOPs (Narayanan et al. 2021
# Eq. 3 and Sec. 5.1); used for unfused attention's batched products.
BACKWARD_GEMM_RATIO = 2.0
# Memory-bound kernels: the backward reads the input and the gradient and writes the gradient
# against the forward's read and write; by that tensor count (no published source), 2x the bytes.
BACKWARD_MEMORY_RATIO = 2.0
# Megatron-LM's fused scale-mask-softmax and the attention dropout, two kernels over the score
# matrix (megatron/core/fusions/fused_softmax.py `FusedScaleMaskSoftmax`; Korthikanti et al. 2022
# Sec. 4.1 lists both tensors); charged with or without dropout, a project simplification.
SOFTMAX_KERNELS = 2


@dataclass(frozen=True)
class LayerTimes:
    """Forward / backward / recompute times of one layer on one GPU, split by kind of work.

    Seconds, arrays broadcast with the inputs. The four linear layers carry their own GEMM times
    (forward, input gradient, weight gradient) so that each TP collective can overlap only its
    own GEMM. `attention_core_s` is what selective recomputation redoes. `cast_*_s` are FP8
    quantisation kernels (0 in 16-bit training).
    """

    qkv: GemmTimes
    proj: GemmTimes
    up: GemmTimes
    down: GemmTimes
    attention_s: Number
    attention_bwd_s: Number
    elementwise_s: Number
    elementwise_bwd_s: Number
    attention_core_s: Number
    cast_f_s: Number = 0.0
    cast_b_s: Number = 0.0
    # the other linear layers together (`LayerForward.extra`); GemmTimes is frozen, one shared default is safe
    extra: GemmTimes = GemmTimes(0.0, 0.0, 0.0)  # noqa: RUF009
    # the weights' FP8 casts of a recipe that casts them at every use (in cast_f_s; a rematerialised
    # layer casts them again: `engines.recompute_costs.selective_recompute_s`)
    weight_cast_s: Number = 0.0

    @property
    def linears(self) -> tuple[GemmTimes, ...]:
        return (self.qkv, self.proj, self.up, self.down, self.extra)

    @property
    def gemm_s(self) -> Number:
        """The forward GEMMs."""
        return sum(g.forward_s for g in self.linears)

    @property
    def weight_grad_s(self) -> Number:
        """The weight-gradient GEMMs (what ZB-H1 defers)."""
        return sum(g.weight_grad_s for g in self.linears)

    @property
    def forward_s(self) -> Number:
        return self.gemm_s + self.attention_s + self.elementwise_s + self.cast_f_s

    @property
    def backward_s(self) -> Number:
        grads = sum(g.input_grad_s + g.weight_grad_s for g in self.linears)
        return grads + self.attention_bwd_s + self.elementwise_bwd_s + self.cast_b_s


def _windowed_mean(
    fwd: LayerForward,
    gpu: Gpu,
    attn_p: str,
    relative: Number,
    relative_bwd: Number,
    fused: Number,
    fused_bwd: Number,
    profile: FlashProfile | None = None,
) -> tuple[Number, Number]:
    """(forward, backward) seconds of the fused attention of a mean layer whose `sliding_share` of
    layers are windowed: their kernels compute `window_fraction` of the rectangle, on the
    windowed ramp (`physics.attention.window_slowdown`), reading the keys of their windows."""
    s_q, s_kv, win = fwd.scores.m, fwd.scores.n, fwd.window_flash
    keys = np.asarray(fwd.window_fraction) * s_kv  # the keys a query sees on average
    cut = fwd.window_cut
    worked = win.flops * fwd.window_fraction
    f_tile, b_tile, plateau = FWD_TILE, BWD_TILE, CAUSAL_PLATEAU
    if profile is not None:  # FlashAttention-3/4's own ramp (`physics.attention_flash34`)
        f_tile, b_tile = profile.forward_overhead_tokens, profile.backward_overhead_tokens
        plateau = profile.causal_plateau
    slow_f, slow_b = (window_slowdown(s_q, keys, cut, tile, plateau) for tile in (f_tile, b_tile))
    forward = roofline_s(worked, win.bytes, gpu, attn_p, relative / slow_f)
    backward = roofline_s(worked, win.bytes, gpu, attn_p, relative_bwd / slow_b)
    share = fwd.sliding_share
    return (1.0 - share) * fused + share * forward, (1.0 - share) * fused_bwd + share * backward


def layer_times(
    fwd: LayerForward,
    gpu: Gpu,
    precision: str,
    flash: Number,
    fused_accumulation: Number = True,
    attention_kernel: str = "fused",
    eager: Number = False,
    accumulate_bytes: Number = UNFUSED_ACCUMULATE_BYTES,
    fp8_recipe: str = "te",
    cp_comm: str = "p2p",
    backward: bool = True,
    gathered_shards: Number = 1,
    training: bool = True,
    norm_shards: Number | None = None,
    mlp_norm_fed: bool = True,
    norm_returned: Returned = (0.0, 0.0),
    cublas_before_11: Number = False,
) -> LayerTimes:
    """Times of every kernel of one layer (see the module docstring for the ratios); the
    attention kernel and eager element-wise kernels as `physics.stack` describes; PyTorch's ring
    bookkeeping where context parallelism runs as a ring (`cp_comm` p2p, `physics.attention`).
    `backward` False (inference): the linear layers' gradient GEMMs are not priced (NaN,
    `physics.linears.linears_times`), the forward's numbers the same. `gathered_shards`: the ranks
    whose own rows a recipe casts before sequence parallelism's quantised all-gather
    (`physics.casts.cast_times`). `training` False: a serving engine's forward, whose norms do not
    write Transformer Engine's FP8 tensor (`physics.casts.norm_writes_fp8`); `norm_shards`: the ranks
    sequence parallelism splits the norms over (default `gathered_shards`); `mlp_norm_fed` False: a
    mixture-of-experts layer, whose dense MLP (shared experts) the pre-MLP norm does not feed
    (`physics.casts._norm_fed`); `norm_returned`: the QKV and MLP-up norms whose output is also
    returned in 16 bits (LoRA's, `physics.casts.Returned`): no FP8 norm write there. `cublas_before_11`:
    linears with a dimension not a multiple of 16 bytes on the CUDA cores (`physics.gemm_align`)."""
    flash = np.asarray(flash, dtype=bool)
    qkv, proj, up, down, *extra = linears_times(
        (*fwd.gemms, *fwd.extra), gpu, precision, fused_accumulation, accumulate_bytes, fp8_recipe, backward,
        cublas_before_11,
    )  # fmt: skip
    mlp = np.asarray(fwd.has_mlp, dtype=float)
    if not np.all(mlp == 1.0):  # no dense MLP: nothing to time
        up, down = (GemmTimes(*(mlp * x for x in (g.forward_s, g.input_grad_s, g.weight_grad_s))) for g in (up, down))
    others = GemmTimes(*(sum(getattr(g, f) for g in extra) for f in ("forward_s", "input_grad_s", "weight_grad_s")))
    attn_p = attention_precision(precision)
    softmax = memory_s(fwd.softmax_bytes, gpu, kernels=SOFTMAX_KERNELS)
    scores, context = gemms_s((fwd.scores, fwd.context), gpu, attn_p)
    bmm = scores + context
    # FlashAttention-2 padded to its kernel's head dimension, that kernel's speed on Hopper (flash2_head_dim_factors;
    # FlashAttention-3/4 their own, and their own ramps: `physics.attention_flash34`)
    attention_kernel = priced_kernel(gpu, attention_kernel)  # FA3/FA4's packages running FA2's code: flash2
    hd_fwd, hd_bwd = flash2_head_dim_factors(gpu, attention_kernel, fwd.scores.k)
    profile = flash34_profile(gpu, attention_kernel)
    relative = attention_relative_efficiency(gpu, attention_kernel) * hd_fwd
    # the fused kernel below its plateau: short sequences, the causal mask, ring steps (`physics.attention`)
    s_q, s_kv = fwd.scores.m, fwd.scores.n
    if fwd.document_len is not None:  # packed sequences: L-token causal calls (`physics.flops.layer_forward`)
        s_q = s_kv = fwd.document_len
    worked = fwd.flash.flops * fwd.causal_fraction
    fused = roofline_s(worked, fwd.flash.bytes, gpu, attn_p, relative / forward_slowdown(s_q, s_kv, fwd.cp, profile))
    relative_bwd = attention_backward_relative_efficiency(gpu, attention_kernel) * hd_bwd
    slow_bwd = backward_slowdown(s_q, s_kv, fwd.cp, profile)
    fused_bwd = roofline_s(worked, fwd.flash.bytes, gpu, attn_p, relative_bwd / slow_bwd)
    if fwd.window_flash is not None:  # sliding-window layers (`physics.flops._windowed`), by their share
        fused, fused_bwd = _windowed_mean(fwd, gpu, attn_p, relative, relative_bwd, fused, fused_bwd, profile)
    attention = np.where(flash, fused, bmm + softmax)
    elementwise = memory_s(fwd.elementwise_bytes, gpu, fwd.elementwise_kernels)
    eager = np.asarray(eager, dtype=bool)
    if np.any(eager) and fwd.eager_elementwise_bytes is not None:
        from shardwise.physics.stack import EAGER_ELEMENTWISE_KERNELS

        unfused = memory_s(fwd.eager_elementwise_bytes, gpu, EAGER_ELEMENTWISE_KERNELS)
        elementwise = np.where(eager, unfused, elementwise)
    attention_bwd = np.where(
        flash, FLASH_BACKWARD_RATIO * fused_bwd, BACKWARD_GEMM_RATIO * bmm + BACKWARD_MEMORY_RATIO * softmax
    )
    ring = cp_comm == "p2p" and np.any(np.asarray(fwd.cp) > 1)  # all_gather, a2a: one call, no merge
    if attention_kernel in TORCH_RING_KERNELS and ring:  # PyTorch's ring (`physics.attention`)
        ring_f, ring_b = torch_ring_s(fwd, gpu)
        attention, attention_bwd = attention + ring_f, attention_bwd + ring_b
    core = np.where(flash, attention, bmm + softmax)
    if fwd.mamba is not None:  # a hybrid's mean layer (`physics.mamba`): each mixer by its share
        qkv, proj, attention, attention_bwd, core = _hybrid_mixers(
            fwd, gpu, precision, qkv, proj, attention, attention_bwd, core,
            (fused_accumulation, accumulate_bytes, fp8_recipe, backward),
        )  # fmt: skip
    cast_f = cast_b = weight_cast = 0.0
    elementwise_f = elementwise
    if is_fp8(precision) and fp8_recipes.is_torchao(fp8_recipe):
        cast_f, cast_b = torchao_cast_times(fwd, gpu, precision, fp8_recipe)
    elif is_narrow(precision):
        per_element = cast_bytes_per_element(precision, fp8_recipe, gpu.fp8_any_layout)
        kernels, saving = cast_kernels_per_tensor(precision, fp8_recipe), norm_fed_saving(precision, fp8_recipe)
        # per-tensor FP8 gathered quantised on a GPU without any-layout FP8 GEMMs: transposed after the gather
        transpose = np.where(
            (precision == "fp8") & ~np.asarray(gpu.fp8_any_layout, dtype=bool),
            FP8_GATHERED_TRANSPOSE_BYTES_PER_ELEMENT,
            0.0,
        )
        norm_fp8 = training and norm_writes_fp8(precision, fp8_recipe)  # TE's training modules
        cast_f, cast_b = cast_times(
            fwd, gpu, per_element, kernels, saving, gathered_shards, transpose, norm_fp8, mlp_norm_fed, norm_returned
        )
        if norm_fp8:  # the norm writes the FP8 input itself: 1 byte an element out of it, not 2 (not in its backward)
            fused_f = memory_s(
                fwd.elementwise_bytes
                - norm_fp8_saved_bytes(
                    fwd, gathered_shards if norm_shards is None else norm_shards, mlp_norm_fed, norm_returned
                ),
                gpu,
                fwd.elementwise_kernels,
            )
            elementwise_f = np.where(eager, elementwise, fused_f) if np.any(eager) else fused_f
        if is_fp8(precision) and fp8_recipes.casts_weights_per_use(fp8_recipe):  # Transformer Engine's JAX path
            weight_cast = weight_cast_s(fwd, gpu, precision)
            cast_f = cast_f + weight_cast
    return LayerTimes(
        qkv=qkv,
        proj=proj,
        up=up,
        down=down,
        attention_s=attention,
        attention_bwd_s=attention_bwd,
        elementwise_s=elementwise_f,
        elementwise_bwd_s=BACKWARD_MEMORY_RATIO * elementwise,
        # Selective recomputation redoes the attention core: its score matrices with standard
        # attention; with a fused (flash) kernel, its forward again -- Megatron-Core checkpoints
        # the core attention module whatever its kernel (transformer/attention.py,
        # `_checkpointed_attention_forward`: tensor_parallel.checkpoint reruns the forward before
        # the backward). Megatron-Bridge's Moonlight 16B study measures +3.9% a step for `core_attn`
        # under fused attention (skills/nemo-mbridge-perf-activation-recompute/SKILL.md).
        attention_core_s=core,
        cast_f_s=cast_f,
        cast_b_s=cast_b,
        extra=others,
        weight_cast_s=weight_cast,
    )


def _hybrid_mixers(
    fwd: LayerForward,
    gpu: Gpu,
    precision: str,
    qkv: GemmTimes,
    proj: GemmTimes,
    attention: Number,
    attention_bwd: Number,
    core: Number,
    linear_args: tuple,
) -> tuple[GemmTimes, GemmTimes, Number, Number, Number]:
    """A hybrid mean layer's mixers: the column-parallel input GEMMs (attention's QKV, Mamba-2's
    in_proj) and the row-parallel output GEMMs each weighted by its share and summed into the QKV
    and output-projection slots, whose TP collectives they share (`engines.costs.layer_cost`);
    the attention core by the attention share plus the SSD scan by the Mamba-2 share
    (`physics.mamba`: each of its kernels a roofline at SSD_GEMM_FRACTION of the GPU's GEMM
    rate, in 16 bits under FP8 as attention; its backward's kernels likewise, with the conv1d's
    forward redone and the layout copies, `MambaForward.recompute`, `copies_*`). Selective
    recomputation of the core attention redoes attention alone."""
    from shardwise.physics import mamba as mb

    mix, a = fwd.mamba, fwd.attention_share
    assert mix is not None
    m = mix.share
    m_in, m_out = linears_times((mix.in_proj, mix.out_proj), gpu, precision, *linear_args)

    def mean(x: GemmTimes, y: GemmTimes) -> GemmTimes:
        names = ("forward_s", "input_grad_s", "weight_grad_s")
        return GemmTimes(*(a * getattr(x, n) + m * getattr(y, n) for n in names))

    p16 = attention_precision(precision)
    scan = sum(roofline_s(f, b, gpu, p16, mb.SSD_GEMM_FRACTION) for f, b in mix.ssd)
    scan_bwd = sum(roofline_s(f, b, gpu, p16, mb.SSD_GEMM_FRACTION) for f, b in mix.ssd_backward)
    # the training path's memory-bound extras (`physics.mamba.mamba_forward`): the layout copies,
    # and in the backward the conv1d's forward redone
    (copy_f, n_f), (redo, n_r), (copy_b, n_b) = mix.copies_forward, mix.recompute, mix.copies_backward
    scan = scan + memory_s(copy_f, gpu, n_f)
    scan_bwd = scan_bwd + memory_s(redo, gpu, n_r) + memory_s(copy_b, gpu, n_b)
    return (
        mean(qkv, m_in),
        mean(proj, m_out),
        a * attention + m * scan,
        a * attention_bwd + m * scan_bwd,
        a * core,
    )
