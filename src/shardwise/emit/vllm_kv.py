"""One replica's KV cache as vLLM sizes it at start, for `serve --emit vllm`'s --max-model-len.

vLLM 0.34 (V1 engine) cuts the memory its profile leaves (`available_memory`, per GPU) into
blocks of `block_size` tokens per layer: `num_gpu_blocks = available // page_size // layers`, a
page being one layer's block, block_size x the layer's KV bytes per token
(vllm/v1/core/kv_cache_utils.py `get_num_blocks`; the ranks of a pipeline take the fewest). It
starts only where one request of --max-model-len fits: the bytes it may hold, summed over the
layers, at most the memory left (`check_enough_kv_cache_memory`, "To serve at least one request with
the models's max seq len ..."), a full-attention layer holding cdiv(max_model_len, block_size)
pages and a sliding-window one cdiv(min(window - 1 + max_num_batched_tokens, max_model_len),
block_size) + 1 (vllm/v1/kv_cache_interface.py `FullAttentionSpec` / `SlidingWindowSpec.
max_memory_usage_bytes`; read at vllm-project/vllm@001cabc1). With full attention alone that is
cdiv(max_model_len, block_size) <= num_gpu_blocks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from shardwise.engines.inflight_sim import KV_BLOCK_TOKENS

# vLLM's CUDA platform raises the block for a latent-attention (MLA) model where its default MLA kernel
# wants more (vllm/platforms/cuda.py@002db495 `check_and_update_config`): FlashMLA on Hopper ("Forcing kv
# cache block size to 64 for FlashMLA backend"), FlashInfer MLA on data-centre Blackwell where the
# model's qk_nope_head_dim is 128 (DeepSeek-V2/V3, Kimi K2: 64 too); an A100 runs Triton MLA at 16.
# (CUTLASS MLA, Blackwell's default for other head sizes, takes 128: not priced, no such preset.)
MLA_BLOCK_TOKENS = 64


def block_tokens(model: Any, gpu: Any) -> int:
    """vLLM's KV block on `gpu` for `model`: 16 tokens (CacheConfig.block_size on CUDA), 64 for a
    latent-attention model on an NVIDIA Hopper or Blackwell GPU (`MLA_BLOCK_TOKENS`)."""
    mla = bool(getattr(model, "kv_lora_rank", 0))
    flashmla = gpu.vendor == "nvidia" and gpu.gemm_kernels in ("sm90", "sm100")
    return MLA_BLOCK_TOKENS if mla and flashmla else KV_BLOCK_TOKENS


@dataclass(frozen=True)
class KvPool:
    """The KV cache of one replica's fullest GPU (the stage whose free memory holds the fewest blocks):
    `free_bytes` what vLLM's profile leaves it (available_memory), `bytes_per_token` the KV bytes of
    one token in all its layers were every layer to keep every token (the model's KV bytes per token
    x its stage's layers, / tp), `block` tokens a block, and the model's sliding window (`window`
    tokens in `window_share` of the layers; 0: none)."""

    free_bytes: float
    bytes_per_token: float
    block: int = KV_BLOCK_TOKENS
    window: int = 0
    window_share: float = 0.0

    @property
    def blocks(self) -> int:
        """vLLM's num_gpu_blocks: whole blocks of every layer in the free memory (with sliding-window
        layers, those of a full-attention model of the same bytes: vLLM then pools its layer groups'
        blocks, `get_kv_cache_config_from_groups`, and `fits` reads bytes as its check does)."""
        page = self.block * self.bytes_per_token
        return max(int(self.free_bytes // page), 0) if page > 0 else 0

    def needed_bytes(self, max_model_len: int, max_batched_tokens: int) -> float:
        """What vLLM reserves to start at `max_model_len`: each layer's pages of one such request."""
        full = math.ceil(max_model_len / self.block)
        pages = (1.0 - self.window_share) * full
        if self.window and self.window_share:
            held = min(self.window - 1 + max_batched_tokens, max_model_len)
            pages += self.window_share * (math.ceil(held / self.block) + 1)
        return pages * self.block * self.bytes_per_token

    def fits(self, max_model_len: int, max_batched_tokens: int) -> bool:
        """Whether vLLM starts at `max_model_len` (`check_enough_kv_cache_memory`)."""
        return self.needed_bytes(max_model_len, max_batched_tokens) <= self.free_bytes


def kv_pool(est: Any) -> KvPool:
    """The pool of a priced serving estimate (`engines.serving.ServingEstimate`, in-flight or static):
    the free memory under the engine's rule, at the token budget it was priced with, and the KV
    bytes per token of the GPU that holds the fewest (`engines.serving.memory_per_gpu`)."""
    from shardwise.engines.serving import kv_cache_free_bytes, memory_per_gpu
    from shardwise.physics.flops import kv_cache_tokens

    scn, wl = est.scenario, est.workload
    weights, kv_per_seq = memory_per_gpu(scn, wl)
    budget = getattr(est, "max_batched_tokens", None) if getattr(est, "batching", "static") == "inflight" else None
    free = float(kv_cache_free_bytes(scn, wl, weights, budget))
    m = scn.model
    per_token = float(kv_per_seq) / float(kv_cache_tokens(m, int(wl.input_len) + int(wl.output_len)))
    share = float(m.sliding_share) if m.sliding_window else 0.0
    return KvPool(max(free, 0.0), per_token, block_tokens(m, scn.cluster.gpu), int(m.sliding_window or 0), share)
