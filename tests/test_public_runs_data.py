"""The public training runs table: data/public_training_runs.csv as tools/import_public_runs.py writes it
(PUBLIC_RUNS.md), with the rows of other stacks imported from tools/data/public_runs/."""

from __future__ import annotations

import csv
import hashlib
import importlib
import re
from importlib import resources
from pathlib import Path

import pytest

from shardwise import presets

ROOT = Path(__file__).resolve().parent.parent
OTHER_TABLES = [
    ROOT / "tools" / "data" / "public_runs" / f
    for f in (
        "training_layouts_other.csv",
        "microbatch_longctx.csv",
        "deepspeed_pipeline.csv",
        "fsdp_scaling.csv",
        "nemo_launcher_scaling.csv",
        "flagperf_nvidia.csv",
        "ms_swift.csv",
        "torchtitan_blogs.csv",
        "deepspeed_autotuning.csv",
        "maxtext_gpu_recipes.csv",
        "deepspeed_h200_b200.csv",
        "lightning_zero.csv",
        "torchtitan_aws_samples.csv",
        "colossalai_llama2.csv",
        "litgpt_thunder.csv",
        "issue_threads.csv",
    )
]
MEGATRON_ROWS = 901
STACKS = {
    "fsdp", "fsdp2", "torchtitan", "deepspeed", "megatron-deepspeed", "internevo", "colossalai",
    "paxml", "maxtext", "flash-attn-trainer", "pytorch", "nemo-megatron",
    "megatron-core",  # FlagPerf's Megatron-LM core_v0.6.0 and FlagScale cases
}  # fmt: skip
RESERVED = "pytorch/torchtitan docs/performance.md"


def table(name: str) -> list[dict[str, str]]:
    text = resources.files("shardwise.data").joinpath(name).read_text(encoding="utf-8")
    return list(csv.DictReader(text.splitlines()))


@pytest.fixture(scope="module")
def rows() -> list[dict[str, str]]:
    return table("public_training_runs.csv")


@pytest.fixture
def importer(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "tools"))
    return importlib.import_module("import_public_runs"), importlib.import_module("public_runs_stacks")


def test_ids_count_on_from_the_megatron_table_into_the_other_stacks(rows):
    assert [r["id"] for r in rows] == [f"PUB-{i:04d}" for i in range(1, len(rows) + 1)]
    assert len(rows) == MEGATRON_ROWS + 207 + 177 + 11 + 30 + 3 + 8 + 8 + 4 + 14 + 5 + 2 + 1 + 9 + 12
    assert rows[MEGATRON_ROWS - 1]["framework"] == "megatron-core"
    assert "fms-fsdp" in rows[MEGATRON_ROWS]["source"]


def test_every_row_is_split_by_the_hash_of_its_group(rows):
    for r in rows:
        dev = int(hashlib.sha256(r["group"].encode()).hexdigest(), 16) % 10 < 3
        assert r["split"] == ("dev" if dev else "holdout"), r["id"]


def test_no_other_stack_group_is_a_megatron_group(rows):
    megatron = {r["group"] for r in rows[:MEGATRON_ROWS]}
    assert not [r["id"] for r in rows[MEGATRON_ROWS:] if r["group"] in megatron]


def test_models_and_systems_named_are_presets(rows):
    for name in {r["model"] for r in rows} - {""}:
        presets.model(name)
    for name in {r["system"] for r in rows} - {""}:
        presets.system(name)


def test_other_stack_rows_name_one_stack_and_lead_their_notes_with_key_values(rows):
    for r in rows[MEGATRON_ROWS:]:
        assert r["framework"] in STACKS, r["id"]
        items = r["parse_notes"].split("; ") if r["parse_notes"] else []
        keyed = [i for i in items if "=" in i]
        assert items[: len(keyed)] == keyed, r["id"]  # key=value items first, prose after
        assert all(re.fullmatch(r"[a-z0-9_]+=[^\s;=]+", i) for i in keyed), r["id"]


def test_no_row_of_the_reserved_torchtitan_file_is_kept(rows):
    kept = [r["source"] for r in rows]
    kept += [r["source"] for path in OTHER_TABLES for r in csv.DictReader(path.open(newline="", encoding="utf-8"))]
    kept += [r["source"] for r in table("public_memory_evidence.csv")]
    assert not [s for s in kept if RESERVED in s]


def test_the_importer_refuses_rows_of_an_excluded_source(importer, tmp_path):
    imp, _ = importer
    header = OTHER_TABLES[0].read_text(encoding="utf-8").splitlines()[0]
    first, other = tmp_path / "megatron.csv", tmp_path / "other.csv"
    first.write_text(header + "\n", encoding="utf-8")
    good = next(csv.DictReader(OTHER_TABLES[0].open(newline="", encoding="utf-8")))
    with other.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(good))
        w.writeheader()
        w.writerows([dict(good, source=f"GitHub {RESERVED} (2024)"), good])
    out = imp.read_rows([first, other], imp.load_presets())
    assert [r["id"] for r in out] == ["PUB-0001"]
    assert out[0]["framework"] == "fsdp"


def test_the_committed_other_stack_rows_are_what_the_importer_makes(importer, rows):
    imp, stacks = importer
    preset_table = imp.load_presets()
    inputs = []
    for path in OTHER_TABLES:
        table = list(csv.DictReader(path.open(newline="", encoding="utf-8")))
        imp.amend(table, path)
        inputs += table
    made = [stacks.StackRow(MEGATRON_ROWS + i, r, preset_table).build() for i, r in enumerate(inputs)]
    assert made == rows[MEGATRON_ROWS:]


def test_hand_checked_normalizations(rows):
    by_id = {r["id"]: r for r in rows}
    fms_7b = by_id["PUB-0902"]  # fms-fsdp 7B, HSDP within 8-GPU nodes, 128 A100 at 400 Gbps per node
    assert (fms_7b["framework"], fms_7b["system"], fms_7b["dp"], fms_7b["fsdp"]) == ("fsdp", "dgx-a100", "128", "8")
    assert fms_7b["gbs"] == "256" and "network=400gbps-per-node" in fms_7b["parse_notes"]
    internevo = by_id["PUB-0959"]  # ZeRO-1 within groups of 8: optimizer sharded, parameters not
    assert internevo["fsdp"] == "0" and "zero_group=8" in internevo["parse_notes"]
    azure = by_id["PUB-0995"]  # Eq. 3 with the recompute term counted: 3/4 of it is the model count
    assert azure["model_tflops_per_gpu"] == "204.49" and azure["metric"] == "model_tflops_per_gpu"
    assert float(azure["measured"]) == pytest.approx(204.49 * 3 / 4)
    # Megatron-DeepSpeed counts 4 passes only under --checkpoint-activations; Megatron's own full
    # recomputation (--recompute-granularity full) is counted with 3: that row is a model count as printed
    old_ac, megatron_ac = by_id["PUB-1001"], by_id["PUB-1002"]
    assert float(old_ac["measured"]) == pytest.approx(23.11 * 3 / 4) and megatron_ac["measured"] == "17.26"
    assert "tflops_count=model" in megatron_ac["parse_notes"]
    assert {by_id[i]["system"] for i in ("PUB-0999", "PUB-1000", "PUB-1001", "PUB-1002")} == {"dgx-2"}
    assert by_id["PUB-0999"]["vp"] == "1"  # DeepSpeed's pipeline engine does not interleave
    xtuner = [r for r in rows if "InternLM/xtuner" in r["source"]]  # its TFLOP/s formula is not Eq. 3
    assert xtuner and all(r["metric"] != "model_tflops_per_gpu" for r in xtuner)
    ring = [r for r in rows if "cp_kind=ring-zigzag" in r["parse_notes"]]
    assert {(r["cp"], r["dp"], r["fsdp"]) for r in ring} == {("8", "1", "8")}  # ZeRO-3 spans dp x cp
    assert {r["precision"] for r in rows if r["precision_raw"] == "TE bf16"} == {"bf16"}


def test_deepspeed_pipeline_rows(rows):
    """The DeepSpeed pipeline-engine runs of tools/data/public_runs/deepspeed_pipeline.csv: GLM-130B's
    speed test (a step time) and the DeepSpeed4Science long-sequence table (Eq. 3 TFLOP/s)."""
    by_id = {r["id"]: r for r in rows}
    glm = [by_id["PUB-1107"], by_id["PUB-1108"]]
    for r, gbs, step in zip(glm, ("4224", "6144"), ("88.5", "122.5"), strict=True):
        assert (r["model"], r["system"], r["framework"], r["framework_version"]) == (
            "glm-130b", "dgx-a100-40gb", "megatron-deepspeed", "deepspeed:0.6.1",
        )  # fmt: skip
        assert (r["tp"], r["pp"], r["vp"], r["dp"], r["mbs"], r["gbs"]) == ("4", "8", "1", "24", "1", gbs)
        assert (r["metric"], r["measured"], r["recompute"]) == ("step_time_s", step, "full")
        assert "sequence_parallel=off" in r["parse_notes"] and "zero=1" in r["parse_notes"]
    new = [by_id[f"PUB-{i:04d}"] for i in range(1097, 1105)]
    assert [int(r["seq_len"]) // 1024 for r in new] == [2, 4, 8, 16, 32, 64, 128, 256]
    # the benchmark's batch is not the script's (the README: "supports larger batch sizes"): left empty
    layouts = {(r["model"], r["tp"], r["dp"], r["mbs"], r["gbs"]) for r in new}
    assert layouts == {("gpt-30b-ds4science", "32", "1", "", "")}
    # --checkpoint-activations: Eq. 3 counted 4 passes, the model count is 3/4 of the printed 68
    assert float(new[0]["measured"]) == pytest.approx(68 * 3 / 4)
    assert all("sequence_parallel=on" in r["parse_notes"] for r in new)
    old = [by_id["PUB-1105"], by_id["PUB-1106"]]  # the old version: batch and checkpointing not published
    assert all(r["metric"] == "" and "tflops_count=unstated" in r["parse_notes"] for r in old)


def test_modalities_fsdp_scaling_rows(rows):
    """Modalities' FSDP1 scaling tables (tools/data/public_runs/fsdp_scaling.csv): Leonardo Booster's
    rows priced on its own system (4 A100 64GB per node), HYBRID_SHARD sharded within a node and
    FULL_SHARD over every rank; MareNostrum 5's on its own (4 H100 64GB per node, 4 x NDR200); the 28B
    model's rows kept but not priced."""
    new = rows[MEGATRON_ROWS + 207 : MEGATRON_ROWS + 207 + 177]
    assert len(new) == 177 and all(r["framework"] == "fsdp" for r in new)
    by_id = {r["id"]: r for r in new}
    hybrid, full = by_id["PUB-1109"], by_id["PUB-1110"]  # 2.7B on 8 GPUs, micro-batch 1
    for r in (hybrid, full):
        assert (r["model"], r["system"], r["tp"], r["pp"], r["dp"], r["mbs"], r["gbs"], r["ga"]) == (
            "gpt-2.7b-hd128", "leonardo-booster", "1", "1", "8", "1", "8", "1",
        )  # fmt: skip
        assert (r["precision"], r["recompute"], r["metric"]) == ("bf16", "none", "tokens_per_s_per_gpu")
    assert hybrid["fsdp"] == "4" and "sharding=hsdp" in hybrid["parse_notes"]
    assert full["fsdp"] == "8" and "sharding=full-shard" in full["parse_notes"]
    assert float(hybrid["measured"]) == pytest.approx(16.71 * 4096 / 8)  # samples/s x sequence / GPUs
    leonardo = [r for r in new if "leonardo" in r["source"]]
    mn5 = [r for r in new if "scaling_mn5" in r["source"]]
    assert (len(leonardo), len(mn5)) == (53, 124)
    assert {r["system"] for r in mn5} == {"marenostrum5-acc"}  # BSC's accelerated partition
    first = by_id["PUB-1162"]  # MN5 table row 0: 2.7B on one node's 4 GPUs, HYBRID_SHARD, micro-batch 1
    assert (first["model"], first["num_gpus"], first["fsdp"], first["mbs"]) == ("gpt-2.7b-hd128", "4", "4", "1")
    assert float(first["measured"]) == pytest.approx(12.68 * 4096 / 4)
    assert "system marenostrum5-acc" in first["parse_notes"]
    assert {r["model"] for r in leonardo} == {"gpt-2.7b-hd128", "gpt-6.7b", "gpt-13b", ""}
    assert all(r["model"] == "" for r in new if r["model_raw"].startswith("GPT 28B"))


def test_nemo_launcher_scaling_rows(rows):
    """NeMo Megatron 22.08's README scaling tables (tools/data/public_runs/nemo_launcher_scaling.csv):
    GPT-3 5B on 1-32 DGX A100 nodes and 175B on 8-128, tokens/s per GPU over the table's GPUs, the
    release's yaml layout (gbs 2048 fixed, so dp and ga follow the GPUs); NeMo 1.11 reduces the
    gradients once per step (ZeRO-1 over every dp rank), priced with Megatron-LM 2022's preset."""
    from shardwise.analyses import public_runs

    new = rows[MEGATRON_ROWS + 207 + 177 : MEGATRON_ROWS + 207 + 177 + 11]
    assert len(new) == 11 and all(r["framework"] == "nemo-megatron" for r in new)
    assert {public_runs.source_of(r) for r in new} == {"NVIDIA NeMo-Framework-Launcher"}  # not NVIDIA/NeMo's
    five, big = new[:6], new[6:]
    assert [r["num_gpus"] for r in five] == ["8", "16", "32", "64", "128", "256"]
    assert [(r["dp"], r["ga"]) for r in big] == [("1", "1024"), ("2", "512"), ("4", "256"), ("8", "128"), ("16", "64")]
    first = five[0]
    assert (first["model"], first["system"], first["tp"], first["pp"], first["mbs"], first["gbs"]) == (
        "gpt3-5b", "dgx-a100", "1", "1", "2", "2048",
    )  # fmt: skip
    assert (first["recompute"], first["metric"]) == ("none", "tokens_per_s_per_gpu")
    assert float(first["measured"]) == pytest.approx(40345 / 8)
    last = big[-1]
    layout = (last["model"], last["tp"], last["pp"], last["vp"], last["recompute"])
    assert layout == ("gpt3-175b", "8", "8", "1", "selective")
    assert float(last["measured"]) == pytest.approx(109684 / 1024)
    assert all({"zero=1", "attention=no-flash"} <= set(r["parse_notes"].split("; ")) for r in new)
    assert "sequence_parallel=on" in last["parse_notes"] and "sequence_parallel=off" in first["parse_notes"]
    request = public_runs.request_for(last)
    assert (request.framework, request.zero, request.flash_attention) == ("megatron-lm-2022", 1, False)
    assert public_runs.skip_reason(last) == ""


def test_modalities_rows_reduce_their_gradients_in_bf16(rows):
    """Modalities' BF_16 is FSDP MixedPrecision with reduce_dtype bf16 (running_env/env_utils.py at
    8a9b6617): the rows say so, and their requests reduce-scatter 2-byte gradients; the code has no
    torch.compile (eager). OLMo-core's stated fp32 reduction stays fp32."""
    from shardwise.analyses import public_runs, public_stacks

    by_id = {r["id"]: r for r in rows}
    modalities = [r for r in rows if r["source"].startswith("GitHub Modalities/modalities")]
    assert len(modalities) == 177
    assert all({"reduce_dtype=bf16", "compile=off"} <= set(r["parse_notes"].split("; ")) for r in modalities)
    assert public_runs.request_for(by_id["PUB-1110"]).grad_reduce_bf16 is True
    olmo = by_id["PUB-0942"]  # OLMo-core 7B: reduce_dtype=fp32
    assert "reduce_dtype=fp32" in olmo["parse_notes"] and "grad_reduce_bf16" not in public_stacks.execution(olmo)[1]


def test_sequence_parallelism_as_a_deepspeed_pipeline_row_states_it(rows):
    """Megatron-DeepSpeed runs without sequence parallelism unless asked (its preset); a row that states
    it gets it, with Megatron's asynchronous backward collectives, and one that states none keeps it off."""
    from shardwise.analyses import public_runs
    from shardwise.presets.stack_defaults import framework_sequence_parallel

    by_id = {r["id"]: r for r in rows}
    assert framework_sequence_parallel("megatron-deepspeed") is False
    on = public_runs.request_for(dict(by_id["PUB-1097"], mbs="1", gbs="2"))  # a batch given for the test
    assert on.sequence_parallel is True and on.async_tp_grad is True
    off = public_runs.request_for(by_id["PUB-1107"])
    assert off.sequence_parallel is False and not off.async_tp_grad
    unstated = public_runs.scenario_for(by_id["PUB-0999"])  # the 2023 13B run: the stack's default
    assert not bool(unstated.plan.sequence_parallel)


def test_every_amendment_names_a_row_of_its_source(importer):
    imp, _ = importer
    amendments = imp.amendments()
    assert amendments and all(a["evidence"].strip() for a in amendments)
    imp.read_rows(OTHER_TABLES, imp.load_presets())
    imp.check_amendments()  # raises SystemExit when one matches no row


def test_an_amendment_that_matches_nothing_is_refused(importer, monkeypatch):
    imp, _ = importer
    stray = {"source": "GitHub nobody/nothing README.md", "locator": "x", "column": "notes"}
    stray |= {"value": "", "evidence": "e"}
    monkeypatch.setattr(imp, "amendments", lambda: (stray,))
    imp.read_rows(OTHER_TABLES, imp.load_presets())
    with pytest.raises(SystemExit, match="match no input row"):
        imp.check_amendments()


def test_skip_counts_text_has_balanced_brackets():
    # `validate public` printed "... save (launch.sh, 6 ZeRO stage not stated": the first clause
    # of a reason was cut at a colon inside its parenthesis
    from shardwise.analyses.public_stacks import NOT_A_STEP
    from shardwise.analyses.public_validation import first_clause

    for _, reason in NOT_A_STEP:
        head = first_clause(reason)
        assert head and head.count("(") == head.count(")"), head
    assert first_clause("a (b: c) d: e") == "a"
    assert first_clause("layout incomplete: no tp") == "layout incomplete"
    assert first_clause("encoder (not modelled)") == "encoder (not modelled)"


def test_flagperf_rows(rows):
    """FlagPerf's NVIDIA LLM cases (tools/data/public_runs/flagperf_nvidia.csv): tokens/s per GPU with the
    layout of each case's config and launch script; the Megatron cases price as Megatron-Core with every
    overlap off (their scripts pass none), the A800 rows on hgx-a800, models without a preset unpriced."""
    from shardwise.analyses import public_runs

    new = rows[MEGATRON_ROWS + 207 + 177 + 11 : MEGATRON_ROWS + 207 + 177 + 11 + 30]
    assert len(new) == 30 and {public_runs.source_of(r) for r in new} == {"FlagOpen/FlagPerf"}
    sweep = [r for r in new if "llama3_8B" in r["source"] and r["system"] == "hgx-a800"]
    assert [(r["tp"], r["pp"], r["dp"], r["measured"]) for r in sweep] == [
        ("1", "2", "4", "3698.7"), ("1", "4", "2", "3306.5"), ("2", "2", "2", "3409.2"), ("4", "2", "1", "3006.1"),
        ("1", "8", "1", "2690.3"), ("8", "1", "1", "2451.2"), ("2", "4", "1", "3042.7"),
    ]  # fmt: skip
    first = sweep[0]
    assert (first["model"], first["framework"], first["vp"], first["gbs"], first["ga"], first["seq_len"]) == (
        "llama3-8b", "megatron-core", "1", "512", "128", "8192",
    )  # fmt: skip
    assert {"zero=1", "te=on"} <= set(first["parse_notes"].split("; "))
    request = public_runs.request_for(first)
    assert (request.tp_comm_overlap, request.overlap_grad_reduce, request.overlap_param_gather) == (False, False, False)
    big = next(r for r in new if r["num_gpus"] == "440")
    assert (big["system"], big["tp"], big["dp"], big["gbs"], big["ga"]) == ("dgx-h100", "2", "220", "1760", "8")
    zero3 = [r for r in new if "llama2_7b-deepspeed" in r["source"]]
    assert [(r["system"], r["seq_len"], r["mbs"], r["gbs"]) for r in zero3] == [
        ("hgx-a800", "4096", "1", "8"), ("hgx-a800", "2048", "3", "24"), ("hgx-a800", "2048", "3", "1536"),
        ("hgx-h800", "4096", "1", "8"),
    ]  # fmt: skip
    assert all(r["framework"] == "deepspeed" and r["fsdp"] == "8" and "zero=3" in r["parse_notes"] for r in zero3)
    assert public_runs.request_for(zero3[0]).overlap_grad_reduce is None  # not the Megatron launches' rule
    fp32 = next(r for r in new if "fp32" in r["precision_raw"])
    assert public_runs.skip_reason(fp32) == "precision not stated"
    unpriced = [r for r in new if not r["model"]]
    assert len(unpriced) == 3 and all(
        public_runs.skip_reason(r) == "model or system not known to shardwise" for r in unpriced
    )
    assert sum(public_runs.skip_reason(r) == "" for r in new) == 26
    aquila = [r for r in new if r["model"] == "aquila2-7b"]  # FlagScale, TP without sequence parallelism
    assert [(r["tp"], r["pp"], r["mbs"], r["gbs"]) for r in aquila] == [
        ("1", "1", "1", "72"), ("8", "1", "8", "72"), ("1", "8", "4", "36"), ("2", "2", "4", "72"),
    ]  # fmt: skip
    assert all("sequence_parallel=off" in r["parse_notes"] and r["system"] == "hgx-a800" for r in aquila)


def test_ms_swift_rows(rows):
    """ms-swift's Qwen2.5-14B benchmark (tools/data/public_runs/ms_swift.csv): one packed 8192-token SFT
    step of 16 sequences on 8 A800, Megatron-SWIFT (TP 4, its overlaps off) against HF + DeepSpeed ZeRO-2
    and ZeRO-3 (GA 2, HF gradient checkpointing); step times as published."""
    from shardwise.analyses import public_runs

    new = rows[MEGATRON_ROWS + 207 + 177 + 11 + 30 : MEGATRON_ROWS + 207 + 177 + 11 + 30 + 3]
    assert [(r["framework"], r["tp"], r["dp"], r["fsdp"], r["ga"], r["measured"]) for r in new] == [
        ("megatron-core", "4", "2", "0", "8", "9.04"), ("deepspeed", "1", "8", "0", "2", "10.32"),
        ("deepspeed", "1", "8", "8", "2", "10.56"),
    ]  # fmt: skip
    assert all(
        (r["model"], r["system"], r["gbs"], r["metric"]) == ("qwen2.5-14b", "hgx-a800", "16", "step_time_s")
        for r in new
    )
    megatron, zero2, zero3 = (public_runs.request_for(r) for r in new)
    assert (megatron.zero, megatron.overlap_grad_reduce, megatron.tp_comm_overlap) == (1, False, False)
    assert (zero2.zero, zero2.recompute, zero3.zero) == (2, "full", 3)
    assert zero2.overlap_grad_reduce is None  # ZeRO's own overlap_comm (swift's zero2.json), the preset's
    # packed samples: the documents' lengths, which set the attention's work, are not published
    assert all(public_runs.skip_reason(r).startswith("packed samples of documents of unstated length") for r in new)


def test_torchtitan_blog_rows(rows):
    """torchtitan runs of two blogs (tools/data/public_runs/torchtitan_blogs.csv): AWS's Llama 3 8B on 4
    p5.48xlarge (32 H100, FSDP2 over all 32, local batch 1 at 8192 tokens, per-op selective AC) from
    eager bf16 through torch.compile to torchao FP8 with and without the FP8 all-gather, priced on
    aws-p5 under torchtitan (eager) and torchtitan-compile; and IBM/Meta's float8 post at 512 H100,
    whose batch and checkpointing are not stated (unpriced)."""
    from shardwise.analyses import public_runs, public_stacks

    new = rows[MEGATRON_ROWS + 207 + 177 + 11 + 30 + 3 :][:8]
    assert len(new) == 8 and all(r["framework"] == "torchtitan" for r in new)
    aws, ibm = new[:4], new[4:]
    assert [r["measured"] for r in aws] == ["6475", "7166", "8624", "8950"]
    assert all(
        (r["model"], r["system"], r["num_gpus"], r["dp"], r["fsdp"], r["mbs"], r["gbs"], r["seq_len"])
        == ("llama3-8b", "aws-p5", "32", "32", "32", "1", "32", "8192")
        for r in aws
    )
    assert [public_stacks.execution(r)[0] for r in aws] == ["torchtitan"] + ["torchtitan-compile"] * 3
    assert [r["precision"] for r in aws] == ["bf16", "bf16", "fp8", "fp8"]
    assert ["fp8_allgather=on" in r["parse_notes"] for r in aws] == [False, False, False, True]
    assert all(public_runs.skip_reason(r) == "" and r["framework_version"] == "torchtitan:ac90c36e3" for r in aws)
    assert [(r["model"], r["tp"], r["dp"], r["measured"]) for r in ibm] == [
        ("llama3-70b", "1", "512", "960"), ("llama3-70b", "1", "512", "1448"),
        ("llama3-405b", "4", "128", "152"), ("llama3-405b", "4", "128", "217"),
    ]  # fmt: skip
    assert all(public_runs.skip_reason(r) == "layout incomplete" and not r["mbs"] for r in ibm)


def test_deepspeed_autotuning_rows(rows):
    """DeepSpeedExamples' autotuning tables (tools/data/public_runs/deepspeed_autotuning.csv): Hugging
    Face's GPT-2 small to XL fine-tuned by HF Trainer + DeepSpeed ZeRO-1 in fp16 on one 16-V100 server,
    the hand-tuned and the autotuned micro-batch of each model; eager attention over the materialised
    scores and DeepSpeed 0.5's overlap_comm default (off for stage 1)."""
    from shardwise.analyses import public_runs, public_stacks

    new = rows[MEGATRON_ROWS + 207 + 177 + 11 + 30 + 3 + 8 :][:8]
    assert len(new) == 8 and all(r["framework"] == "deepspeed" and r["system"] == "dgx-2" for r in new)
    assert [(r["model"], r["mbs"], r["gbs"]) for r in new] == [
        ("gpt2-124m", "8", "128"), ("gpt2-124m", "15", "240"), ("gpt2-medium", "4", "64"),
        ("gpt2-medium", "6", "96"), ("gpt2-large", "2", "32"), ("gpt2-large", "3", "48"),
        ("gpt2-xl", "1", "16"), ("gpt2-xl", "1", "16"),
    ]  # fmt: skip
    # tokens/s per GPU = samples/s x 1024 / 16, the README's samples/s kept in the notes
    assert [r["measured"] for r in new][:2] == ["25460.9", "27621.5"]
    assert "samples_per_s_total=397.827" in new[0]["parse_notes"]
    for r in new:
        assert (r["precision"], r["seq_len"], r["dp"], r["fsdp"], r["recompute"]) == ("fp16", "1024", "16", "0", "none")
        assert "zero=1" in r["parse_notes"] and "attention=no-flash" in r["parse_notes"]
        assert public_runs.skip_reason(r) == ""
        preset, plan = public_stacks.execution(r)
        assert preset == "deepspeed" and plan["flash_attention"] is False and plan["overlap_grad_reduce"] is False


def test_maxtext_gpu_recipe_rows(rows):
    """AI-Hypercomputer/gpu-recipes' MaxText READMEs (tools/data/public_runs/maxtext_gpu_recipes.csv): the
    logged step each prints as an example, on 256 H100 of A3 Mega (Llama 2 7B, bf16), 256 H200 of A3 Ultra
    (Llama 3.1 70B, bf16) and 256 B200 of A4 (Llama 3.1 405B and 70B, fp8), with the layout of the MaxText
    config the README names at that commit."""
    from shardwise.analyses import public_runs, public_stacks

    new = rows[MEGATRON_ROWS + 207 + 177 + 11 + 30 + 3 + 8 + 8 :][:4]
    assert [(r["model"], r["system"], r["precision"], r["measured"]) for r in new] == [
        ("llama2-7b", "gcp-a3-mega", "bf16", "1.5"),
        ("llama3-70b", "gcp-a3-ultra", "bf16", "15.516"),
        ("llama3-405b", "gcp-a4", "fp8", "28.294"),
        ("llama3-70b", "gcp-a4", "fp8", "20.935"),
    ]
    assert [(r["fsdp"], r["dp"], r["mbs"], r["gbs"]) for r in new] == [
        ("8", "256", "4", "1024"), ("128", "256", "2", "512"), ("128", "256", "2", "512"), ("256", "256", "8", "2048"),
    ]  # fmt: skip
    assert all(r["framework"] == "maxtext" and r["metric"] == "step_time_s" for r in new)
    for r, policy in zip(new, ("minimal_flash", "save_dot_except_mlp", "save_nothing", "save_nothing"), strict=True):
        assert public_runs.skip_reason(r) == ""
        preset, plan = public_stacks.execution(r)
        assert preset == "maxtext" and plan["selective_policy"] == policy and plan["attention_kernel"] == "fused"


def test_deepspeed_h200_b200_rows(rows):
    """stas00/ml-engineering's GPU-upgrade benchmark (tools/data/public_runs/deepspeed_h200_b200.csv): HF
    Llama-3.1-8B under DeepSpeed on 8 H200 and 8 B200, one 8,192-token sequence per GPU. The ZeRO-2 step of
    its decomposition table is priced, its step time the scripts' own FLOP count over the printed TFLOPS;
    the ZeRO-3 + CPU optimizer offload sweep is kept and skipped for the offload."""
    from shardwise.analyses import public_runs

    new = rows[MEGATRON_ROWS + 207 + 177 + 11 + 30 + 3 + 8 + 8 + 4 :][:14]
    assert all(r["framework"] == "deepspeed" and r["model"] == "llama3-8b" and r["dp"] == "8" for r in new)
    zero2 = new[:2]
    assert [(r["system"], r["measured"], r["fsdp"]) for r in zero2] == [
        ("dgx-h200", "0.9146", "0"),
        ("dgx-b200", "0.542", "0"),
    ]
    # 6 x 7,504,658,432 x 8192 + 6 x 8192^2 x 128 x 32 x 32 FLOPs at 461 and 778 TFLOP/s
    flops = 6 * 7504658432 * 8192 + 6 * 8192**2 * 128 * 32 * 32
    assert [round(flops / 1e12 / t, 4) for t in (461, 778)] == [float(r["measured"]) for r in zero2]
    assert all("zero=2" in r["parse_notes"] and public_runs.skip_reason(r) == "" for r in zero2)
    sweep = new[2:]
    assert [int(r["seq_len"]) for r in sweep] == [8192, 32768, 65536, 131072, 196608, 262144] * 2
    assert all("offload=optimizer" in r["parse_notes"] and r["recompute"] == "full" for r in sweep)
    assert all(public_runs.skip_reason(r).startswith("optimizer offload") for r in sweep)


def test_lightning_zero_rows(rows):
    """hpcaitech/ColossalAI-Pytorch-lightning's GPT benchmark (tools/data/public_runs/lightning_zero.csv):
    Hugging Face GPT-2 models under PyTorch Lightning on A100 40GB in fp16. DeepSpeed ZeRO-3 and Colossal-AI
    Gemini (chunks sharded over the ranks: zero=3) at GPT-2 XL on 4 GPUs are priced with eager attention;
    the DDP baseline has no preset and the 12B shape no model preset."""
    from shardwise.analyses import public_runs, public_stacks

    new = rows[MEGATRON_ROWS + 207 + 177 + 11 + 30 + 3 + 8 + 8 + 4 + 14 :][:5]
    assert [(r["framework"], r["model"], r["num_gpus"], r["gbs"], r["measured"]) for r in new] == [
        ("pytorch", "gpt2-xl", "4", "24", "2.0408"), ("deepspeed", "gpt2-xl", "4", "160", "8.8009"),
        ("colossalai", "gpt2-xl", "4", "160", "8.2645"), ("deepspeed", "", "8", "8", "9.06"),
        ("colossalai", "", "8", "8", "7.07"),
    ]  # fmt: skip
    assert all(r["system"] == "dgx-a100-40gb" and r["precision"] == "fp16" and r["recompute"] == "full" for r in new)
    for r in new[1:3]:
        assert public_runs.skip_reason(r) == ""
        preset, plan = public_stacks.execution(r)
        assert preset == r["framework"] and plan["flash_attention"] is False
        assert public_stacks.zero_stage(r, None) == 3
    assert public_runs.skip_reason(new[0]).startswith("framework 'pytorch'")
    assert all(public_runs.skip_reason(r) == "model or system not known to shardwise" for r in new[3:])


def test_torchtitan_aws_samples_rows(rows):
    """aws-samples/awsome-distributed-training's torchtitan test case
    (tools/data/public_runs/torchtitan_aws_samples.csv): the default llama3_8b.toml on 4 p5.48xlarge, eager
    bf16 (priced), and the 'optimized' run whose float8 keys torchtitan of 2025-03 ignores (precision left
    ambiguous, not priced)."""
    from shardwise.analyses import public_runs, public_stacks

    new = rows[MEGATRON_ROWS + 207 + 177 + 11 + 30 + 3 + 8 + 8 + 4 + 14 + 5 :][:2]
    assert [(r["framework"], r["system"], r["precision"], r["measured"]) for r in new] == [
        ("torchtitan", "aws-p5", "bf16", "6785"),
        ("torchtitan", "aws-p5", "", "7865"),
    ]
    assert all(
        (r["model"], r["dp"], r["fsdp"], r["mbs"], r["seq_len"]) == ("llama3-8b", "32", "32", "1", "8192") for r in new
    )
    assert public_runs.skip_reason(new[0]) == ""
    assert public_stacks.execution(new[0]) == ("torchtitan", {"selective_policy": "op"})  # eager: compile=off
    assert public_runs.skip_reason(new[1]) == "precision not stated"
