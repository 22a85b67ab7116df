"""`shardwise validate collectives` and NVLink SHARP (NVLS): the collective model against the
published curves it lists, and the NVLS term's physics."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwise import presets
from shardwise.analyses.collective_validation import curves, summary, validate_collectives
from shardwise.physics.collectives import Fabric, Group


@pytest.fixture(scope="module")
def points():
    return validate_collectives()


def test_every_listed_curve_finds_its_rows(points):
    keys = {p.curve for p in points}
    assert [c.key for c in curves() if c.key not in keys] == []
    assert len(points) >= 230
    assert {c.split for c in curves()} == {"dev", "holdout"}
    assert all(p.predicted_s > 0 and p.measured_s > 0 for p in points)


def test_measured_bus_bandwidth_is_the_published_one(points):
    # a curve given as bus bandwidth is turned into a time and back without loss
    p = next(p for p in points if p.curve == "h200-nvls" and p.ranks == 8)
    assert p.bus_bandwidth_gb_per_s(p.measured_s) == pytest.approx(473.1)


def test_nvls_curves_untouched_by_any_fit_are_within_ten_percent(points):
    """NVLS from NCCL's nvlsEfficiency and the (1 + 1/p) n traffic per direction, no constant
    fitted: the H200/B200 sweeps over 4-8 GPUs and the H100 peaks with NVLS (holdout)."""
    nvls = [p for p in points if p.curve in ("h200-nvls", "b200-nvls", "gtc-h100-nvls", "h100-nvls")]
    assert len(nvls) == 12 and all(p.split == "holdout" for p in nvls)
    assert max(abs(p.error) for p in nvls) < 0.12
    assert summary(nvls)["mape"] < 0.06


def test_forced_rings_are_priced_without_nvls(points):
    ring = [p for p in points if p.curve in ("h200-ring", "b200-ring", "gtc-h100")]
    assert len(ring) == 11 and max(abs(p.error) for p in ring) < 0.05


def test_nvls_is_the_faster_choice_only_inside_one_server():
    h100 = presets.system("dgx-h100", 2)
    on, off = Fabric.of(h100), Fabric.of(h100.with_(nvls=False))
    n = 2.0**30
    inside_on, inside_off = float(on.group(8, 8).all_reduce(n)), float(off.group(8, 8).all_reduce(n))
    assert inside_on < 0.85 * inside_off  # busbw ~515 against the ring's ~370 GB/s
    assert float(on.group(16, 8).all_reduce(n)) == float(off.group(16, 8).all_reduce(n))
    # reduce-scatter and all-gather stay rings, and A100 (no NVLS) is unchanged
    assert float(on.group(8, 8).reduce_scatter(n)) == float(off.group(8, 8).reduce_scatter(n))
    a100 = presets.system("dgx-a100")
    assert float(Fabric.of(a100).group(8, 8).all_reduce(n)) == float(
        Fabric.of(a100.with_(nvls=False)).group(8, 8).all_reduce(n)
    )


@settings(max_examples=60, deadline=None)
@given(n=st.floats(0.0, 2e10), ranks=st.sampled_from([1, 2, 4, 5, 8]), system=st.sampled_from(["dgx-h100", "dgx-b200"]))
def test_nvls_never_makes_an_all_reduce_slower(n, ranks, system):
    cluster = presets.system(system)
    on = float(Fabric.of(cluster).group(ranks, 8).all_reduce(n))
    off = float(Fabric.of(cluster.with_(nvls=False)).group(ranks, 8).all_reduce(n))
    assert np.isfinite(on) and on <= off


def test_arrays_of_group_sizes_price_nvls_per_element():
    link = presets.link("nvlink4")
    sizes = np.array([2, 4, 8, 16])
    together = Group(sizes, 8, link, presets.link("ib-ndr")).all_reduce(1e9)
    alone = [float(Group(int(p), 8, link, presets.link("ib-ndr")).all_reduce(1e9)) for p in sizes]
    assert together == pytest.approx(alone)


def test_cli_nvls_switch_and_system_field(cli, tmp_path):
    args = ["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--tp", "8", "--global-batch", "8"]
    args += ["--micro-batch", "4", "--no-sequence-parallel", "--json"]  # SP would reduce-scatter, not all-reduce
    on, off = (json.loads(cli(a)[1])["step_time_s"] for a in (args, [*args, "--nvls", "off"]))
    # TP without sequence parallelism all-reduces 268 MB inside the server, where NVLS beats LL128
    assert off > on
    code, _, err = cli([*args, "--nvls", "maybe"])
    assert code == 2 and "--nvls" in err
    system = tmp_path / "box.yaml"
    system.write_text("gpu: h100-sxm5-80gb\ngpus_per_node: 8\nintra_node_link: nvlink4\nnvls: false\n")
    from_file = json.loads(cli([*args[:3], "--system", str(system), *args[5:]])[1])["step_time_s"]
    assert from_file == pytest.approx(off)


def test_validate_collectives_cli(cli):
    code, out, _ = cli(["validate", "collectives", "--json"])
    assert code == 0
    data = json.loads(out)
    assert set(data["splits"]) == {"dev", "holdout"} and len(data["points"]) >= 230
    code, out, _ = cli(["validate", "collectives", "--markdown", "--rows", "holdout"])
    assert code == 0 and "| dgxc-h100 |" in out and "[holdout]" in out and "[dev]" not in out
    code, _, err = cli(["validate", "collectives", "inference"])
    assert code == 2 and "give it alone" in err


def test_sglang_serves_without_nvls_as_it_starts_nccl(cli):
    args = [
        "serve",
        "--model",
        "llama3-70b",
        "--system",
        "dgx-h100",
        "--plan",
        "tp=8",
        "--input-len",
        "8192",
        "--output-len",
        "8",
        "--batching",
        "static",
        "--batch",
        "4",  # prefill all-reduces of 537 MB: NVLS's size (below ~200 MB LL128 is faster)
        "--no-custom-all-reduce",
        "--json",
    ]
    ttft = {
        extra: json.loads(cli([*args, *extra.split()])[1])["plans"][0]["ttft_s"]
        for extra in ("--framework sglang", "--framework sglang --nvls on", "--framework vllm")
    }
    assert ttft["--framework sglang"] > ttft["--framework sglang --nvls on"]
    # the same all-reduces as vLLM's; vLLM fuses the norms into FlashInfer's all-reduce only below
    # fi_allreduce_fusion_max_size_mb (0.5 MiB at tp 8 on Hopper, `engines.engine_kernels`), so on
    # these 537 MB prefill messages its layer has SGLang's kernels: no gap (160 us before the size switch)
    gap = ttft["--framework sglang --nvls on"] - ttft["--framework vllm"]
    assert gap == pytest.approx(0.0, abs=1e-9)
