"""Specs from plain mappings (loaders.py): units become SI numbers, families set flags, and every
mistake is one SpecError line naming the field, the value and what is allowed."""

import pytest

from shardwise import presets
from shardwise.loaders import (
    FAMILIES,
    gpu_from_dict,
    link_from_dict,
    link_from_rate,
    load_yaml,
    model_from_dict,
    per_gpu_nic,
)
from shardwise.specs import Link, SpecError

A100 = {"peak_16bit": "312 TFLOPS", "memory": "80GB", "memory_bandwidth": "2039GB/s"}


FRAMEWORK = (
    "async_tp_grad: true\ntp_comm_overlap: false\noverlap_grad_reduce: true\noverlap_param_gather: false\n"
    "grad_accumulation_fusion: true\noverlap_p2p: null\npipeline_sync: true\nscatter_gather: true\nzero_stage: 1\n"
)


def one_line_error(excinfo: pytest.ExceptionInfo) -> str:
    text = str(excinfo.value)
    assert "\n" not in text, text
    return text


def test_a_gpu_from_strings_with_units():
    gpu = gpu_from_dict(
        "a100",
        {**A100, "peak_fp8": "0 TFLOPS", "kernel_launch": "4us", "sm_count": 108, "source": "datasheet"},
    )
    assert gpu.peak_flops_per_s_16bit == pytest.approx(3.12e14)
    assert gpu.memory_bytes == 80e9  # decimal GB, as datasheets quote
    assert gpu.memory_bandwidth_bytes_per_s == pytest.approx(2.039e12)
    assert gpu.kernel_launch_s == pytest.approx(4e-6)
    assert gpu.sm_count == 108
    assert gpu.matmul_efficiency == 0.8  # the default when not given


def test_a_gpu_in_binary_units_and_plain_numbers():
    gpu = gpu_from_dict("x", {"peak_16bit": 1e15, "memory": "141GiB", "memory_bandwidth": "4.8TB/s"})
    assert gpu.memory_bytes == 141 * 2**30
    assert gpu.peak_flops_per_s_16bit == 1e15
    assert gpu.memory_bandwidth_bytes_per_s == pytest.approx(4.8e12)


def test_a_gpu_of_ones_own_gets_the_gemm_traits_its_file_gives():
    """The GEMM kernels and L2 are the GPU's fields, not keyed by a preset's name: a file that copies
    the H100's fields under a name of its own is priced as the H100 is (`physics.gemm`)."""
    from shardwise.physics.gemm import gemm_time_s

    h100 = presets.gpu("h100-sxm5-80gb")
    raw = dict(presets.raw("gpus")["h100-sxm5-80gb"])
    mine = gpu_from_dict("my-h100", raw)
    assert (mine.gemm_kernels, mine.l2_bytes, mine.l2_bandwidth_bytes_per_s) == ("sm90", 50e6, 5120 * 1.755e9)
    plain = gpu_from_dict("my-h100", {k: v for k, v in raw.items() if k not in ("gemm_kernels", "l2", "l2_bandwidth")})
    assert plain.gemm_kernels == "generic" and plain.l2_bytes == 0.0

    def qkv(gpu):  # Llama 3 70B's QKV GEMM at TP 8 on a 129-token serving step
        m, n, k = 129.0, 1280.0, 8192.0
        return float(gemm_time_s(m, n, k, 1.0, 2.0 * (m * k + k * n), 2.0, gpu, 989.4e12, 0.682))

    assert qkv(mine) == qkv(h100) != qkv(plain)
    with pytest.raises(SpecError) as excinfo:
        gpu_from_dict("x", {**A100, "gemm_kernels": "sm75"})
    assert one_line_error(excinfo) == "gpu 'x': gemm_kernels: 'sm75' is not allowed; choose one of generic, sm90, sm100"


def test_a_missing_required_field_is_named():
    with pytest.raises(SpecError) as excinfo:
        gpu_from_dict("x", {"peak_16bit": "1 TFLOPS"})
    assert one_line_error(excinfo) == "gpu 'x': missing field(s) memory, memory_bandwidth"


def test_an_unknown_field_lists_the_allowed_ones():
    with pytest.raises(SpecError) as excinfo:
        gpu_from_dict("x", {**A100, "colour": "green"})
    text = one_line_error(excinfo)
    assert text.startswith("gpu 'x': unknown field 'colour'; allowed: ")
    allowed = text.split("allowed: ")[1].split(", ")
    assert allowed == sorted(allowed) and {"peak_16bit", "memory", "memory_bandwidth", "sm_count"} <= set(allowed)


def test_a_bad_unit_names_the_field_the_value_and_examples():
    with pytest.raises(SpecError) as excinfo:
        gpu_from_dict("x", {**A100, "memory_bandwidth": "600 parsecs"})
    assert one_line_error(excinfo) == (
        "gpu 'x': memory_bandwidth: '600 parsecs' is not a bandwidth; "
        "use e.g. '600GB/s', '400Gb/s' (bits) or bytes per second"
    )
    with pytest.raises(SpecError, match=r"^gpu 'x': sm_count: .*'many'"):  # a plain int field too
        gpu_from_dict("x", {**A100, "sm_count": "many"})


def test_a_link_in_bits_per_second_is_divided_by_eight():
    link = link_from_dict("ndr", {"bandwidth": "400Gb/s", "latency": "5us", "efficiency": "0.9", "notes": "IB NDR"})
    assert link.bandwidth_bytes_per_s == pytest.approx(50e9)
    assert link.latency_s == pytest.approx(5e-6)
    assert link.efficiency == 0.9
    assert link.base_latency_s == pytest.approx(20e-6)  # the default per-call latency
    with pytest.raises(SpecError, match="link 'y': missing field\\(s\\) bandwidth"):
        link_from_dict("y", {"latency": "1us"})


def test_a_model_family_sets_the_architecture_flags_and_fields_override_them():
    llama = model_from_dict(
        "tiny", {"layers": 2, "hidden": 64, "heads": 4, "vocab": 100, "seq_len": 16, "family": "LLaMA"}
    )
    assert (llama.gated_mlp, llama.tied_embeddings, llama.bias, llama.rmsnorm) == (True, False, False, True)
    gpt = model_from_dict("g", {"layers": "4", "hidden": 64, "heads": 4, "vocab": 100, "seq_len": 16, "bias": False})
    assert gpt.layers == 4 and isinstance(gpt.layers, int)  # a whole number given as text
    assert (gpt.gated_mlp, gpt.tied_embeddings, gpt.bias) == (False, True, False)  # gpt, bias overridden
    assert set(FAMILIES["gpt"]) == set(FAMILIES["llama"])  # both families set every flag


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"family": "mamba"}, "model 'm': family 'mamba' is not allowed; choose one of gpt, llama"),
        ({"layers": "many"}, "model 'm': layers: 'many' is not a whole number"),
        ({"layers": 2.5}, "model 'm': layers: 2.5 is not a whole number"),
        ({"bias": "yes"}, "model 'm': bias: 'yes' must be true or false"),
    ],
)
def test_bad_model_fields(change, message):
    base = {"layers": 2, "hidden": 64, "heads": 4, "vocab": 100, "seq_len": 16}
    with pytest.raises(SpecError) as excinfo:
        model_from_dict("m", {**base, **change})
    assert one_line_error(excinfo) == message


def test_two_misspelt_model_fields_are_both_named_in_one_line(cli, tmp_path):
    # a like: file with two typos reported only the first (review 44 #10); bad input stays one line
    path = tmp_path / "small.yaml"
    path.write_text("like: llama3-8b\nlayrs: 16\nhiden: 2048\n")
    code, _, err = cli(["predict", "--model", str(path), "--system", "dgx-h100", "--num-gpus", "8"])
    assert code == 2 and "Traceback" not in err and err.count("\n") == 1, err
    assert "unknown field 'layrs' (did you mean layers?); unknown field 'hiden' (did you mean hidden?)" in err
    assert "; allowed: activation, " in err


def test_an_unknown_model_field_lists_the_allowed_ones():
    with pytest.raises(SpecError, match="unknown field 'depth'; allowed: activation, architecture, bias, "):
        model_from_dict("m", {"layers": 2, "hidden": 64, "heads": 4, "vocab": 100, "seq_len": 16, "depth": 3})
    with pytest.raises(SpecError, match="missing field\\(s\\) vocab, seq_len"):
        model_from_dict("m", {"layers": 2, "hidden": 64, "heads": 4})


@pytest.mark.parametrize(
    ("rate", "role", "latency"),
    [
        (300e9, "intra", 1e-6),  # NVLink-class
        (100e9, "intra", 1e-6),  # the boundary is NVLink-class
        (99e9, "intra", 2e-6),  # PCIe-class
        (32e9, "intra", 2e-6),
        (300e9, "inter", 5e-6),  # a network, whatever its rate
    ],
)
def test_a_link_given_as_a_rate_takes_the_latency_of_its_kind(rate, role, latency):
    link = link_from_rate("r", rate, role)
    assert link.latency_s == latency
    assert link.bandwidth_bytes_per_s == rate
    assert link.efficiency == 1.0  # a rate is what is sustained
    assert link.base_latency_s == pytest.approx(20e-6)


def test_a_rate_replacing_a_link_keeps_its_latencies_unless_told():
    old = Link("ib", 25e9, latency_s=7e-6, efficiency=0.8, base_latency_s=30e-6)
    kept = link_from_rate("r", 10e9, "intra", replaced=old)
    assert (kept.latency_s, kept.base_latency_s) == (7e-6, 30e-6)
    told = link_from_rate("r", 10e9, "intra", replaced=old, latency_s=3e-6)
    assert (told.latency_s, told.base_latency_s) == (3e-6, 30e-6)


def test_a_rate_replacing_an_nvlink_keeps_nccls_low_latency_protocols():
    """A faster or slower NVLink is still an NVLink path, where NCCL runs LL and LL128; a rate
    given alone (no link replaced) is priced with the chunked protocol only."""
    nvlink = presets.link("nvlink4")
    assert link_from_rate("r", 600e9, "intra", replaced=nvlink).ll_bandwidth_bytes_per_s == 141e9
    assert link_from_rate("r", 600e9, "intra").ll_bandwidth_bytes_per_s == 0.0


def test_each_gpu_gets_its_share_of_the_nics():
    nic = Link("hdr", 25e9)
    shared = per_gpu_nic(nic, 2, 8)  # 2 NICs for 8 GPUs: a quarter each
    assert shared.bandwidth_bytes_per_s == pytest.approx(6.25e9)
    assert shared.name == "hdr x2/8" and shared.latency_s == nic.latency_s
    assert per_gpu_nic(nic, 8, 8) is nic  # one each
    assert per_gpu_nic(nic, 16, 8) is nic  # more NICs than GPUs do not add bandwidth per GPU
    with pytest.raises(SpecError, match="nics_per_node: 0 is not allowed; it must be > 0"):
        per_gpu_nic(nic, 0, 8)
    for absurd in (float("inf"), float("nan"), 1e6):
        with pytest.raises(SpecError, match=r"nics_per_node: .* is not allowed; it must be > 0 and at most 1024"):
            per_gpu_nic(nic, absurd, 8)


def test_yaml_files(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text("gpu:\n  memory: 80GB\n  sm_count: 108\n")
    assert load_yaml(good) == {"gpu": {"memory": "80GB", "sm_count": 108}}
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: 1\nb: [1, 2\nc: 3\n")  # the flow list is still open when line 3 starts a mapping
    with pytest.raises(SpecError) as excinfo:
        load_yaml(bad)
    assert one_line_error(excinfo) == f"{bad}: line 3 is not valid YAML"
    with pytest.raises(SpecError, match=r"missing\.yaml: cannot read \(No such file or directory\)"):
        load_yaml(tmp_path / "missing.yaml")


@pytest.mark.parametrize(
    ("text", "flag", "message"),
    [
        (
            "gpu: a100-sxm4-80gb\ngpus_per_node: abc\nintra_node_link: nvlink3\n",
            "--system",
            "gpus_per_node: 'abc' is not a number",
        ),
        (
            "gpu: a100-sxm4-80gb\ngpus_per_node: .inf\nintra_node_link: nvlink3\n",
            "--system",
            "gpus_per_node: inf is not a finite number",
        ),
        (
            "gpu: a100-sxm4-80gb\ngpus_per_node: 0\nintra_node_link: nvlink3\n",
            "--system",
            "gpus_per_node: 0 is not allowed",
        ),
        (
            "gpu: a100-sxm4-80gb\ngpus_per_node: 8\nintra_node_link: nvlink3\ninter_node_lnk: ib-hdr\n",
            "--system",
            "(did you mean inter_node_link?)",
        ),
        ("layers: .inf\nhidden: 64\nheads: 4\nvocab: 10\nseq_len: 8\n", "--model", "layers: inf is not a whole number"),
        (
            "layers: true\nhidden: 64\nheads: 4\nvocab: 10\nseq_len: 8\n",
            "--model",
            "layers: True is not a whole number",
        ),
        (
            "layers: 2\nlayers: 4\nhidden: 64\nheads: 4\nvocab: 10\nseq_len: 8\n",
            "--model",
            "line 2: duplicate key 'layers'",
        ),
        ("a: &a [x, x]\nb: [*a, *a]\nlayers: 2\n", "--model", "line 2: YAML aliases (*a) are not allowed"),
        (
            "peak_16bit: 312TFLOPS\nmemory: 80GB\nmemory_bandwidth: 2TB/s\nmatmul_efficiency: 1.5\n",
            "--gpu",
            "matmul_efficiency: 1.5 is not allowed; it must be in (0, 1]",
        ),
        (  # with its unit: a bare number is refused before its range
            "peak_16bit: 312TFLOPS\nmemory: 80GB\nmemory_bandwidth: 2TB/s\nkernel_launch: 18446744073709551616s\n",
            "--gpu",
            "kernel_launch: '18446744073709551616s' is not allowed; it must be between 0 and 1 s",
        ),
        (
            "gpu: a100-sxm4-80gb\ngpus_per_node: 8\nintra_node_link: nvlink3\ninter_node_link: false\n",
            "--system",
            "inter_node_link: link False is not allowed",  # not "no network"
        ),
        (
            "gpu: a100-sxm4-80gb\ngpus_per_node: 8\nintra_node_link: nvlink3\ninter_node_link: ib-hdr\n"
            "nics_per_node: .inf\n",
            "--system",
            "nics_per_node: inf is not allowed; it must be > 0 and at most 1024",
        ),
        (FRAMEWORK + "zero: 1\n", "--framework", "unknown field 'zero'; allowed: aligned_chunk_sync"),
        (FRAMEWORK + "x: !!set {a, b}\n", "--framework", "unknown field 'x'"),
        (FRAMEWORK.replace("zero_stage: 1", "zero_stage: true"), "--framework", "zero_stage: True is not allowed"),
        (FRAMEWORK.replace("zero_stage: 1", "zero_stage: x"), "--framework", "zero_stage: 'x' is not allowed"),
    ],
)
def test_yaml_files_are_read_strictly_and_errors_name_the_file(text, flag, message, tmp_path, cli):
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    base = {
        "--system": ["--model", "llama3-8b"],
        "--model": ["--system", "dgx-a100"],
        "--gpu": ["--model", "llama3-8b"],
        "--framework": ["--model", "llama3-8b", "--system", "dgx-a100"],
    }
    code, out, err = cli(["predict", *base[flag], flag, str(path), "--global-batch", "8"])
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith(f"error: {path}: ") and message in err


def test_a_framework_file_with_the_right_fields_is_used(tmp_path, cli):
    path = tmp_path / "fw.yaml"
    path.write_text(FRAMEWORK)
    code, _, err = cli(["predict", "--model", "llama3-8b", "--system", "dgx-a100", "--framework", str(path)])
    assert code == 2 and "--global-batch is required" in err  # read without complaint; the batch is missing


def test_a_link_file_with_an_absurd_base_latency_names_the_flag_and_the_field(tmp_path, cli):
    path = tmp_path / "link.yaml"
    path.write_text("bandwidth: 300GB/s\nlatency: 1us\nbase_latency: 18446744073709551616s\n")
    args = ["predict", "--model", "llama3-8b", "--system", "dgx-a100", "--tp", "8", "--global-batch", "8"]
    code, out, err = cli([*args, "--intra-link", str(path)])
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith("error: --intra-link: ") and "base_latency: '18446744073709551616s' is not allowed" in err


def test_a_system_file_without_a_network_says_so_for_several_nodes(tmp_path, cli):
    path = tmp_path / "one-box.yaml"
    path.write_text("gpu: a100-sxm4-80gb\ngpus_per_node: 8\nintra_node_link: nvlink3\ninter_node_link: null\n")
    args = ["predict", "--model", "llama3-8b", "--system", str(path), "--nodes", "2", "--global-batch", "16"]
    code, _, err = cli(args)
    assert code == 2 and f"--system {path} has no inter_node_link; 2 nodes need --inter-link" in err


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ("layers: 2\n".encode("utf-16"), "is not a text file"),
        ("layers: 2 # caf\u00e9\n".encode("latin-1"), "is not UTF-8"),
        (b"layers: 2\n" + b"#" * (1 << 20), "too large for a YAML spec"),
    ],
)
def test_yaml_that_is_not_small_utf8_text_is_one_line(payload, message, tmp_path):
    path = tmp_path / "m.yaml"
    path.write_bytes(payload)
    with pytest.raises(SpecError, match=message):
        load_yaml(path)
