"""`shardwise measure micro`'s summary of the preset it wrote (no PyTorch needed)."""

from __future__ import annotations


def test_the_micro_summary_uses_the_outputs_units_not_the_yamls_six_digits():
    from shardwise.measure.micro import preset_summary

    spec = {
        "gpu": {"peak_16bit": "0.543282 TFLOPS", "memory_bandwidth": "0.0567671TB/s", "matmul_efficiency": 0.94},
        "intra_node_link": {"bandwidth": "1.3803GB/s", "base_latency": "336.735us"},
    }
    assert preset_summary(spec, "bfloat16") == [
        "GEMM (bfloat16): 0.543 TFLOP/s, 94% of it at the model's shapes; memory: 56.8 GB/s",
        "link (all-reduce fit): 1.38 GB/s, 337 µs per call",
    ]
    h100 = {  # GPU-sized figures: thousands of GB/s and TFLOP/s, not '3.05e+03 GB/s'
        "gpu": {"peak_16bit": "1491 TFLOPS", "memory_bandwidth": "3.05TB/s", "matmul_efficiency": 0.7},
        "intra_node_link": {"bandwidth": "1200GB/s", "base_latency": "8us"},
    }
    assert preset_summary(h100, "bfloat16") == [
        "GEMM (bfloat16): 1,491 TFLOP/s, 70% of it at the model's shapes; memory: 3.05 TB/s",
        "link (all-reduce fit): 1.2 TB/s, 8 µs per call",
    ]


def test_measuring_without_pytorch_is_one_line_saying_how_to_install_it(monkeypatch):
    """api.md's measure example on a machine without PyTorch: launch.run and the layers module
    say what to install (were ModuleNotFoundError: No module named 'torch' from inside)."""
    import sys

    import pytest

    from shardwise.errors import SpecError
    from shardwise.measure import launch
    from shardwise.measure.shapes import LayerShape

    for name in ("torch", "torch.distributed", "torch.multiprocessing", "torch.nn"):
        monkeypatch.setitem(sys.modules, name, None)  # import torch raises ImportError
    monkeypatch.delitem(sys.modules, "shardwise.measure.layers", raising=False)
    with pytest.raises(SpecError, match=r"needs PyTorch: pip install 'shardwise\[measure\]'"):
        launch.run(print, 2, (LayerShape(hidden=64, heads=4, ffn_hidden=256),), timeout_s=5)
    with pytest.raises(ImportError, match=r"needs PyTorch: pip install 'shardwise\[measure\]'"):
        import shardwise.measure.layers  # noqa: F401


def test_a_pipeline_of_chunks_names_the_multiple_its_layers_need():
    """Review 33: 'a multiple of --ranks 2 (the stages x --chunks 3)' named 2 where 6 is needed."""
    import pytest

    from shardwise import presets
    from shardwise.errors import SpecError
    from shardwise.requests.measure import layer_shape

    model = presets.model("gpt-125m")
    with pytest.raises(SpecError, match=r"^--layers 4 must be a multiple of 6 \(2 stages x 3 chunks"):
        layer_shape(model, 2, 4, False, 3)
    with pytest.raises(SpecError, match=r"^--layers 3 must be a multiple of --ranks 2 \(the pipeline stages\)$"):
        layer_shape(model, 2, 3, False, 1)
    layer_shape(model, 2, 6, False, 3)


def test_every_measured_crossing_is_reported_not_only_the_first():
    """Review 33: tp=2 ahead at batch 1, pp=2 at 4, tp=2 again at 8 (771 vs 999 ms) printed only
    'measured crossover: batch 4'."""
    from shardwise.plots.measure import crossings, crossings_text, crossover_batch

    batches = [1, 2, 4, 8]
    series = {"tp=2": {"measured": [0.060, 0.170, 0.384, 0.771]}, "pp=2": {"measured": [0.096, 0.228, 0.323, 0.999]}}
    assert crossings(batches, series, "measured") == [(4, "pp=2"), (8, "tp=2")]
    assert crossings_text(crossings(batches, series, "measured")) == "batch 4 (pp=2 ahead), tp=2 ahead again at 8"
    assert crossover_batch(batches, series, "measured") == 4
    assert crossings(batches, series, "predicted") == [] and crossings_text([]) == "none in these batches"
