import pytest

from shardwise import presets
from shardwise.specs import SpecError


@pytest.mark.parametrize("kind", presets.KINDS)
def test_every_preset_loads(kind):
    load = {
        "gpus": presets.gpu,
        "links": presets.link,
        "systems": presets.system,
        "models": presets.model,
        "frameworks": presets.framework,
    }[kind]
    for name in presets.names(kind):
        assert load(name) is not None
        assert presets.raw(kind)[name].get("source"), f"{kind} {name} has no source"


def test_issue_presets_exist():
    for name in (
        "v100-sxm2-32gb",
        "a100-sxm4-40gb",
        "a100-sxm4-80gb",
        "a100-pcie-40gb",
        "a100-pcie-80gb",
        "h100-sxm5-80gb",
        "h100-pcie-80gb",
        "h200-sxm-141gb",
        "b200-sxm-180gb",
        "l40s",
        "rtx-4090",
        "mi300x",
    ):
        presets.gpu(name)
    for name in (
        "nvlink2",
        "nvlink3",
        "nvlink4",
        "nvlink5",
        "pcie3",
        "pcie4",
        "pcie5",
        "ib-edr",
        "ib-hdr",
        "ib-ndr",
        "eth-100g",
        "roce-400g",
    ):
        presets.link(name)
    for name in ("dgx-a100", "dgx-h100", "dgx-b200", "a100-pcie-8x", "rtx4090-8x"):
        presets.system(name)
    for name in (
        "brief",
        "gpt-1.7b",
        "gpt-1t",
        "gpt3-175b",
        "llama2-7b",
        "llama2-13b",
        "llama2-70b",
        "llama3-8b",
        "llama3-70b",
        "llama3-405b",
    ):
        presets.model(name)


def test_unknown_names_suggest_the_closest():
    with pytest.raises(SpecError, match="closest: dgx-a100"):
        presets.system("dgx-a10")


def test_names_are_case_insensitive():
    assert presets.gpu("A100-SXM4-80GB").name == "a100-sxm4-80gb"


def test_a_system_gives_each_gpu_its_share_of_the_nics():
    box = presets.system("a100-pcie-8x", nodes=2)  # 2 HDR NICs for 8 GPUs
    assert box.inter_node_link.bandwidth_bytes_per_s == pytest.approx(25e9 * 2 / 8)
    dgx = presets.system("dgx-a100", nodes=2)
    assert dgx.inter_node_link.bandwidth_bytes_per_s == pytest.approx(25e9)


def test_user_yaml_files(tmp_path):
    gpu = tmp_path / "mygpu.yaml"
    gpu.write_text("peak_16bit: 500 TFLOPS\nmemory: 96GB\nmemory_bandwidth: 3TB/s\n")
    assert presets.gpu(str(gpu)).peak_flops_per_s_16bit == pytest.approx(5e14)
    model = tmp_path / "model.yaml"
    model.write_text("tiny:\n  layers: 4\n  hidden: 256\n  heads: 4\n  vocab: 1000\n  seq_len: 128\n  family: llama\n")
    m = presets.model(str(model))
    assert m.name == "tiny" and m.gated_mlp and not m.bias


def test_bad_yaml_fields_are_named(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("peak_16bit: fast\nmemory: 96GB\nmemory_bandwidth: 3TB/s\n")
    with pytest.raises(SpecError, match="peak_16bit: 'fast' is not a compute rate"):
        presets.gpu(str(f))
    f.write_text("peak_16bit: 1 TFLOPS\nmemory: 96GB\nmemory_bandwidth: 3TB/s\ncolour: red\n")
    with pytest.raises(SpecError, match="unknown field 'colour'"):
        presets.gpu(str(f))
    f.write_text("layers: [\n")
    with pytest.raises(SpecError, match="not valid YAML"):
        presets.model(str(f))


def test_a_user_system_with_inline_parts(tmp_path):
    f = tmp_path / "lab.yaml"
    f.write_text(
        "lab:\n  gpu: {peak_16bit: 400 TFLOPS, memory: 48GB, memory_bandwidth: 1TB/s}\n  gpus_per_node: 4\n"
        "  intra_node_link: pcie5\n  inter_node_link: {bandwidth: 100Gb/s, efficiency: 0.9}\n  nics_per_node: 1\n"
    )
    c = presets.system(str(f), nodes=2)
    assert c.gpu.memory_bytes == 48e9 and c.intra_node_link.name == "pcie5"
    assert c.inter_node_link.bandwidth_bytes_per_s == pytest.approx(12.5e9 / 4)
