"""Cloud instance presets: the GPU and network each provider documents, and what their measured
networks do to a collective (presets/links.yaml, presets/systems.yaml)."""

import pytest

from shardwise import presets
from shardwise.physics.collectives import Fabric

GBIT = 1e9 / 8  # bytes per second in one Gb/s


@pytest.mark.parametrize(
    ("system", "gpu", "gpu_network_gbps"),
    [
        # GPU NICs per instance x their rate, as the providers' instance pages state them
        ("gcp-a3-high", "h100-sxm5-80gb", 4 * 200),  # a3-highgpu-8g: 4 x 200 Gbps GPUDirect-TCPX
        ("gcp-a3-mega", "h100-sxm5-80gb", 8 * 200),  # a3-megagpu-8g: 8 x 200 Gbps GPUDirect-TCPXO
        ("gcp-a3-ultra", "h200-sxm-141gb", 8 * 400),  # a3-ultragpu-8g: 8 x 400 Gbps RoCE
        ("gcp-a4", "b200-sxm-180gb", 8 * 400),
        ("aws-p4d", "a100-sxm4-40gb", 4 * 100),  # p4d.24xlarge: 400 Gbps EFA
        ("aws-p4de", "a100-sxm4-80gb", 4 * 100),
        ("aws-p5", "h100-sxm5-80gb", 32 * 100),  # p5.48xlarge: 3,200 Gbps EFA v2
        ("aws-p5e", "h200-sxm-141gb", 32 * 100),
        ("aws-p5en", "h200-sxm-141gb", 16 * 200),  # p5en: 16 x 200 Gbps EFA v3
        ("aws-p6-b200", "b200-sxm-180gb", 8 * 400),
        ("azure-nd-a100-v4", "a100-sxm4-40gb", 8 * 200),  # 8 x HDR InfiniBand
        ("azure-ndm-a100-v4", "a100-sxm4-80gb", 8 * 200),
        ("azure-nd-h100-v5", "h100-sxm5-80gb", 8 * 400),  # 8 x NDR InfiniBand
        ("azure-nd-h200-v5", "h200-sxm-141gb", 8 * 400),
    ],
)
def test_cloud_instances_have_their_documented_gpus_and_network_rate(system, gpu, gpu_network_gbps):
    cluster = presets.system(system)
    assert cluster.gpu.name == gpu
    assert cluster.gpus_per_node == 8
    per_gpu = gpu_network_gbps / 8 * GBIT  # each GPU's share of the instance's GPU network, line rate
    assert cluster.inter_node_link.bandwidth_bytes_per_s == pytest.approx(per_gpu)


@pytest.mark.parametrize(
    ("link", "sustained_gb_s_per_nic"),
    [
        # the data rate the cited 2-node nccl-tests runs sustain per NIC (links.yaml sources)
        ("gcp-tcpx-200g", 67.0 / 4),  # ring busbw 65.7-67.8 GB/s over 4 NICs (SkyPilot, 2 x a3-highgpu-8g)
        ("gcp-tcpxo-200g", 180.7 / 8),  # tree algbw 180.7 GB/s over 8 NICs (2 x A3 Mega)
        ("gcp-rdma-400g", 325.5 / 8),  # all-gather busbw 325.5 GB/s over 8 NICs (2 x a3-ultragpu-8g)
        ("efa-v1-100g", 41.8 / 4),  # tree algbw 41.8 GB/s over 4 EFA (2 x p4de, AWS's README)
        ("efa-v2-4x100g", 259.8 / 8),  # tree algbw 259.8 GB/s over 8 GPUs' 4-port bundles (2 x p5)
    ],
)
def test_cloud_links_sustain_the_measured_rate(link, sustained_gb_s_per_nic):
    nic = presets.link(link)
    assert nic.effective_bandwidth_bytes_per_s == pytest.approx(sustained_gb_s_per_nic * 1e9, rel=0.02)


@pytest.mark.parametrize(
    ("system", "measured_us"),
    [
        # 8-byte all-reduce on 2 x 8 GPUs, the cited runs' first line
        ("gcp-a3-mega", (123.0, 136.0)),
        ("aws-p4de", (160.6, 164.3)),
        ("aws-p5", (64.8, 74.1)),
    ],
)
def test_small_all_reduce_across_two_cloud_instances_takes_the_measured_time(system, measured_us):
    group = Fabric.of(presets.system(system, nodes=2)).group(16, 8)
    low, high = measured_us
    assert 0.9 * low <= group.all_reduce(8.0) * 1e6 <= 1.1 * high


def test_tcp_and_efa_pay_more_per_message_than_infiniband():
    ib = presets.link("ib-ndr").latency_s
    for name in ("gcp-tcpx-200g", "gcp-tcpxo-200g", "efa-v1-100g", "efa-v2-4x100g"):
        assert presets.link(name).latency_s > 3 * ib


def test_a3_high_all_reduce_across_nodes_is_slower_than_dgx_h100_by_its_nics():
    """A ring across servers runs at the slower of each GPU's NVLink and its server's NICs
    (physics/collectives.py). a3-high: 4 TCPX NICs of 200 Gb/s at 0.67 = 67 GB/s per server;
    dgx-h100: 8 NDR NICs at 0.97 = 388 GB/s, above its NVLink's 369 GB/s, so NVLink bounds it.
    A large gradient all-reduce over 4 servers takes 369 / 67 = 5.5 times as long on A3 High,
    and 1.5 / 0.67 = 2.7 times as long as on A3 Mega (8 TCPXO NICs at 0.90: both NIC-bound)."""
    n_bytes = 16 * 2**30
    times = {
        name: Fabric.of(presets.system(name, nodes=4)).group(32, 8).all_reduce(n_bytes)
        for name in ("gcp-a3-high", "gcp-a3-mega", "dgx-h100")
    }
    a3_high_nics = 4 * 200 * GBIT * 0.67
    dgx_bound = min(450e9 * 0.82, 8 * 400 * GBIT * 0.97)  # NVLink 4 at nvlink4's efficiency
    assert dgx_bound == pytest.approx(369e9)
    assert times["gcp-a3-high"] / times["dgx-h100"] == pytest.approx(dgx_bound / a3_high_nics, rel=0.03)
    assert times["gcp-a3-high"] / times["gcp-a3-mega"] == pytest.approx((8 * 0.90) / (4 * 0.67), rel=0.03)
    # inside one server the two are the same machine
    one = {name: Fabric.of(presets.system(name)).group(8, 8).all_reduce(n_bytes) for name in times}
    assert one["gcp-a3-high"] == pytest.approx(one["dgx-h100"])


def test_public_runs_on_a_named_cloud_instance_use_its_preset_and_no_others_do():
    """A row takes a cloud preset when (and only when) its source names the instance
    (tools/public_runs_stacks.py INSTANCES): MaxText's 'A3 (h100-80gb-8)', the DeepSpeed blog's
    NDm A100 v4, the AWS blog's and aws-samples' p5.48xlarge (torchtitan) and gpu-recipes' A3 Mega, A3 Ultra and A4
    (MaxText); the rows' notes say so."""
    import csv
    from pathlib import Path

    from shardwise.data import __file__ as data_init

    path = Path(data_init).parent / "public_training_runs.csv"
    with path.open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    named = {
        "gcp-a3-high": "GCP A3 'h100-80gb-8'",
        "azure-ndm-a100-v4": "Azure NDm A100 v4",
        "aws-p5": "AWS p5.48xlarge",
        "gcp-a3-mega": "GCP A3 Mega 'a3-megagpu-8g'",
        "gcp-a3-ultra": "GCP A3 Ultra 'a3-ultragpu-8g'",
        "gcp-a4": "GCP A4 'a4-highgpu-8g'",
    }
    clouds = {"gcp-", "aws-", "azure-"}
    on_cloud = [r for r in rows if any(r["system"].startswith(c) for c in clouds)]
    assert {r["system"] for r in on_cloud} == set(named)
    for r in on_cloud:
        assert named[r["system"]] in r["gpu_raw"]
        assert f"system {r['system']}:" in r["parse_notes"]
    assert sum(r["system"] == "gcp-a3-high" for r in rows) == 5
    assert sum(r["system"] == "azure-ndm-a100-v4" for r in rows) == 4
    assert sum(r["system"] == "aws-p5" for r in rows) == 4 + 2  # the AWS blog's, aws-samples' torchtitan test case
    assert [sum(r["system"] == s for r in rows) for s in ("gcp-a3-mega", "gcp-a3-ultra", "gcp-a4")] == [1, 1, 2]
