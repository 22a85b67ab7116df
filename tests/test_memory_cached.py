"""InternEvo's memory as its v0.2 code holds it (the published memory table's version): the pipeline
split of `partition_uniform`, the training metric's fp32 logit copies, and what the caching allocator
keeps reserved beside the HybridZeroOptimizer's flat-shard step (`physics.memory_cached`)."""

import json
import math

import pytest

from shardwise.analyses.memory_validation import part, raw_rows, scenario
from shardwise.engines.training import training_memory
from shardwise.physics.memory import logits_bytes, stack_memory
from shardwise.physics.memory_cached import HYBRID_ZERO_BUCKET_ELEMENTS, StepCache, step_cached_bytes
from shardwise.physics.memory_runtime import LIBRARY_WORKSPACE_BYTES
from shardwise.specs.stages import stack_split_counts, uniform_last_counts


def _row(tp: str, pp: str, fsdp: str, model: str = "InternLM-7B") -> dict[str, str]:
    """The InternEvo evidence row of that layout (doc/en/train_performance.md's table)."""
    (row,) = [
        r
        for r in raw_rows()
        if r["framework"].startswith("InternEvo")
        and r["model"] == model
        and (r["tp"], r["pp"]) == (tp, pp)
        and (fsdp == "fsdp") == r["fsdp_or_zero"].startswith("fsdp")
    ]
    return row


def test_uniform_last_puts_the_remainder_on_the_last_stages():
    # partition_uniform: chunk_size = L // pp, stage p takes one more from p >= pp - L % pp on
    assert uniform_last_counts(32, 6) == (5, 5, 5, 5, 6, 6)
    assert uniform_last_counts(32, 5) == (6, 6, 6, 7, 7)
    assert uniform_last_counts(60, 16) == (3,) * 4 + (4,) * 12
    assert uniform_last_counts(32, 4) == (8,) * 4
    assert uniform_last_counts(3, 4) is None  # InternEvo raises: "Some nodes in Pipeline have no requests"


def test_internevo_runs_split_its_way_and_its_last_stage_holds_the_extra_layers():
    scn, _ = scenario(_row("1", "6", "zero1"))
    assert scn.split.counts == (5, 5, 5, 5, 6, 6)
    assert stack_split_counts("uniform-last", scn.model, 6) == (5, 5, 5, 5, 6, 6)
    m = training_memory(scn, stage="last")
    h, f, v = 4096, 11008, 103168
    layer = 4 * h * h + 3 * h * f  # the layer's weights (its norms' 2 h left out of the hand count)
    assert float(m.weights_bytes) / 2 == pytest.approx(6 * layer + v * h, rel=1e-3)


def test_internevo_logits_at_the_metrics_peak():
    # AccPerplex: the fp32 logits (4), their clone (4), the max subtracted out of place (4), exp (4)
    evo = stack_memory("internevo")
    assert evo.logits_bytes_per_element == 16.0
    scn, _ = scenario(_row("4", "1", "zero1"))
    s, vocab = 2048, 103168
    assert logits_bytes(scn.model, 1, 4, evo) == pytest.approx(16 * s * vocab / 4)


def test_hybrid_zero_step_keeps_every_block_cached_before_it():
    scn, kind = scenario(_row("4", "1", "zero1"))
    assert kind == "device"
    m = training_memory(scn)
    w, g, o, acts = (float(x) for x in (m.weights_bytes, m.gradients_bytes, m.optimizer_bytes, m.activations_bytes))
    n = w / 2  # parameters on the GPU (16-bit weights, one data-parallel rank: the whole shard)
    assert g == pytest.approx(2 * n) and o == pytest.approx(12 * n)
    # hand count at the step's fullest moment: the model state with the 16-bit gradients' blocks, the
    # forward and backward passes' blocks, two 1 GiB buckets (2 x 512 Mi 16-bit elements, fewer than the
    # 1.83e9 gradients), the freed flat 16-bit copy (2) and the fp32 gradient with AdamW's sqrt and
    # quotient (4 + 8)
    assert n > 2 * HYBRID_ZERO_BUCKET_ELEMENTS
    reserved_at_step = w + g + o + acts + 2 * 2 * HYBRID_ZERO_BUCKET_ELEMENTS + (2 + 12) * n
    total = float(m.total_bytes) - float(m.reserved_bytes)
    cached = float(m.cached_bytes)
    assert cached == pytest.approx(reserved_at_step - total) and cached > 4 * n
    # not an out-of-memory cause: the total `fits_in_memory` tests leaves it out, a device peak has it,
    # up to the GPU's memory, and an allocated peak does not
    assert part(m, "device") == pytest.approx(float(m.total_bytes) + cached)
    cap = float(m.total_bytes) + cached / 2
    assert part(m, "device", cap) == pytest.approx(cap)
    allocated = float(m.total_bytes) - float(m.allocator_bytes) - float(m.reserved_bytes) + LIBRARY_WORKSPACE_BYTES
    assert part(m, "allocated") == pytest.approx(allocated)
    assert part(m, "reserved") == pytest.approx(allocated + float(m.allocator_bytes) + cached)


def test_fsdp_path_and_other_stacks_keep_no_step_cache():
    # InternEvo's FSDP path (ZeRO-3 here) steps per parameter: nothing cached beside it
    scn, _ = scenario(_row("4", "1", "fsdp"))
    assert float(training_memory(scn).cached_bytes) == 0.0
    assert stack_memory("megatron-core").step_cache is None and stack_memory("fsdp").step_cache is None


def test_step_cached_bytes_buckets_shrink_with_the_gradients_and_the_shard_divides_the_step():
    cache = StepCache()
    # 1e8 gradients: both buckets hold them all once (2 B each), not 2 GiB
    assert cache.bucket_bytes(1e8) == pytest.approx(2e8)
    # four ZeRO-1 ranks: the flat copy and the step over a quarter; nothing where the total is larger
    got = step_cached_bytes(cache, 0.0, 0.0, 12.0, 1e8, 4, 0.0)
    assert got == pytest.approx(2e8 + 14 * 1e8 / 4)
    assert step_cached_bytes(cache, 0.0, 0.0, 12.0, 1e8, 4, math.inf) == 0.0


def test_predict_shows_the_cached_blocks_beside_the_total():
    """Review 52: `predict` printed no cached part, so a device peak (nvidia-smi) above its total
    had no explanation; the JSON key and the table's row, the total left as it was."""
    from click.testing import CliRunner

    from shardwise.cli import cli as main

    argv = ["predict", "--model", "internlm-7b", "--system", "dgx-a100", "--nodes", "1", "--framework", "internevo"]
    argv += ["--tp", "1", "--pp", "1", "--global-batch", "8"]
    data = json.loads(CliRunner().invoke(main, [*argv, "--json"]).output)
    mem = data["memory_bytes"]
    parts = ("weights", "gradients", "optimizer", "activations", "buffers", "allocator", "reserved")
    assert mem["total"] == pytest.approx(sum(mem[k] for k in parts), abs=8)  # cached left out
    assert mem["cached"] > 0.1 * mem["total"]  # the HybridZeroOptimizer's flat-shard step
    text = CliRunner().invoke(main, argv, terminal_width=200).output
    assert "cached (released before out of memory)" in text


def test_the_internevo_preset_says_which_version_its_metric_logits_price():
    """Review 52: the 16 bytes a logit hold at the published tables' tag (v0.2.1dev20231121, eba2b85),
    not at 34fc28d (220953d, in v0.2.1dev20240102 on, runs exp_ in place: 8); the preset says so."""
    from shardwise import presets

    source = " ".join(str(presets.raw("frameworks")["internevo"]["source"]).split())
    assert "v0.2.1dev20231121" in source and "eba2b85" in source
    assert "8 from v0.2.1dev20240102 on" in source
    assert stack_memory("internevo").logits_bytes_per_element == 16.0
