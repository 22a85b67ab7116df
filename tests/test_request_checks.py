"""Requests refuse bad values when they are built, in the command line's words, and every way into
the Python API raises SpecError (review 37, findings 6-9 and 29)."""

import math
import re

import pytest

from shardwise.errors import SpecError
from shardwise.requests import PlanRequest, PredictRequest, TrainingRequest
from shardwise.requests.compare import CrossoverRequest, ExperimentRequest, SweepRequest
from shardwise.requests.serve import ServeRequest
from shardwise.requests.timeline import TimelineRequest

BASE = {"model": "llama3-8b", "system": "dgx-h100", "tp": 8, "global_batch": 8}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"tp": 0}, "--tp: 0 is not allowed; it must be a whole number >= 1"),
        ({"global_batch": -1}, "--global-batch: -1 is not allowed; it must be a whole number >= 1"),
        ({"nodes": 0}, "--nodes: 0 is not allowed"),
        ({"seq_len": 0}, "--seq-len: 0 is not allowed"),
        ({"recompute_layers": -1}, "--recompute-layers: -1 is not allowed; it must be a whole number >= 0"),
        ({"pp": 2**60}, "at most 9,007,199,254,740,992"),
        ({"nics_per_node": 0}, "--nics-per-node: 0 is not allowed"),
        ({"offload_optimizer": 1.5}, "--offload-optimizer: 1.5 is not allowed"),
        ({"expert_imbalance": 0.5}, "--expert-imbalance: 0.5 is not allowed"),
        ({"link_latency": "-5us", "intra_link": "nvlink4"}, "--link-latency: -5us is not allowed"),
    ],
)
def test_training_request_refuses_out_of_range_values_when_built(changes, message):
    with pytest.raises(SpecError, match=message.replace("(", r"\(").replace(")", r"\)")):
        TrainingRequest(**{**BASE, **changes})


def test_the_refusal_is_the_command_lines():
    """The same value refused by predict's flags reads the same (one message, not two)."""
    with pytest.raises(SpecError) as built:
        TrainingRequest(**{**BASE, "micro_batch": 0})
    with pytest.raises(SpecError) as parsed:
        PredictRequest.from_argv("--model llama3-8b --system dgx-h100 --tp 8 --global-batch 8 --micro-batch 0")
    assert str(built.value) == str(parsed.value)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("name", ["nics_per_node", "offload_optimizer", "expert_imbalance", "moe_capacity_factor"])
def test_non_finite_floats_are_refused_not_a_traceback_in_command(name, value):
    with pytest.raises(SpecError, match=f"--{name.replace('_', '-')}: -?(nan|inf) is not allowed"):
        PredictRequest(TrainingRequest(**{**BASE, name: value})).command()


def test_command_round_trips_a_fractional_nic_count():
    req = TrainingRequest(**{**BASE, "inter_link": "ib-ndr", "nics_per_node": 0.5})
    assert TrainingRequest.from_argv(req.to_argv()) == req


def test_serve_request_checks_its_ranges_when_built():
    target = TrainingRequest(model="llama3-8b", system="dgx-h100")
    for changes, message in [
        ({"requests": 0}, "--requests: 0 is not allowed"),
        ({"input_len": 0}, "--input-len: 0 is not allowed"),
        ({"concurrency": 0}, "--concurrency: 0 is not allowed"),
        ({"request_rate": -1.0}, "--request-rate: -1 is not allowed"),
        ({"request_rate": math.nan}, "--request-rate: nan is not allowed; it must be a number of requests"),
        ({"burstiness": 0.0}, "--burstiness: 0 is not allowed"),
        ({"seed": -1}, "--seed: -1 is not allowed"),
        ({"max_batched_tokens": 0}, "--max-batched-tokens: 0 is not allowed"),
        ({"ttft_max": "-1s"}, "--ttft-max: '-1s' is not allowed"),
    ]:
        with pytest.raises(SpecError, match=message):
            ServeRequest(target, **changes)


def test_crossover_and_experiment_requests_check_when_built():
    with pytest.raises(SpecError, match="need 0 < low < high"):
        CrossoverRequest(ExperimentRequest(), vary="batch=8..1")
    with pytest.raises(SpecError, match="expected NAME=VALUES"):
        CrossoverRequest(ExperimentRequest(), vary="foo=1..8")
    with pytest.raises(SpecError, match="--nodes: 0 is not allowed"):
        ExperimentRequest(nodes=0)


@pytest.mark.parametrize(
    "make",
    [
        lambda: PredictRequest(None),
        lambda: PredictRequest("llama3-8b"),
        lambda: TimelineRequest(None),
        lambda: ServeRequest(None),
        lambda: PlanRequest(None, 1),
        lambda: CrossoverRequest(None),
        lambda: SweepRequest(None, ("batch=1..8",)),
    ],
)
def test_a_wrapped_request_of_the_wrong_type_is_one_line(make):
    with pytest.raises(SpecError, match=r"is not allowed; give a (Training|Experiment)Request"):
        make()


def test_an_unbalanced_quote_in_from_argv_is_a_spec_error():
    for parse in (TrainingRequest.from_argv, PredictRequest.from_argv, ServeRequest.from_argv):
        with pytest.raises(SpecError, match="no closing quotation"):
            parse("--model 'llama3-8b")


def test_a_flag_error_names_the_flag_once():
    with pytest.raises(SpecError) as exc:
        TrainingRequest.from_argv("--model llama3-8b --tp abc")
    assert str(exc.value) == "--tp: 'abc' is not allowed; give a whole number"
    with pytest.raises(SpecError) as exc:
        ServeRequest(TrainingRequest(model="llama3-8b"), weight_precision="int2")
    assert str(exc.value).startswith("--weight-precision: 'int2' is not allowed")


def test_precision_takes_any_case_as_the_command_line_does():
    assert TrainingRequest(**BASE, precision="BF16").precision == "bf16"
    assert ExperimentRequest(precision="FP8").precision == "fp8"
    assert TrainingRequest(**BASE, recompute="FULL").recompute == "full"


def test_numeric_strings_are_read_in_a_request_as_in_a_csv_cell():
    """docs/api.md: a request takes a CSV row's or a form's text; the same text in a keyword."""
    assert TrainingRequest(**{**BASE, "tp": "8"}) == TrainingRequest(**BASE)
    with pytest.raises(SpecError, match="tp: 'abc' is not allowed; give a whole number"):
        TrainingRequest(**{**BASE, "tp": "abc"})


def test_an_odd_sequence_under_default_sequence_parallelism_names_the_way_out():
    """Review 37 finding 15: SP is on by default with tp > 1; the refusal says how to turn it off."""
    req = TrainingRequest(**{**BASE, "seq_len": 1})
    with pytest.raises(SpecError, match=r"seq_len=1 is not divisible by tp=8.*--no-sequence-parallel"):
        PredictRequest(req).run()
    assert PredictRequest(req.with_(sequence_parallel=False)).run().step_time_s > 0


def test_a_rate_without_its_per_second_is_pointed_at_not_looked_up(tmp_path):
    """Review 37 finding 13: '600GBs' answered 'closest: eth-100g, roce-400g'."""
    for spec, rate in (("600GBs", "600GB/s"), ("100Gbs", "100Gb/s"), ("1.5TB", "1.5TB/s")):
        with pytest.raises(SpecError, match=f"did you mean {re.escape(rate)}") as exc:
            PredictRequest(TrainingRequest(**BASE, intra_link=spec)).run()
        assert "closest" not in str(exc.value) and "or give a YAML file" not in str(exc.value)
    with pytest.raises(SpecError, match="closest: nvlink5"):  # a misspelt name still gets its neighbours
        PredictRequest(TrainingRequest(**BASE, intra_link="nvlink5x")).run()


def test_a_system_file_takes_a_rate_for_its_links(tmp_path):
    """Review 37 finding 14: a rate works on the command line and now in a system file too."""
    path = tmp_path / "s.yaml"
    path.write_text("name: s\ngpu: h100-sxm5-80gb\ngpus_per_node: 8\nintra_node_link: 600GB/s\n")
    by_file = PredictRequest(TrainingRequest(**{**BASE, "system": str(path)})).run()
    flag = TrainingRequest(model="llama3-8b", gpu="h100-sxm5-80gb", intra_link="600GB/s", num_gpus=8, tp=8,
                           global_batch=8)  # fmt: skip
    assert float(by_file.scenario.cluster.intra_node_link.bandwidth_bytes_per_s) == 600e9
    assert by_file.step_time_s == pytest.approx(PredictRequest(flag).run().step_time_s)


@pytest.mark.parametrize(
    ("text", "flag", "hint"),
    [
        ("name: g\npeak_16bit: 989 TFLOPS\nmemory: 80GB\nmemory_bandwith: 3TB/s\n", "gpu",
         "missing field(s) memory_bandwidth ('memory_bandwith' given: did you mean memory_bandwidth?)"),
        ("name: m\nlayers: 2\nhidden: 512\nheads: 8\nvocabulary: 1000\nseq_len: 128\n", "model",
         "missing field(s) vocab ('vocabulary' given: did you mean vocab?)"),
        ("name: l\nbandwith: 10GB/s\n", "intra_link", "missing field(s) bandwidth ('bandwith' given: did you mean"),
    ],
)  # fmt: skip
def test_a_misspelt_required_key_is_pointed_at(tmp_path, text, flag, hint):
    """Review 37 finding 12: the typo named beside the missing key."""
    path = tmp_path / "file.yaml"
    path.write_text(text)
    fields = {"model": "llama3-8b", "gpu": "h100-sxm5-80gb", "intra_link": "nvlink4", "num_gpus": 8, "global_batch": 8}
    with pytest.raises(SpecError) as exc:
        PredictRequest(TrainingRequest(**{**fields, flag: str(path)})).run()
    assert hint in str(exc.value)


def test_a_known_field_is_not_taken_for_a_misspelt_one(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text("name: m\nlayers: 2\nhidden: 512\nkv_heads: 8\nvocab: 1000\nseq_len: 128\n")
    with pytest.raises(SpecError) as exc:
        PredictRequest(TrainingRequest(model=str(path), system="dgx-h100", global_batch=8)).run()
    assert str(exc.value).endswith("missing field(s) heads")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "peak_16bit: 989\nmemory: 80GB\n",
            "peak_16bit: 989 has no unit; write it with one, e.g. peak_16bit: ",
        ),
        ("peak_16bit: 989 TFLOPS\nmemory: 80\n", "memory: 80 has no unit"),
        (
            "peak_16bit: 5e8 TFLOPS\nmemory: 80GB\n",
            "gpu 'g': peak_16bit: '5e8 TFLOPS' is not allowed; it must be between",
        ),
    ],
)
def test_a_gpu_file_error_names_the_key_written_not_the_si_field(tmp_path, text, message):
    """Review 37 finding 11: 'peak_flops_per_s_16bit: 989.0 is not allowed' named a field no file has."""
    path = tmp_path / "g.yaml"
    path.write_text("name: g\nmemory_bandwidth: 3TB/s\n" + text)
    with pytest.raises(SpecError) as exc:
        PredictRequest(
            TrainingRequest(model="llama3-8b", gpu=str(path), intra_link="nvlink4", num_gpus=8, global_batch=8)
        ).run()
    assert (
        message in str(exc.value) and "peak_flops_per_s" not in str(exc.value) and "memory_bytes" not in str(exc.value)
    )


def test_a_link_file_error_does_not_offer_a_yaml_file(tmp_path):
    path = tmp_path / "l.yaml"
    path.write_text("name: l\nbandwidth: 10GB/s\nlatency: 5s\n")
    with pytest.raises(SpecError) as exc:
        PredictRequest(TrainingRequest(**{**BASE, "intra_link": str(path)})).run()
    assert "link 'l': latency: '5s' is not allowed" in str(exc.value) and "give a YAML file" not in str(exc.value)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("-5us", "host_kernel: '-5us' is not allowed; give a time from 0 to 1ms"),
        ("5", "host_kernel: 5 has no unit; write it with one"),
        ("2ms", "host_kernel: '2ms' is not allowed"),
    ],
)
def test_presets_show_refuses_a_framework_file_as_predict_does(tmp_path, cli, value, message):
    """Review 37 finding 10: `presets show FILE` passed `host_kernel: -5us`; predict then named neither
    the file nor the key ('plan: host_kernel_s: -4.99e-06')."""
    path = tmp_path / "f.yaml"
    path.write_text(f"name: f\nlike: fsdp\nhost_kernel: {value}\n")
    shown = cli(["presets", "show", str(path)])
    predicted = cli(["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--global-batch", "8",
                     "--framework", str(path)])  # fmt: skip
    for code, _, err in (shown, predicted):
        assert code == 2 and err.count("\n") == 1 and str(path) in err and message in err, err


def test_a_small_model_header_counts_its_parameters_and_layers(cli):
    """Review 37 finding 27: 'custom (0.0B params, 1 layers ...)'."""
    code, out, _ = cli(["predict", "--layers", "1", "--hidden", "64", "--heads", "8", "--vocab", "100",
                        "--system", "dgx-h100", "--num-gpus", "1", "--global-batch", "1"])  # fmt: skip
    assert code == 0 and "custom (" in out and "K params, 1 layer," in out and "0.0B" not in out


def test_measure_ranges_name_the_flag_as_typed():
    """Review 37 finding 28: the refusal said --timeout-s for --timeout."""
    from shardwise.requests.measure import MeasureStepRequest

    with pytest.raises(SpecError, match=r"^--timeout: 0 is not allowed"):
        MeasureStepRequest(timeout_s=0)


def test_options_that_would_be_ignored_are_refused(cli):
    """Review 37 finding 23: --draws without --calibrated, --plot-link without --plot, a --set key
    given twice with two values, an --hf-id that is no id and no folder."""
    cases = [
        (["validate", "--draws", "3"], "--draws 3: it sets the random draws of --calibrated's"),
        (["serve", "--model", "llama3-8b", "--system", "dgx-h100", "--plan", "tp=8", "--plot-link", "pcie=pcie5"],
         "--plot-link is the second link of the --plot figure; add --plot FILE"),
        (["calibrate", "x.log", "--set", "tp=1", "--set", "tp=8"], "tp is given twice (1 and 8); give it once"),
        (["serve", "--model", "llama3-8b", "--system", "dgx-h100", "--plan", "tp=8", "--emit", "vllm", "--hf-id",
          "a/b/c"], "--hf-id a/b/c: not a Hugging Face id"),
    ]  # fmt: skip
    for args, message in cases:
        code, out, err = cli(args)
        assert code == 2 and out == "" and message in err, (args, err)


def test_a_checkpoint_folder_need_not_exist_here(cli):
    """Review 39: the printed `vllm serve` line runs on the serving host, where the folder lives."""
    args = ["serve", "--model", "llama3-8b", "--system", "dgx-h100", "--plan", "tp=8", "--emit", "vllm"]
    code, out, err = cli([*args, "--hf-id", "/models/no-such-folder-here"])
    assert code == 0, err
    assert "/models/no-such-folder-here" in out


def test_a_set_value_against_what_the_log_states_is_refused():
    from shardwise.calibration.logs import parse_log

    log = "iteration 10/100 | elapsed time per iteration (ms): 1234.5 |\n"
    given = {"model": "llama3-8b", "system": "dgx-h100", "num_gpus": "8", "tp": "8", "pp": "1", "global_batch": "8"}
    assert parse_log(log, given)["step_time_s"] == "1.2345"
    with pytest.raises(SpecError, match=r"--set step_time_s=2: the log states step_time_s = 1\.2345"):
        parse_log(log, {**given, "step_time_s": "2"})


def test_smaller_messages_say_what_to_do(cli, tmp_path):
    """Review 37 finding 16: a log given to validate --runs, `presets gpu`, `presets show DIR`."""
    log = tmp_path / "junk.log"
    log.write_text("hello\n")
    for args, message in (
        (["validate", "--runs", str(log)], "a trainer log is read by `shardwise calibrate"),
        (["presets", "gpu"], "did you mean gpus?"),
        (["presets", "show", str(tmp_path)], "a folder without a config.json; give one of its files"),
    ):
        code, out, err = cli(args)
        assert code == 2 and out == "" and message in err and err.count("\n") == 1, (args, err)


def test_presets_refuse_a_name_that_is_not_text_in_one_line():
    """Review 37 finding 8: presets.model(None) raised AttributeError."""
    from shardwise import presets

    for lookup in (presets.model, presets.gpu, presets.link, presets.system, presets.framework):
        for name in (None, 5):
            with pytest.raises(SpecError, match="is not allowed; give a preset's name or a file"):
                lookup(name)


def test_a_batch_range_too_small_for_the_gpus_says_so():
    """Review 37 finding 16: `crossover --num-gpus 8192` blamed --plan tp=8, not the default batch range."""
    with pytest.raises(SpecError, match=r"the batches swept run 1 to 32 on 8192 GPUs: give --vary batch=LOW\.\.HIGH"):
        CrossoverRequest(ExperimentRequest(num_gpus=8192)).run()


def test_a_file_of_two_entries_says_so(tmp_path):
    """Review 37 finding 16: two top-level keys in a model file read as 'missing field(s) layers, ...'."""
    path = tmp_path / "two.yaml"
    path.write_text("a:\n  layers: 2\n  hidden: 64\nb:\n  layers: 3\n")
    with pytest.raises(SpecError, match=r"the file holds 2 mappings \(a, b\); give one model per file"):
        PredictRequest(TrainingRequest(model=str(path), system="dgx-h100", global_batch=8)).run()
