"""Review 44's leftover 2: `serve --emit vllm`'s --max-model-len is checked as vLLM checks it at start,
in whole KV blocks (`emit.vllm_kv`: num_gpu_blocks = available // page // layers; one request of
max_model_len needs cdiv(max_model_len, block) pages a full-attention layer). Before, the check read
the pool as the priced requests it holds whole (max batch x prompt + output), which refused a context
the blocks hold (22,800 tokens where vLLM's 1,429 blocks hold 22,864, read as 35 x 640 = 22,400)."""

from __future__ import annotations

import json
import math
import re

import pytest

from shardwise import presets
from shardwise.emit.vllm_kv import KV_BLOCK_TOKENS, MLA_BLOCK_TOKENS, KvPool, block_tokens

SERVE = ["serve", "--system", "dgx-h100", "--framework", "vllm", "--plan", "tp=2", "--emit", "vllm"]


def test_the_pool_in_blocks():
    pool = KvPool(free_bytes=1000.5 * 16 * 3.0, bytes_per_token=3.0)
    assert pool.blocks == 1000
    assert pool.fits(16_000, 8192) and pool.fits(15_985, 8192)
    assert not pool.fits(16_001, 8192)  # one token past the blocks: a whole block more (vLLM refuses)
    # a sliding-window half: those layers hold cdiv(min(w - 1 + budget, L), block) + 1 pages (SlidingWindowSpec)
    swa = KvPool(free_bytes=1e9, bytes_per_token=2.0, window=4096, window_share=0.5)
    want = (0.5 * math.ceil(100_000 / 16) + 0.5 * (math.ceil((4095 + 8192) / 16) + 1)) * 16 * 2.0
    assert swa.needed_bytes(100_000, 8192) == pytest.approx(want)
    assert swa.needed_bytes(1000, 8192) == pytest.approx((0.5 * 63 + 0.5 * 64) * 16 * 2.0)


def test_vllm_blocks_of_latent_attention():
    deepseek, llama = presets.model("deepseek-v3"), presets.model("llama3-70b")
    assert block_tokens(deepseek, presets.gpu("h100-sxm5-80gb")) == MLA_BLOCK_TOKENS  # FlashMLA
    assert block_tokens(deepseek, presets.gpu("a100-sxm4-80gb")) == KV_BLOCK_TOKENS  # Triton MLA
    assert block_tokens(llama, presets.gpu("h100-sxm5-80gb")) == KV_BLOCK_TOKENS


def _launch(cli, model: str) -> tuple[str, dict]:
    code, out, err = cli([*SERVE, "--model", model, "--hf-id", "org/m", "--json"])
    assert code == 0, err
    plan = json.loads(out)["plans"][0]
    return " ".join(plan["launch"]["argv"]), plan


def test_max_model_len_is_the_context_the_blocks_hold(cli, tmp_path):
    _, plan = _launch(cli, "llama3.1-70b")
    note = next(n for n in plan["launch"]["notes"] if n.startswith("--max-model-len"))
    blocks = int(re.search(r"\(([\d,]+) blocks of 16 tokens", note).group(1).replace(",", ""))
    holds = blocks * KV_BLOCK_TOKENS
    whole = int(plan["max_batch_per_replica"]) * 640  # the old reading: requests of the priced 512 + 128
    assert whole < holds  # the blocks hold more than whole priced requests
    model = tmp_path / "m.yaml"
    for context, emitted in ((holds, holds), (holds - KV_BLOCK_TOKENS + 1, holds - 15), (holds + 1, 640)):
        model.write_text(f"name: my-70b\nlike: llama3.1-70b\nmax_position_embeddings: {context}\n")
        argv, _ = _launch(cli, str(model))
        assert f"--max-model-len {emitted} " in argv + " ", (context, argv)
