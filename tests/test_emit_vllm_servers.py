"""`serve --emit vllm` for data-parallel attention over several servers: one `vllm serve` a
server (vLLM's data-parallel deployment docs, internal load balancing), and the all2all backend
written out as priced. tools/check_emit.py runs each command through vLLM 0.34's own serve
parser and `create_engine_config`; these are the rules it found, without vLLM."""

from __future__ import annotations

import json
import shlex

import pytest

from shardwise import presets
from shardwise.emit import EmitError, vllm_launch
from shardwise.emit.vllm import RPC_PORT, data_parallel_nodes, deepep_low_latency_bytes

DSV3 = ["serve", "--model", "deepseek-v3", "--system", "dgx-h200", "--num-gpus", "16", "--framework", "vllm",
        "--weight-precision", "fp8", "--concurrency", "256", "--input-len", "1000", "--output-len", "1000",
        "--emit", "vllm", "--hf-id", "deepseek-ai/DeepSeek-V3"]  # fmt: skip


def _flags(argv: list[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for j, word in enumerate(argv):
        if word.startswith("--"):
            nxt = argv[j + 1] if j + 1 < len(argv) else None
            out[word] = None if nxt is None or nxt.startswith("--") else nxt
    return out


def n_argv_text(nodes: list[dict]) -> str:
    return " ".join(" ".join(n["argv"]) for n in nodes)


def test_two_servers_get_a_head_command_and_a_headless_one(cli):
    code, out, err = cli([*DSV3, "--plan", "tp=1,ep=16", "--json"])
    assert code == 0, err
    launch = json.loads(out)["plans"][0]["launch"]
    nodes = launch["nodes"]
    assert [n["node"] for n in nodes] == [0, 1] and launch["argv"] == nodes[0]["argv"]
    head, other = (_flags(n["argv"]) for n in nodes)
    for server in (head, other):
        assert server["--data-parallel-size"] == "16" and server["--data-parallel-size-local"] == "8"
        # the placeholder as the user passes it (its sample, for checks without a shell, beside it)
        assert server["--data-parallel-address"] == "$HEAD_ADDR" and launch["placeholders"]["$HEAD_ADDR"]
        assert "127.0.0.1" not in n_argv_text(nodes)
        assert server["--data-parallel-rpc-port"] == RPC_PORT and "--enable-expert-parallel" in server
        assert server["--all2all-backend"] == "allgather_reducescatter"  # what engines.serving priced
        assert server["--tensor-parallel-size"] == "1" and server["--max-num-seqs"] == "16"  # 256 / 16 ranks
    # the head runs the API server and leaves the start rank out: with it vLLM balances its own ranks only
    assert "--headless" not in head and "--data-parallel-start-rank" not in head
    assert "--headless" in other and other["--data-parallel-start-rank"] == "8"
    assert nodes[0]["role"].startswith("head") and nodes[1]["role"].startswith("headless")
    # the shell: each server's command under its own heading, the address left for the user to fill in
    shell = launch["shell"]
    assert shell.count("vllm serve deepseek-ai/DeepSeek-V3") == 2
    assert "# on server 0 of 2: head" in shell and "# on server 1 of 2: headless" in shell
    assert shell.count('--data-parallel-address "$HEAD_ADDR"') == 2
    assert any(t.startswith("$HEAD_ADDR") for t in launch["todo"]) and any("weights" in t for t in launch["todo"])
    words = shlex.split(nodes[1]["command"].replace("\\\n", " "), posix=True)
    assert words[:3] == ["vllm", "serve", "deepseek-ai/DeepSeek-V3"] and words[-1] == "--headless"
    code, text, err = cli([*DSV3, "--plan", "tp=1,ep=16"])  # the text prints the same launch
    assert code == 0 and shell in text


def test_ranks_split_over_servers_by_the_tp_groups_a_server_holds():
    nodes = data_parallel_nodes(tp=4, dp=8, gpus_per_node=8)
    assert len(nodes) == 4 and [n.args[0] for n in nodes] == [("--data-parallel-size-local", "2")] * 4
    starts = [(("--data-parallel-start-rank", str(r)), ("--headless",)) for r in (2, 4, 6)]
    assert [n.args[1:] for n in nodes[1:]] == starts
    last = data_parallel_nodes(tp=2, dp=6, gpus_per_node=8)  # 12 GPUs: a full server and half of one
    assert [n.args[0][1] for n in last] == ["4", "2"] and "ranks 4-5" in last[1].role


def test_one_server_keeps_one_command(cli):
    args = ["serve", "--model", "qwen3-30b-a3b", "--system", "dgx-h100", "--plan", "tp=2,ep=8", "--concurrency", "64",
            "--emit", "vllm", "--hf-id", "Qwen/Qwen3-30B-A3B", "--json"]  # fmt: skip
    code, out, err = cli(args)
    assert code == 0, err
    launch = json.loads(out)["plans"][0]["launch"]
    assert launch["nodes"] == [] and "--headless" not in launch["argv"]
    assert "--data-parallel-address" not in launch["argv"]
    assert _flags(launch["argv"])["--all2all-backend"] == "allgather_reducescatter"
    assert launch["shell"].count("vllm serve") == 1 and "HEAD_ADDR" not in launch["shell"]


@pytest.mark.parametrize(
    ("plan", "gpus", "says"),
    [
        ("tp=1,pp=2,ep=16", 32, "ep=16, pp=2"),  # a pipeline under data-parallel attention
        ("tp=16,ep=32", 32, "tp=16 GPUs must sit in one server of 8"),  # a rank's TP group across servers
        ("tp=2,ep=16", 32, "ep = tp x dp"),  # experts split in two (etp 2)
    ],
)
def test_what_vllm_does_not_run_is_refused_in_one_line(cli, plan, gpus, says):
    args = ["serve", "--model", "qwen3-30b-a3b", "--system", "dgx-h100", "--num-gpus", str(gpus), "--plan", plan,
            "--concurrency", "64", "--emit", "vllm", "--hf-id", "Q/Q"]  # fmt: skip
    code, out, err = cli(args)
    assert code == 2 and out == "" and err.count("\n") == 1 and says in err and "--emit vllm" in err


def test_the_deepep_note_sizes_its_buffer_as_deepep_does():
    """DeepEP's low-latency buffer (csrc/config.hpp LowLatencyLayout) for DeepSeek-V3 (hidden 7168,
    256 experts): 2 x (send + receive), each experts x tokens x (2 h + h/128 x 4) bytes for the
    combine, which is larger than the dispatch's 16 + 2 h: about 122 GB at vLLM's 8192-token budget,
    3.8 GB at the 256 tokens vLLM defaults to under it."""
    msg = 2 * 7168 + 4 * 56
    assert deepep_low_latency_bytes(7168, 256, 8192) == 4 * 256 * 8192 * msg
    assert 3.7e9 < deepep_low_latency_bytes(7168, 256, 256) < 3.9e9
    from shardwise.engines.serving import estimate_serving
    from shardwise.loaders import parse_plan_spec
    from shardwise.requests.serve_plans import scenario
    from shardwise.specs.serving import ServingWorkload

    cluster = presets.system("dgx-h200", nodes=2)
    est = estimate_serving(scenario(presets.model("deepseek-v3"), cluster, parse_plan_spec("tp=1,ep=16")),
                           ServingWorkload(1000, 1000, batch=256, weight_precision="fp8", engine="vllm"))  # fmt: skip
    notes = " ".join(vllm_launch(est.scenario, est.workload, "deepseek-ai/DeepSeek-V3").notes)
    assert "--all2all-backend deepep_low_latency" in notes and "--all2all-backend deepep_high_throughput" in notes
    assert "allgather_reducescatter" in notes and "GB per GPU here" in notes
    with pytest.raises(EmitError, match="--hf-id"):
        vllm_launch(est.scenario, est.workload, None)
