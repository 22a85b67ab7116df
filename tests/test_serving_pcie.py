"""TP against a layer split on PCIe GPUs: public llama.cpp and ExLlamaV2 pairs, as ratios."""

from __future__ import annotations

from shardwise.analyses.serving_pcie import LAYER_SCALING, PAIRS, serving_rows, throughput, validate_pcie_serving


def test_every_pair_is_read_from_the_data_with_its_source():
    rows = validate_pcie_serving()
    assert [r.run_id for r in rows] == [p.key for p in (*PAIRS, *LAYER_SCALING)]
    for r in rows:
        assert r.source.startswith("GitHub") and r.measured > 0 and r.predicted > 0
    # with TensorRT-LLM#1102's PP2-vs-one-GPU pair, SGLang#3602's EP pair, llama.cpp#6017's A100 and
    # #20793's MI50 tables, and XiongjieDai's llama-bench tables (105 rows, #37 and its review)
    assert len(serving_rows()) == 216


def test_llama_cpp_winners_and_the_layer_split_itself():
    """On 4 RTX 4090 without P2P, llama.cpp's layer split processes prompts faster than its TP and
    TP generates tokens faster: the model picks the same winner in each case. The layer split's
    own prompt throughput at 512 tokens (the GPUs in turn, no TP communication) is within 10%."""
    rows = {r.run_id: r for r in validate_pcie_serving()}
    for key in ("llamacpp-19378-pp512", "llamacpp-19378-pp8192", "llamacpp-19378-tg128"):
        assert (rows[key].predicted > 1) == (rows[key].measured > 1), key
    pair = next(p for p in PAIRS if p.key == "llamacpp-19378-pp512")
    assert abs(throughput(pair, 1, 4) / 44766.52 - 1) < 0.10


def test_validate_inference_prints_the_pcie_ratios(cli):
    code, out, _ = cli(["validate", "inference"])
    assert code == 0 and "inference_pcie" in out and "predicted right in" in " ".join(out.split())


def test_a_box_whose_host_cpu_caps_pcie_sends_at_its_generation():
    """XiongjieDai's RTX 4090 box runs on a Xeon Gold 6133 (PCIe 3.0 only), its H100 box on an
    EPYC 7352 (PCIe 4.0): their sends between GPUs run at those generations, not at the system
    presets' Gen4 and Gen5; the other boxes keep the preset's link. The 4090 box's prompt of one
    micro-batch over 8 GPUs then loses more to its sends (measured 7,889 against 9,382 tokens/s)."""
    from dataclasses import replace

    from shardwise.analyses.serving_pcie import _cluster

    by = {p.key: p for p in LAYER_SCALING}
    rtx, h100 = by["xdai-rtx4090-8b-f16-pp512-8v1"], by["xdai-h100pcie-8b-f16-pp512-4v1"]
    assert _cluster(rtx).intra_node_link.name == "pcie3" and _cluster(h100).intra_node_link.name == "pcie4"
    assert _cluster(by["xdai-a100pcie-8b-f16-pp512-4v1"]).intra_node_link.name == "pcie4"
    uncapped = replace(rtx, link="")
    assert _cluster(uncapped).intra_node_link.name == "pcie4"
    ratio = throughput(rtx, 1, 8) / throughput(replace(rtx, gpus=1), 1, 1)
    before = throughput(uncapped, 1, 8) / throughput(replace(uncapped, gpus=1), 1, 1)
    measured = 7889.26 / 9382.00
    assert abs(ratio / measured - 1) < abs(before / measured - 1) and ratio < before
    # only host-staged copies: a split whose copies go GPU to GPU (-sm tensor over NCCL) keeps the preset's link
    assert _cluster(replace(h100, split="-sm tensor")).intra_node_link.name == "pcie5"


def test_layer_scaling_breakdown_gives_both_sides_as_priced_and_measured():
    """Each LAYER_SCALING pair broken down on its k GPUs and on its base: the predicted rates are
    `throughput`'s, the measured the rows', their ratio the one `validate inference_scaling` shows;
    one GPU has no send; the --wrong listing holds exactly the pairs whose direction is wrong."""
    from dataclasses import replace

    from shardwise.analyses.serving_pcie_breakdown import layer_scaling_breakdown, wrong_direction_breakdowns
    from shardwise.analyses.serving_scaling import pcie_rows

    pair = next(p for p in LAYER_SCALING if p.key == "xdai-a100pcie-70b-q4_k_m-tg1024-4v1")
    big, base = layer_scaling_breakdown(pair)
    assert (big.side, base.side) == ("4 GPUs", "1 GPU") and base.send_s == 0 and big.send_s > 0
    assert big.predicted_tokens_per_s == throughput(pair, 1, 4)
    assert base.predicted_tokens_per_s == throughput(replace(pair, gpus=1), 1, 1)
    assert (big.measured_tokens_per_s, base.measured_tokens_per_s) == (22.68, 22.11)
    row = next(r for r in pcie_rows() if r.key == pair.key)
    assert row.predicted == big.predicted_tokens_per_s / base.predicted_tokens_per_s
    assert len(big.stages_s) == 3 and len(base.stages_s) == 1
    wrong = {r.key for r in pcie_rows() if not r.direction_right and not r.key.startswith("exllamav2")}
    listed = wrong_direction_breakdowns()
    assert {s.pair for s in listed} == wrong and len(listed) == 2 * len(wrong)
