"""SGLang's memory reserve follows the chunked-prefill size the user gives (`--max-batched-tokens`,
SGLang's --chunked-prefill-size): server_args.py `_handle_gpu_memory_settings` reserves
512 + 1.5 max(chunked_prefill_size, 2048) + 2 cuda_graph_max_bs + 1024 tp pp / 8 MiB, at least
10 GiB on GPUs over 60 GiB, from `self.chunked_prefill_size` as given (servefix #2: a given chunk
was priced, and its --mem-fraction-static written, at the default chunk's reserve)."""

from __future__ import annotations

import json
import re

import pytest

from shardwise.engines.engine_presets import MIB, kv_cache_bytes

ARGS = ["serve", "--model", "llama3-8b", "--system", "dgx-h100", "--num-gpus", "1", "--plan", "tp=1"]


def _sglang_fraction(gpu_mib: float, chunk: int) -> float:
    """SGLang's own rule at tp 1, pp 1 (cuda_graph_max_bs 256 below tp 4), written here from its source."""
    reserved = 512 + 1.5 * max(chunk, 2048) + 2 * 256 + 1024 / 8
    reserved = max(reserved, 10 * 1024) if gpu_mib > 60 * 1024 else reserved
    return round((gpu_mib - reserved) / gpu_mib, 3)


@pytest.mark.parametrize("chunk", [1024, 8192, 32768])
def test_the_written_fraction_is_sglangs_rule_at_the_chunk_given(cli, chunk):
    code, out, err = cli([*ARGS, "--framework", "sglang", "--max-batched-tokens", str(chunk), "--emit", "sglang"])
    assert code == 0, err
    assert f"--chunked-prefill-size {chunk}" in out
    written = float(re.search(r"--mem-fraction-static ([0-9.]+)", out).group(1))
    from shardwise.presets import gpu

    assert written == _sglang_fraction(gpu("h100-sxm5-80gb").memory_bytes / MIB, chunk)


def test_a_larger_chunk_leaves_sglang_a_smaller_kv_cache(cli):
    """32,768 tokens reserve 49 GiB of activations on an H100: the KV cache holds fewer requests;
    vLLM's pool (0.9 of the GPU, its activation peak profiled) does not follow the chunk here."""
    held = {}
    for engine in ("sglang", "vllm"):
        for chunk in (None, 32768):
            extra = [] if chunk is None else ["--max-batched-tokens", str(chunk)]
            code, out, err = cli([*ARGS, "--framework", engine, *extra, "--json"])
            assert code == 0, err
            held[engine, chunk] = json.loads(out)["plans"][0]["max_batch_per_replica"]
    assert held["sglang", 32768] < 0.5 * held["sglang", None]
    assert held["vllm", 32768] == held["vllm", None]


def test_the_reserve_takes_the_chunk_as_given():
    """`kv_cache_bytes` at a chunk: 1.5 MiB a token above 2,048 once past the 10 GiB floor."""
    m, w = 80 * 1024**3, 16e9
    small, large = (float(kv_cache_bytes("sglang", m, w, 1, 1, chunk_tokens=c)) for c in (16384, 32768))
    assert small - large == pytest.approx(1.5 * 16384 * MIB)
    assert float(kv_cache_bytes("sglang", m, w, 1, 1)) == float(kv_cache_bytes("sglang", m, w, 1, 1, chunk_tokens=8192))
