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
