"""Hybrid Mamba-2 models (Nemotron-H): the pattern and its checks, a Mamba-2 mixer's work against a
hand count, the mean layer as the sum of its parts, the presets, the Hugging Face config, the CLI
and the public runs (`physics.mamba`, docs/model.md "Hybrid Mamba-2 models")."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from shardwise import presets
from shardwise.errors import SpecError
from shardwise.physics import mamba as mb
from shardwise.physics.compute import layer_times
from shardwise.physics.flops import layer_forward
from shardwise.physics.memory_activations import layer_activation_bytes
from shardwise.physics.params import total_params
from shardwise.specs import Model, Recompute

SMALL = {"name": "h", "hidden": 1024, "heads": 8, "kv_heads": 2, "ffn_hidden": 4096, "vocab": 32000, "seq_len": 2048,
         "mamba_heads": 32, "mamba_head_dim": 64, "mamba_state": 128, "mamba_groups": 4, "mamba_chunk": 128,
         "gated_mlp": False, "bias": False, "dropout": False, "rmsnorm": True, "tied_embeddings": False,
         "learned_positions": False}  # fmt: skip


def hybrid(pattern: str, **changes: object) -> Model:
    return Model(layers=len(pattern), hybrid_pattern=pattern, **{**SMALL, **changes})  # type: ignore[arg-type]


def test_a_mamba2_mixers_flops_are_the_hand_count():
    """Nemotron-H 56B's mixer (h 8192, 256 heads of 64, state 256, 8 groups, chunk 128) on one
    sequence of 8192 tokens, tp 1, counted by hand from Dao & Gu 2024 Sec. 6 and Megatron's
    MambaMixer: in_proj 2 T h (2 H P + 2 G N + H), out_proj 2 T H P h, the scan
    G 2 Q N + H (2 Q P + 4 N P) a token."""
    m = presets.model("nemotron-h-56b")
    t = 8192
    fwd = mb.mamba_forward(m, t, 1, 2.0)
    assert fwd.in_proj.flops == 2 * t * 8192 * (2 * 16384 + 2 * 8 * 256 + 256)
    assert fwd.out_proj.flops == 2 * t * 16384 * 8192
    assert fwd.ssd_flops == pytest.approx(t * (8 * 2 * 128 * 256 + 256 * (2 * 128 * 64 + 4 * 256 * 64)), rel=1e-12)
    # split over 8 TP ranks: every term / 8 (heads and groups split, Megatron's MambaMixer)
    eight = mb.mamba_forward(m, t, 8, 2.0)
    assert eight.flops == pytest.approx(fwd.flops / 8, rel=1e-12)
    # the backward's kernels (the recomputed forward among them): 3 products of 2QP and 5 of 2NP
    # a head, 3 of 2QN a group
    back = sum(f for f, _ in fwd.ssd_backward)
    want = t * (3 * 8 * 2 * 128 * 256 + 256 * (3 * 2 * 128 * 64 + 5 * 2 * 256 * 64))
    assert back == pytest.approx(want, rel=1e-12)


def test_the_ssd_forward_reproduces_its_h100_measurement():
    """vLLM PR #27299's H100 microbenchmark of the mamba_ssm-derived Triton forward ("Original";
    128 heads of 64, state 128, 1 group, chunk 256): 1.26e7 tokens/s at 8192 tokens, the point
    SSD_GEMM_FRACTION is fitted on, and 1.21e7 / 1.29e7 at 4096 / 16384 tokens, not fitted."""
    from shardwise.physics.kernels import roofline_s

    gpu = presets.gpu("h100-sxm5-80gb")
    m = Model(name="x", layers=1, hidden=4096, heads=32, vocab=1000, seq_len=8192, hybrid_pattern="M",
              mamba_heads=128, mamba_head_dim=64, mamba_state=128, mamba_groups=1, mamba_chunk=256)  # fmt: skip
    for tokens, measured in ((8192, 1.262e7), (4096, 1.206e7), (16384, 1.292e7)):
        kernels = mb.mamba_forward(m, tokens, 1, 2.0).ssd
        seconds = sum(roofline_s(f, b, gpu, "bf16", mb.SSD_GEMM_FRACTION) for f, b in kernels)
        assert tokens / seconds == pytest.approx(measured, rel=0.05)


def test_a_hybrid_layer_is_the_sum_of_its_parts():
    """Pattern M*- prices three mean layers as one Mamba-2, one attention and one MLP layer: its
    FLOPs, GEMM times, attention/scan times and parameters add up to the three one-kind patterns'."""
    gpu = presets.gpu("h100-sxm5-80gb")
    mixed = hybrid("M*-")
    parts = [hybrid(k) for k in "M*-"]

    def fwd(m: Model):
        return layer_forward(m, 2, 2, True, 2.0)

    def times(m: Model):
        return layer_times(fwd(m), gpu, "bf16", True)

    assert 3 * fwd(mixed).model_flops == pytest.approx(sum(fwd(p).model_flops for p in parts), rel=1e-12)
    t, ts = times(mixed), [times(p) for p in parts]
    for name in ("forward_s", "backward_s", "gemm_s", "attention_s", "attention_bwd_s", "elementwise_s"):
        assert 3 * getattr(t, name) == pytest.approx(sum(getattr(x, name) for x in ts), rel=1e-9), name
    # the one-kind layers: an attention layer has no MLP and no scan, an MLP layer no attention
    attention, mlp = fwd(parts[1]), fwd(parts[2])
    assert attention.has_mlp == 0 and attention.mamba.share == 0 and attention.attention_share == 1
    assert mlp.attention_share == 0 and ts[2].attention_s == 0
    # parameters: a layer of each kind plus the embeddings, once
    emb = 2 * 32000 * 1024 + 1024  # untied embedding and output, final norm
    assert total_params(mixed) - emb == pytest.approx(sum(total_params(p) - emb for p in parts), rel=1e-12)


def test_the_pattern_order_does_not_change_the_whole_models_price():
    """At pp = 1 the model costs what its layers cost together: M*-M and MM-* price the same."""
    a, b = hybrid("M*-M"), hybrid("MM-*")
    fa, fb = layer_forward(a, 1, 1, False, 2.0), layer_forward(b, 1, 1, False, 2.0)
    assert fa.model_flops == fb.model_flops
    assert total_params(a) == total_params(b)


def test_mamba_activations_follow_megatrons_saved_tensors():
    """An all-Mamba pattern keeps per token the norm input and the in_proj input (replicated
    without SP), and / tp: the in_proj output, the scan's ungated output, the RMSNorm's input
    (the gated output) and out_proj's input (Megatron-Core's `_ssm_training`)."""
    m = hybrid("MM")
    s, h, t, e = m.seq_len, m.hidden, 4, 2.0
    got = layer_activation_bytes(m, 1, t, False, Recompute.NONE, True, e)
    width = 2 * 32 * 64 + 2 * 4 * 128 + 32
    want = s * (2 * e * h + e * (width + 3 * 32 * 64) / t)  # z x B C dt; y; y * silu(z); the norm out
    assert got == pytest.approx(want, rel=1e-12)
    full = layer_activation_bytes(m, 1, t, True, Recompute.FULL, True, e)
    assert full == pytest.approx(e * s * h / t, rel=1e-12)  # the layer input alone, split by SP


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"hybrid_pattern": "M*-X"}, r"hybrid_pattern has 'X' at position 3; use M \(Mamba-2\)"),
        ({"hybrid_pattern": "M*-", "layers": 4}, "layers 4 differs from the hybrid_pattern's 3 layers"),
        ({"hybrid_pattern": "M*-", "mamba_heads": 0}, r"has Mamba layers \(M\) but mamba_heads is 0"),
        ({"hybrid_pattern": "M*-", "mamba_groups": 5}, "mamba_heads 32 is not a multiple of mamba_groups 5"),
        ({"hybrid_pattern": "ME*"}, r"mixture-of-experts layers \(E\) but experts is 0"),
        ({"hybrid_pattern": "M*-", "experts": 8, "experts_per_token": 2}, "experts are its E layers"),
        ({"hybrid_pattern": "ME-", "experts": 8, "experts_per_token": 2, "shared_experts": 1}, r"MLP \(-\) and"),
        ({"hybrid_pattern": "ME*", "experts": 8, "experts_per_token": 2, "moe_every": 2}, "leave dense_layers"),
        ({"hybrid_pattern": ""}, "mamba_heads needs a hybrid_pattern"),
    ],
)
def test_a_bad_pattern_is_one_clear_line(changes, message):
    fields = {**SMALL, "layers": len(str(changes.get("hybrid_pattern", ""))) or 3, **changes}
    with pytest.raises(SpecError, match=message) as err:
        Model(**fields)  # type: ignore[arg-type]
    assert "\n" not in str(err.value)


def test_a_bad_pattern_in_a_model_file_exits_2(tmp_path, cli):
    bad = tmp_path / "m.yaml"
    bad.write_text(
        "h:\n  {layers: 3, hidden: 1024, heads: 8, vocab: 32000, seq_len: 2048, mamba_heads: 32,\n"
        '   hybrid_pattern: "M*Q"}\n'
    )
    code, _, err = cli(["predict", "--model", str(bad), "--system", "dgx-h100", "--global-batch", "8"])
    assert code == 2 and len(err.strip().splitlines()) == 1 and "hybrid_pattern has 'Q'" in err


@pytest.mark.parametrize(
    ("name", "billions"), [("nemotron-h-8b", 8.1), ("nemotron-h-47b", 46.8), ("nemotron-h-56b", 56.3)]
)
def test_nemotron_h_presets_have_their_published_sizes(name, billions):
    """Nemotron-H report (NVIDIA 2025, arXiv 2504.03624): 8B, 47B and 56B; 56B: 54 Mamba-2, 10
    attention and 54 MLP layers of 118."""
    m = presets.model(name)
    assert total_params(m) / 1e9 == pytest.approx(billions, abs=0.1)
    if name == "nemotron-h-56b":
        assert [m.hybrid_pattern.count(c) for c in "M*-"] == [54, 10, 54]


def test_predict_prices_nemotron_h_end_to_end(cli):
    code, out, err = cli(["predict", "--model", "nemotron-h-56b", "--system", "dgx-h100", "--num-gpus", "32",
                          "--tp", "8", "--global-batch", "96", "--precision", "fp8", "--framework", "megatron-core",
                          "--json"])  # fmt: skip
    assert code == 0, err
    result = json.loads(out)
    step = result["step_time_s"]
    assert 5.0 < step < 30.0  # the published step: 15.1 s (dgxc-benchmarking, PUB-0826)


def test_a_nemotron_h_config_json_is_its_preset(tmp_path):
    """NemotronHConfig's fields (transformers): the pattern, the Mamba-2 sizes, relu2 (not gated)."""
    config = {"model_type": "nemotron_h", "architectures": ["NemotronHForCausalLM"], "vocab_size": 131072,
              "hidden_size": 4096, "num_hidden_layers": 52, "num_attention_heads": 32, "num_key_value_heads": 8,
              "head_dim": 128, "intermediate_size": 21504, "max_position_embeddings": 8192,
              "hybrid_override_pattern": presets.model("nemotron-h-8b").hybrid_pattern, "mamba_num_heads": 128,
              "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4, "chunk_size": 128,
              "mlp_hidden_act": "relu2", "mamba_hidden_act": "silu", "tie_word_embeddings": False,
              "attention_bias": False, "rms_norm_eps": 1e-5}  # fmt: skip
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    got, want = presets.model(str(path)), presets.model("nemotron-h-8b")
    shape = ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn_hidden", "vocab", "seq_len", "gated_mlp")
    fields = (*shape, "hybrid_pattern", "mamba_heads", "mamba_head_dim", "mamba_state", "mamba_groups", "mamba_chunk")
    assert {f: getattr(got, f) for f in fields} == {f: getattr(want, f) for f in fields}
    # newer configs name the layers in a list instead of the pattern string
    blocks = {"M": "mamba", "*": "attention", "-": "mlp"}
    del config["hybrid_override_pattern"], config["num_hidden_layers"]
    config["layers_block_type"] = [blocks[c] for c in want.hybrid_pattern]
    path.write_text(json.dumps(config))
    assert presets.model(str(path)).hybrid_pattern == want.hybrid_pattern


def test_the_public_nemotron_h_and_nano_rows_are_priced_super_and_ultra_say_why_not():
    """Nemotron-H 56B (dense hybrid) and Nemotron 3 Nano (plain experts) are priced; Super and
    Ultra route through latent experts (moe_latent_size): skipped with that reason."""
    from shardwise.analyses.public_moe import resolved
    from shardwise.analyses.public_runs import raw_rows, scenario_for, skip_reason

    rows = raw_rows()
    h = [r for r in rows if r["model"] == "nemotron-h-56b"]
    assert len(h) == 7 and all(skip_reason(r) == "" for r in h)
    three = [resolved(r) for r in rows if r["architecture_note"] == "hybrid mamba" and r["moe"] == "yes"]
    nano = [r for r in three if r["model"] == "nemotron-3-nano-30b-a3b"]
    latent = {skip_reason(r) for r in three if "nano" not in r["model_raw"].lower()}
    assert latent == {"hybrid mamba with latent mixture-of-experts layers (not modelled)"}
    priced = [r for r in nano if not skip_reason(r)]
    assert len(priced) >= 20 and all(r["layers"] == "52" for r in priced)
    scn = scenario_for(priced[0])
    assert scn.model.moe_layers == 23 and scn.model.hybrid_mlp_width == 3712


def test_ordinary_models_are_unchanged_by_the_hybrid_fields():
    """An ordinary layer's mean-layer fields are the identity (shares 1, no mixer)."""
    m = presets.model("llama3-8b")
    fwd = layer_forward(m, 1, 2, True, 2.0)
    assert fwd.mamba is None and fwd.attention_share == 1.0 and fwd.mixer_share == 1.0
    assert m.hybrid_shares == (0.0, 1.0, 1.0) and not m.is_hybrid
    assert np.isclose(replace(m, notes="x").transformer_twin.hidden, m.hidden)


def test_serving_a_hybrid_is_refused_in_one_line(cli):
    """Decode of a Mamba-2 layer is a state update, not a KV-cache read: not priced yet."""
    code, _, err = cli(["serve", "--model", "nemotron-h-8b", "--system", "dgx-h100"])
    assert code == 2 and len(err.strip().splitlines()) == 1 and "serving a hybrid Mamba-2 model" in err


def test_a_hybrid_plans_over_pipeline_stages(cli):
    """pp > 1 prices each stage as its layers' count of mean layers (docs/model.md)."""
    args = ["--num-gpus", "64", "--tp", "8", "--pp", "2", "--global-batch", "96", "--precision", "fp8", "--json"]
    code, out, err = cli(["predict", "--model", "nemotron-h-56b", "--system", "dgx-h100", *args])
    assert code == 0, err
    assert json.loads(out)["step_time_s"] > 0


def test_a_hybrids_launch_command_is_refused(cli):
    code, _, err = cli(["plan", "--model", "nemotron-h-8b", "--system", "dgx-h100", "--global-batch", "64",
                        "--emit", "megatron"])  # fmt: skip
    assert code == 2 and "hybrid Mamba-2 model's launch command is not emitted" in err


def test_the_training_paths_extras_are_megatrons():
    """Megatron-Core's `_ssm_training`: the backward redoes the conv1d's forward (read and write
    x, B, C: 2 e (H P + 2 G N) / t a token); the [s, b, h] <-> [b, s, h] copies cost nothing with
    one sequence per micro-batch ([s, 1, h] is contiguous as [1, s, h]) and, with two, copy the
    in_proj output and the scan's output forward and the in_proj output's gradient backward."""
    m = hybrid("M*-")
    e, t = 2.0, 4
    width, inner, conv = 2 * 32 * 64 + 2 * 4 * 128 + 32, 32 * 64, 32 * 64 + 2 * 4 * 128
    one = mb.mamba_forward(m, 4096, t, e, batch=1)
    assert one.recompute == (pytest.approx(2 * e * 4096 * conv / t), 1.0)
    assert float(one.copies_forward[0]) == 0.0 and float(one.copies_backward[0]) == 0.0
    two = mb.mamba_forward(m, 8192, t, e, batch=2)
    assert float(two.copies_forward[0]) == pytest.approx(2 * e * 8192 * (width + inner) / t)
    assert float(two.copies_backward[0]) == pytest.approx(2 * e * 8192 * width / t)
    # priced as memory-bound kernels in the Mamba-2 share of the mean layer's scan slots
    from shardwise.physics.flops import layer_forward
    from shardwise.physics.kernels import memory_s

    gpu = presets.gpu("h100-sxm5-80gb")
    f2 = layer_forward(m, 2, t, True, e)
    bare = replace(f2, mamba=replace(f2.mamba, copies_forward=(0.0, 0.0), copies_backward=(0.0, 0.0)))
    with_copies, without = layer_times(f2, gpu, "bf16", True), layer_times(bare, gpu, "bf16", True)
    share = f2.mamba.share
    assert share == pytest.approx(1 / 3)
    assert float(with_copies.attention_s - without.attention_s) == pytest.approx(
        share * float(memory_s(f2.mamba.copies_forward[0], gpu, f2.mamba.copies_forward[1]))
    )
    assert float(with_copies.attention_bwd_s - without.attention_bwd_s) == pytest.approx(
        share * float(memory_s(f2.mamba.copies_backward[0], gpu, f2.mamba.copies_backward[1]))
    )


def test_an_e_layer_is_its_shared_experts_in_the_mean_layer_plus_its_routed_experts():
    """Pattern ME* (Nemotron 3's kinds): the mean layer holds a third of a Mamba-2 mixer, of
    attention and of an MLP of the shared experts' width (shared_experts x expert_ffn_hidden); the
    one E layer adds its router and routed experts: parameters, activated parameters and FLOPs."""
    from shardwise.engines.training_flops import layers_model_flops
    from shardwise.physics.moe import experts_forward
    from shardwise.physics.params import activated_params, mlp_params

    moe = {"experts": 16, "experts_per_token": 2, "expert_ffn_hidden": 512, "shared_experts": 2}
    m = hybrid("ME*", **moe)
    assert m.hybrid_shares == pytest.approx((1 / 3, 1 / 3, 1 / 3)) and m.hybrid_mlp_width == 1024
    assert m.moe_layers == 1 and m.is_moe
    # the same pattern with the E layer as an MLP layer of the shared experts' width ("-")
    dense = hybrid("M-*", ffn_hidden=1024)
    expert = mlp_params(m, 512)
    router = 1024 * 16
    assert total_params(m) - total_params(dense) == pytest.approx(router + 16 * expert, rel=1e-12)
    assert activated_params(m) - total_params(dense) == pytest.approx(router + 2 * expert, rel=1e-12)
    routed = experts_forward(m, m.seq_len, 1, 1, 2.0).model_flops
    assert layers_model_flops(m, 2.0) == pytest.approx(layers_model_flops(dense, 2.0) + routed, rel=1e-12)


def test_nemotron_3_nano_matches_its_published_size():
    """NVIDIA's Nemotron 3 Nano model card: 31.6B parameters, 3.2B active (3.6B with embeddings)."""
    from shardwise.physics.params import activated_params

    nano = presets.model("nemotron-3-nano-30b-a3b")
    assert nano.hybrid_pattern.count("E") == 23 and nano.hybrid_pattern.count("*") == 6
    assert total_params(nano) == pytest.approx(31.6e9, rel=0.01)
    assert activated_params(nano) == pytest.approx(3.6e9, rel=0.02)


def test_a_nemotron_3_nano_config_json_is_its_preset(tmp_path):
    """NemotronHConfig with E layers: n_routed_experts, num_experts_per_tok, moe_intermediate_size,
    the shared experts as one MLP of moe_shared_expert_intermediate_size (2 expert widths); a
    config with latent experts (moe_latent_size: Nemotron 3 Super, Ultra) is refused in one line."""
    want = presets.model("nemotron-3-nano-30b-a3b")
    config = {"model_type": "nemotron_h", "architectures": ["NemotronHForCausalLM"], "vocab_size": 131072,
              "hidden_size": 2688, "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128,
              "intermediate_size": 1856, "max_position_embeddings": 8192,
              "hybrid_override_pattern": want.hybrid_pattern,
              "mamba_num_heads": 64, "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4,
              "chunk_size": 128, "mlp_hidden_act": "relu2", "tie_word_embeddings": False, "n_routed_experts": 128,
              "num_experts_per_tok": 6, "moe_intermediate_size": 1856, "n_shared_experts": 1,
              "moe_shared_expert_intermediate_size": 3712, "moe_latent_size": None}  # fmt: skip
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    got = presets.model(str(path))
    fields = ("layers", "experts", "experts_per_token", "expert_ffn_hidden", "shared_experts", "hybrid_pattern")
    assert {f: getattr(got, f) for f in fields} == {f: getattr(want, f) for f in fields}
    assert total_params(got) == pytest.approx(total_params(want), rel=1e-12)
    path.write_text(json.dumps({**config, "moe_latent_size": 1024}))
    with pytest.raises(SpecError, match="moe_latent_size 1024: latent mixture-of-experts layers are not priced") as err:
        presets.model(str(path))
    assert "\n" not in str(err.value)


def test_a_hybrid_models_interval_is_its_familys_measured_spread_where_wider(cli):
    """The uncalibrated interval of a hybrid Mamba-2 model takes the family's spread on its
    published runs (`spreads.FAMILY_LOG_SD`, wider than Megatron-Core's) and says so; a
    transformer on the same stack keeps the stack's."""
    import math

    from shardwise.calibration import spreads

    hybrid = spreads.uncalibrated_log_sd("h100-sxm5-80gb", "megatron-core", "hybrid")
    plain = spreads.uncalibrated_log_sd("h100-sxm5-80gb", "megatron-core")
    assert hybrid > plain
    assert hybrid >= spreads.FAMILY_LOG_SD["hybrid"][0]
    args = ["predict", "--system", "dgx-h100", "--tp", "8", "--global-batch", "64", "--json"]
    widths = []
    for model in ("nemotron-h-56b", "llama3-70b"):
        code, out, err = cli([*args, "--model", model])
        assert code == 0, err
        d = json.loads(out)
        widths.append(math.log(d["step_time_s_high"] / d["step_time_s"]))
    assert widths[0] == pytest.approx(spreads.Z80 * hybrid, rel=1e-6)
    assert widths[1] == pytest.approx(spreads.Z80 * plain, rel=1e-6)


def test_the_dgxc_nemotron_h_rows_run_without_nemos_comm_overlap_callback():
    """dgxc-benchmarking's Nemotron-H 56B ran NeMo 7a8f1cc's pretrain_nemotronh_56b.py, which builds
    its recipe without performance_mode, so no MegatronCommOverlapCallback: no userbuffers TP overlap
    and the recipe's overlap_param_gather=False (`analyses.public_overlap_recipes`). The same
    release's Llama 3.1 rows (performance_mode=True) keep the preset's overlaps, and the Nano rows
    of Megatron-Bridge are not touched."""
    from shardwise.analyses import public_overlap_recipes, public_runs

    rows = public_runs.raw_rows()
    nemotron_h = [r for r in rows if r["model"] == "nemotron-h-56b"]
    assert len(nemotron_h) == 7
    for row in nemotron_h:
        request = public_runs.request_for(row)
        assert request.tp_comm_overlap is False and request.overlap_param_gather is False
    llama = [r for r in rows if "dgxc-benchmarking llama3.1/" in r["source"]]
    others = llama + [r for r in rows if r["model"].startswith("nemotron-3-nano")]
    assert llama and not any(public_overlap_recipes.plan_settings(r) for r in others)


def test_the_56b_rows_exposed_tp_collectives_are_what_moves_them():
    """Without the overlap the 56B's step grows by its exposed TP collectives (tp 8, sequence
    parallel: an all-gather and a reduce-scatter per mixer and MLP each way), not by its compute."""
    from shardwise.analyses import public_runs
    from shardwise.engines.training import estimate_training_step

    row = next(r for r in public_runs.raw_rows() if r["id"] == "PUB-0826")
    request = public_runs.request_for(row)
    off = estimate_training_step(request.scenario())
    on = estimate_training_step(request.with_(tp_comm_overlap=True, overlap_param_gather=True).scenario())
    assert float(off.breakdown.compute_s) == pytest.approx(float(on.breakdown.compute_s))
    assert float(off.breakdown.tp_comm_s) > 2.0 * float(on.breakdown.tp_comm_s)
    assert 1.1 < float(off.step_time_s) / float(on.step_time_s) < 1.35
