"""Review 43 #8: a model or GPU file may start from a built-in (`like: NAME`, as framework files do);
a link or system file is told in one line that it may not; one "did you mean" line per key given."""

from __future__ import annotations

import dataclasses

import pytest

from shardwise import presets
from shardwise.errors import SpecError


def test_a_model_file_like_a_preset_takes_its_fields_and_overrides_some(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text("name: my-70b\nlike: llama3-70b\nlayers: 40\n")  # before: "missing field(s) hidden, ..."
    mine, base = presets.model(str(path)), presets.model("llama3-70b")
    assert mine.name == "my-70b" and mine.layers == 40
    assert dataclasses.replace(mine, name=base.name, layers=base.layers) == base
    assert "like llama3-70b, layers changed" in mine.notes
    assert presets.model_hf_id(str(path)) is None  # another model: the built-in's checkpoint is not its
    nested = tmp_path / "n.yaml"
    nested.write_text("my-8b: {like: Llama3-8B, seq_len: 4096}\n")  # one top key, a name as the table spells it
    assert presets.model(str(nested)).seq_len == 4096 and presets.model(str(nested)).hidden == 4096


def test_a_gpu_file_like_a_preset(tmp_path, cli):
    gpu = tmp_path / "g.yaml"
    gpu.write_text("name: my-h100\nlike: h100-sxm5-80gb\nmemory: 141GB\n")
    mine, base = presets.gpu(str(gpu)), presets.gpu("h100-sxm5-80gb")
    assert (
        mine.memory_bytes == 141e9
        and dataclasses.replace(mine, name=base.name, memory_bytes=base.memory_bytes, fit_name="") == base
    )
    code, out, err = cli(
        ["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--gpu", str(gpu), "--global-batch", "8"]
    )
    assert code == 0 and "my-h100" in out, err


@pytest.mark.parametrize(
    ("kind", "text", "message"),
    [
        ("model", "name: x\nlike: llama3-7b\n", "like: 'llama3-7b' is not a built-in model (closest: llama3-70b"),
        ("link", "name: x\nlike: nvlink4\n", "like: is for model, GPU and framework files; a link file states"),
    ],
)
def test_like_where_it_cannot_be_read_is_one_line(tmp_path, kind, text, message):
    path = tmp_path / f"{kind}.yaml"
    path.write_text(text)
    with pytest.raises(SpecError, match="^" + str(path).replace(".", r"\.") + ": ") as info:
        getattr(presets, kind)(str(path))
    assert message in str(info.value)


def test_one_suggestion_line_per_key_given(tmp_path):
    # before: "'memory_gb' given: did you mean memory?; 'memory_gb' given: did you mean memory_bandwidth?"
    path = tmp_path / "g.yaml"
    path.write_text("name: gg\npeak_16bit: 900TFLOPS\nmemory_gb: 80GB\n")
    with pytest.raises(SpecError) as info:
        presets.gpu(str(path))
    assert str(info.value).count("'memory_gb' given") == 1
    assert "did you mean memory or memory_bandwidth?" in str(info.value)
