"""A measured model TFLOP/s is converted with the count its framework used (`tflops_count`):
Megatron-LM since 8873b55d, Megatron-Bridge and NeMo count the causal half of the attention
square, older Megatron-LM and Megatron-DeepSpeed the whole square (the default)."""

import pytest

from shardwise import presets
from shardwise.calibration.runs import parse_runs
from shardwise.errors import SpecError

HEADER = "model,system,num_gpus,tp,pp,global_batch,seq_len,model_tflops_per_gpu,tflops_count"


def _step(count: str, tflops: float = 400.0) -> float:
    (run,) = parse_runs(f"{HEADER}\nllama3-8b,dgx-h100,8,1,1,16,8192,{tflops},{count}\n")
    return run.measured


def _llama_flops_per_step(causal: float) -> float:
    """NeMo's llama3_flops (Megatron-Bridge's count with causal_self_attn), by hand: B s l h^2 (12
    + 12 g/a + 18 f/h + 12 s/h x causal + 6 V/(l h)); causal 1 is the whole square."""
    m = presets.model("llama3-8b", seq_len=8192)
    b, s, layers, h = 16, 8192, m.layers, m.hidden
    g, a, f, v = m.kv_heads, m.heads, m.ffn_hidden, m.vocab
    return b * s * layers * h * h * (12 + 12 * g / a + 18 * f / h + 12 * s / h * causal + 6 * v / (layers * h))


def test_each_count_gives_the_step_its_formula_gives():
    # the tool's causal part keeps the diagonal, (s + 1) / 2s of the square, not 1/2: 1.5e-5 more here
    for count, causal, rel in (("full-square", 1.0, 1e-9), ("causal", 0.5, 3e-5)):
        assert _step(count) == pytest.approx(_llama_flops_per_step(causal) / (400e12 * 8), rel=rel), count


def test_the_default_is_the_whole_square_and_a_causal_figure_is_a_shorter_step():
    assert _step("") == _step("full-square")
    ratio = _step("causal") / _step("full-square")
    assert ratio == pytest.approx(_llama_flops_per_step(0.5) / _llama_flops_per_step(1.0), rel=3e-5)
    assert 0.85 < ratio < 0.92  # the causal half of an 8k square: 11% of Llama-3-8B's FLOPs


def test_maxtext_count_by_column_or_by_the_public_tables_tag():
    from shardwise.engines.training_flops import maxtext_flops_per_step

    m = presets.model("llama3-8b", seq_len=8192)
    expected = float(maxtext_flops_per_step(m, 16)) / (400e12 * 8)
    assert _step("maxtext-6n-causal") == pytest.approx(expected, rel=1e-12)
    text = "model,system,num_gpus,tp,pp,global_batch,seq_len,model_tflops_per_gpu,parse_notes\n"
    (run,) = parse_runs(text + "llama3-8b,dgx-h100,8,1,1,16,8192,400,tflops_formula=maxtext-6n-causal; x=1\n")
    assert run.measured == pytest.approx(expected, rel=1e-12)


def test_an_unknown_count_is_one_line_naming_the_column_and_the_allowed_values():
    with pytest.raises(SpecError) as err:
        _step("megatron")
    text = str(err.value)
    assert "tflops_count: 'megatron' is not allowed" in text and "full-square, causal, maxtext-6n-causal" in text
    assert "\n" not in text


def test_a_count_beside_a_step_time_changes_nothing():
    text = "model,system,num_gpus,tp,pp,global_batch,seq_len,step_time_s,tflops_count\n"
    (run,) = parse_runs(text + "llama3-8b,dgx-h100,8,1,1,16,8192,2.5,causal\n")
    assert run.measured == 2.5
