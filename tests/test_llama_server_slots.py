"""llama.cpp is priced with llama-server's slots (review 50 #3): 4 at once without -np (n_parallel
auto), the concurrency asked where that is more (as launched with -np N -c N x tokens)."""

from __future__ import annotations

import json

from shardwise.engines.engine_describe import defaults_on, llama_server_note
from shardwise.engines.engine_presets import ENGINES, LLAMA_SERVER_SLOTS, max_sequences

Q4 = ["serve", "--model", "llama3.1-8b", "--system", "rtx4090-8x", "--num-gpus", "1", "--framework", "llama.cpp"]
Q4 += ["--weight-precision", "q4_k", "--plan", "tp=1"]


def test_llama_server_runs_four_slots_unless_asked_for_more():
    assert LLAMA_SERVER_SLOTS == 4
    assert max_sequences("llama.cpp", 24e9, "rtx-4090") == 4
    assert max_sequences("llama.cpp", 24e9, "rtx-4090", concurrency=32) == 32
    assert max_sequences("llama.cpp", 24e9, "rtx-4090", concurrency=2) == 4
    assert max_sequences("vllm", 24e9, "rtx-4090", concurrency=5000) == 256  # others: their own default
    assert all(row["max_sequences"] == 4 for row in defaults_on(ENGINES["llama.cpp"]).values())


def test_the_note_names_the_flags_only_where_the_slots_matter():
    assert llama_server_note("vllm", 32, False, 640) == ""
    assert llama_server_note("llama.cpp", 3, False, 640) == ""
    assert "-np 32 -c 20,480" in llama_server_note("llama.cpp", 32, False, 640)  # one replica
    assert "at most 4" in llama_server_note("llama.cpp", None, True, 640)


def test_max_throughput_runs_four_and_concurrency_runs_what_it_asks(cli):
    code, out, _ = cli([*Q4, "--max-throughput", "--json"])
    assert code == 0
    row = json.loads(out)["plans"][0]
    assert round(row["mean_running"]) == 4 and row["max_batch_per_replica"] > 100  # the KV cache holds more
    code, out, err = cli([*Q4, "--concurrency", "32"])
    assert code == 0 and "-np 32 -c 20,480" in out + err
    assert " 32 " in next(line for line in out.splitlines() if line.startswith(" tp=1"))


def test_the_latency_search_tries_the_engines_formats_and_says_which(cli):
    """Review 50 #5: under llama.cpp the search tried bf16 alone (Llama 3.1 70B on 8 RTX 4090: 16
    tokens/s per GPU); it tries the GGUF blocks and says so, and its best load may pass llama-server's
    4 default slots (priced as launched with -np for it)."""
    argv = ["serve", "--model", "llama3.1-70b", "--system", "rtx4090-8x", "--framework", "llama.cpp"]
    code, out, _ = cli([*argv, "--ttft-max", "2s", "--tpot-max", "100ms", "--json"])
    assert code == 0
    data = json.loads(out)
    assert {o["weight_precision"] for o in data["options"]} == {"bf16", "q8_0", "q4_k"}
    best = data["options"][0]
    assert best["weight_precision"] == "q4_k" and best["requests_in_flight_per_replica"] > LLAMA_SERVER_SLOTS
    assert any(n.startswith("weights searched: bf16, q8_0, q4_k") for n in data["notes"])
