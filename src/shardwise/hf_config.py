"""Read a Hugging Face `config.json` into model fields (`--model path/to/config.json`).

Field names follow the `transformers` configuration classes: Llama-style (`LlamaConfig`,
`MistralConfig`, `Qwen2Config`, ...: `num_hidden_layers`, `hidden_size`, `num_attention_heads`,
`num_key_value_heads`, `intermediate_size`, `vocab_size`, `max_position_embeddings`, `head_dim`,
`tie_word_embeddings`, `hidden_act`: the MLP's activation, `hf_activation`), GPT-2 style (`n_layer`,
`n_embd`, `n_head`, `n_inner`, `n_positions`), GPT-NeoX / Falcon / OPT / BLOOM names where they differ,
and MosaicML's MPT (`d_model`, `n_heads`, `n_layers`, `expansion_ratio`, `max_seq_len`, `no_bias`,
`attn_config`). Mixture-of-experts fields (`num_local_experts`, `n_routed_experts`, `num_experts`,
`num_experts_per_tok`, `moe_intermediate_size`, `n_shared_experts`, `first_k_dense_replace`, ...) and DeepSeek's latent
attention (`kv_lora_rank`, ...) are read too: such a model's parameters are counted, its times not
priced yet. Hybrid Mamba-2 models (Nemotron-H, `NemotronHConfig`): the layer pattern
(`hybrid_override_pattern`, or `layers_block_type` in newer configs) and the Mamba-2 sizes
(`mamba_num_heads`, `mamba_head_dim`, `ssm_state_size`, `n_groups`, `conv_kernel`, `chunk_size`),
the MLP's activation from `mlp_hidden_act`. Sliding-window attention (`sliding_window`, with
`layer_types` or `sliding_window_pattern` naming the layers that attend in full). GPT-OSS's clamped
gated activation (`swiglu_limit`). The architecture (`specs.Model.architecture`) is the config's
`model_type` (`_model_file`). What is not a decoder-only transformer (T5, BERT, Mamba, Jamba, ...)
is refused in one line (`hf_support`). Only the file is read; nothing is downloaded.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from shardwise import files, hf_fields, hf_notes
from shardwise.errors import SpecError
from shardwise.hf_activation import activation as _activation
from shardwise.hf_rope import rope_fields as _rope_fields
from shardwise.hf_support import Duplicate as _Duplicate
from shardwise.hf_support import no_duplicates as _no_duplicates
from shardwise.hf_support import refuse_unsupported, unpriced_notes

# (our field, the config keys that can hold it, first found wins)
_FIELDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("layers", ("num_hidden_layers", "n_layer", "num_layers", "n_layers")),  # n_layers: MPT
    ("hidden", ("hidden_size", "n_embd", "d_model", "n_embed")),  # n_embed: early BLOOM configs
    ("heads", ("num_attention_heads", "n_head", "num_heads", "n_heads")),
    ("kv_heads", ("num_key_value_heads", "num_kv_heads", "multi_query_group_num", "n_head_kv")),  # n_head_kv: Falcon RW
    ("ffn_hidden", ("intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size")),
    ("vocab", ("vocab_size", "padded_vocab_size")),
    ("seq_len", ("max_position_embeddings", "n_positions", "seq_length", "max_sequence_length", "max_seq_len")),
    ("head_dim", ("qk_nope_head_dim", "head_dim")),  # Qwen3, Gemma, GPT-OSS: a x d need not be hidden
    # mixture of experts (Mixtral, Qwen3-MoE, DeepSeek-V3, GPT-OSS, Llama 4)
    ("experts", ("num_local_experts", "n_routed_experts", "num_experts", "moe_num_experts")),
    ("experts_per_token", ("num_experts_per_tok", "experts_per_token", "moe_topk")),
    ("expert_ffn_hidden", ("moe_intermediate_size",)),
    ("shared_experts", ("n_shared_experts", "num_shared_experts")),
    ("dense_layers", ("first_k_dense_replace",)),
    ("moe_every", ("decoder_sparse_step", "interleave_moe_layer_step", "moe_layer_freq")),
    # multi-head latent attention (DeepSeek-V2/V3, Kimi K2)
    ("kv_lora_rank", ("kv_lora_rank",)),
    ("q_lora_rank", ("q_lora_rank",)),
    ("rope_head_dim", ("qk_rope_head_dim",)),
    ("v_head_dim", ("v_head_dim",)),
)
_GATED_ACTIVATIONS = ("silu", "swiglu", "swish", "geglu", "gelu_pytorch_tanh_gated")
_FALCON_TYPES = ("falcon", "refinedweb", "refinedwebmodel")  # the last two: Falcon's configs before transformers 4.33
_GPT_TYPES = ("gpt2", "gpt_neox", "gptj", "opt", "bloom", *_FALCON_TYPES, "gpt_bigcode", "mpt")
# Gemma's MLP is gated (gate_proj, up_proj, down_proj) on a tanh-GELU, and its embeddings are tied
# by default (transformers GemmaConfig, Gemma2Config, Gemma3TextConfig: tie_word_embeddings True).
_GEMMA_TYPES = ("gemma", "gemma2", "gemma3", "gemma3_text")
# Architectures whose config.json states no context window: the length they were trained at
# (FalconConfig's max_position_embeddings default, 2048; BLOOM: Le Scao et al. 2022 Table 3, 2048).
_TYPE_WINDOW = {"falcon": 2048, "refinedweb": 2048, "refinedwebmodel": 2048, "bloom": 2048}
# The sequence length is the config's context window (max_position_embeddings), up to this: a window of
# 128k tokens or a million is reached by long-context extension phases, not what one pre-trains or
# batches with (Llama 3 pre-trained at 8192 and Qwen2.5 at 32768 before extending: Llama 3 and Qwen2.5
# technical reports). Where it is capped, or absent, the note says what was assumed (--seq-len to change).
MAX_SEQ_LEN = 32768
DEFAULT_SEQ_LEN = 8192  # a config that states no context window
MAX_CONFIG_BYTES = 1 << 20  # a config.json is a few kB
MAX_WHOLE = 2**53
# shardwise's own names for a model's shape, which a .json may state instead of a config's
OWN_FIELDS = ("layers", "hidden", "heads", "vocab")
# the keys a Hugging Face config states its shape or its type in: one of them makes a .json a config
_CONFIG_KEYS = frozenset({"model_type", "architectures", *(k for f, keys in _FIELDS if f in OWN_FIELDS for k in keys)})
ACCEPTED = (
    "a .json model is a Hugging Face config.json or shardwise's own model fields "
    "(layers, hidden, heads, vocab, seq_len, as a model YAML file states them)"
)
SEQ_LEN_HINT = "(--seq-len to change)"


def load(path: str | Path, what: str = "config.json") -> Any:
    """The JSON value in file `path` (a `what`), read strictly: UTF-8 (a BOM allowed, as CSV and
    YAML), at most 1 MiB, no key twice in one object; SpecError names what is wrong."""
    p = Path(path)
    raw = files.read_small(p, MAX_CONFIG_BYTES, what)
    try:
        return json.loads(raw.decode("utf-8-sig"), object_pairs_hook=_no_duplicates)
    except UnicodeDecodeError as exc:
        raise SpecError(f"{p}: byte {exc.start} is not UTF-8") from None
    except json.JSONDecodeError as exc:
        raise SpecError(f"{p}: not valid JSON (line {exc.lineno})") from None
    except RecursionError:
        raise SpecError(f"{p}: nested too deeply for a {what}") from None
    except _Duplicate as exc:
        raise SpecError(f"{p}: key {exc.args[0]!r} appears twice in one object; which one is meant?") from None


def states_own_fields(cfg: Any) -> bool:
    """Whether a .json's value holds shardwise's own model fields (`layers`, `hidden`, `heads`,
    `vocab`, as presets/models.yaml and a model YAML file: the mapping, or one entry `name: {fields}`)
    rather than a Hugging Face config: it names one of them and none of the keys a config states its
    shape or its type in (review 37: such a file was read as a config and refused). Several entries
    (`a: {fields}, b: {fields}`) are too, so that the loader says one model per file (review 42: they were
    read as a config, "no layers, hidden, heads, vocab found")."""
    if isinstance(cfg, dict) and len(cfg) > 1 and all(isinstance(v, dict) for v in cfg.values()):
        return all(states_own_fields(v) for v in cfg.values())
    if isinstance(cfg, dict) and len(cfg) == 1 and isinstance(inner := next(iter(cfg.values())), dict):
        cfg = inner
    if not isinstance(cfg, dict):
        return False
    return any(k in cfg for k in OWN_FIELDS) and not states_config(cfg)


def states_config(cfg: Any) -> bool:
    """Whether a .json's value names a key a Hugging Face config states its shape or type in."""
    return isinstance(cfg, dict) and any(k in cfg for k in _CONFIG_KEYS)


def read(path: str | Path, cfg: Any = None) -> dict[str, Any]:
    """Model fields (as in presets/models.yaml) from a config.json (`cfg`: its value, where `load`
    has read it already); SpecError names what is wrong."""
    p = Path(path)
    cfg = load(p) if cfg is None else cfg
    if not isinstance(cfg, dict):
        raise SpecError(f"{p}: expected a JSON object (a Hugging Face config.json)")
    refuse_unsupported(p, cfg, hf_fields.text(p, cfg, "model_type").lower())  # T5, BERT, Mamba, Jamba, ...: one line
    architecture = _model_file(p, cfg)  # the wrapper's, before its text_config is merged
    if "text_config" in cfg and isinstance(cfg["text_config"], dict):  # multimodal wrappers
        from shardwise.specs.model import RULED_LANGUAGE_MODEL_FILES

        text = _model_file(p, cfg["text_config"])
        if architecture is None or text in RULED_LANGUAGE_MODEL_FILES:  # the language model's file
            architecture = text
        cfg = {**cfg, **cfg["text_config"]}
        refuse_unsupported(p, cfg, hf_fields.text(p, cfg, "model_type").lower())
    out: dict[str, Any] = {}
    for field, keys in _FIELDS:
        for key in keys:
            value = cfg.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise SpecError(f"{p}: {key}: {value!r} is not allowed; it must be a whole number")
            if isinstance(value, (int, float)):
                if not (value == value and abs(value) <= MAX_WHOLE and value == int(value)):  # NaN, inf, 4.5
                    raise SpecError(f"{p}: {key}: {value} is not allowed; it must be a whole number")
                out[field] = int(value)
                break
    out["head_dim_in_config"] = any(k in cfg for k in ("head_size", "head_dim", "attention_head_dim"))  # trtllm-bench's
    _hybrid(p, cfg, out)
    _window(p, cfg, out)
    missing = [f for f in ("layers", "hidden", "heads", "vocab") if f not in out]
    if missing:
        raise SpecError(f"{p}: no {', '.join(missing)} found (looked for {', '.join(_keys(missing))}); {ACCEPTED}")
    model_type = hf_fields.text(p, cfg, "model_type").lower()
    stated = out.get("seq_len")
    out["seq_len"], assumed = _seq_len(p, cfg, model_type, stated)
    if stated is not None:  # the context it serves (`Model.max_position_embeddings`), uncapped
        out["max_position_embeddings"] = stated
    _architecture(p, cfg, model_type, out)
    if architecture is not None:
        out["architecture"] = architecture
    out["source"] = f"Hugging Face config {p.name} (model_type {model_type or 'unknown'}); {assumed}"
    notes = unpriced_notes(p, cfg, model_type, out)
    if stated != out["seq_len"]:  # capped, or not stated: say so where the model is used
        notes.insert(0, f"{p.name}: {assumed} {SEQ_LEN_HINT}")
    if notes:
        out["notes"] = notes
    return out


# (our field, the NemotronHConfig keys that can hold it) of a hybrid Mamba-2 model
_HYBRID_FIELDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("mamba_heads", ("mamba_num_heads",)),
    ("mamba_head_dim", ("mamba_head_dim",)),
    ("mamba_state", ("ssm_state_size",)),
    ("mamba_groups", ("n_groups", "mamba_n_groups")),
    ("mamba_conv", ("conv_kernel", "mamba_d_conv")),
    ("mamba_chunk", ("mamba_chunk_size", "chunk_size")),
)
# transformers NemotronHConfig `layers_block_type` names -> Megatron's pattern symbols
_BLOCK_SYMBOLS = {"mamba": "M", "attention": "*", "mlp": "-", "moe": "E"}


def _hybrid(p: Path, cfg: dict[str, Any], out: dict[str, Any]) -> None:
    """A hybrid Mamba-2 model's pattern and mixer sizes (nothing for other configs)."""
    pattern = cfg.get("hybrid_override_pattern")
    blocks = cfg.get("layers_block_type")
    if pattern is None and isinstance(blocks, list):
        unknown = [b for b in blocks if b not in _BLOCK_SYMBOLS]
        if unknown:
            raise SpecError(f"{p}: layers_block_type: {unknown[0]!r} is not one of {', '.join(_BLOCK_SYMBOLS)}")
        pattern = "".join(_BLOCK_SYMBOLS[b] for b in blocks)
    if pattern is None:
        return
    if not isinstance(pattern, str) or not pattern:
        raise SpecError(f"{p}: hybrid_override_pattern: {pattern!r} must be a string of M, *, - and E")
    out["hybrid_pattern"] = pattern
    out.setdefault("layers", len(pattern))
    for field, keys in _HYBRID_FIELDS:
        value = next((cfg[k] for k in keys if cfg.get(k) is not None), None)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_WHOLE:
            raise SpecError(f"{p}: {field}: {value!r} is not allowed; it must be a whole number >= 1")
        out[field] = value
    if "E" in pattern:
        _hybrid_experts(p, cfg, out)


def _hybrid_experts(p: Path, cfg: dict[str, Any], out: dict[str, Any]) -> None:
    """NemotronHConfig's E layers: latent experts (`moe_latent_size`, Nemotron 3 Super and Ultra)
    are refused; the shared experts are one MLP of `moe_shared_expert_intermediate_size`, counted
    as that many expert widths (Nemotron 3 Nano: 3712 = 2 x 1856)."""
    if cfg.get("moe_latent_size"):
        raise SpecError(
            f"{p}: moe_latent_size {cfg['moe_latent_size']!r}: latent mixture-of-experts layers are not priced"
        )
    shared, width = cfg.get("moe_shared_expert_intermediate_size"), out.get("expert_ffn_hidden")
    if not shared or not isinstance(width, int):
        return
    if not isinstance(shared, int) or isinstance(shared, bool) or shared % width:
        raise SpecError(
            f"{p}: moe_shared_expert_intermediate_size {shared!r} is not a multiple of moe_intermediate_size {width}"
        )
    out["shared_experts"] = shared // width


def _window(p: Path, cfg: dict[str, Any], out: dict[str, Any]) -> None:
    """Sliding-window attention: `sliding_window` tokens (null, or `use_sliding_window` false as
    Qwen2's configs say: none), and which layers attend in full -- `layer_types` (GPT-OSS, newer
    Gemma configs: "full_attention" every n-th layer from layer n - 1), `sliding_window_pattern`
    (Gemma 3: every n-th), Gemma 2 every other layer; none of them: every layer (Mistral 7B v0.1)."""
    window = cfg.get("sliding_window")
    if window is None or cfg.get("use_sliding_window") is False:
        return
    if isinstance(window, bool) or not isinstance(window, int) or not 1 <= window <= MAX_WHOLE:
        raise SpecError(f"{p}: sliding_window: {window!r} is not allowed; it must be a whole number >= 1 or null")
    types, pattern = cfg.get("layer_types"), cfg.get("sliding_window_pattern")
    every = 2 if str(cfg.get("model_type", "")).lower() == "gemma2" else 0
    if isinstance(pattern, int) and not isinstance(pattern, bool) and pattern >= 1:
        every = pattern
    if isinstance(types, list) and types:
        full = [i for i, kind in enumerate(types) if kind == "full_attention"]
        if not full:
            every = 0
        elif len(full) == len(types):
            return  # no layer is windowed
        else:
            every = full[0] + 1
            if [i for i in range(len(types)) if (i + 1) % every == 0] != full:
                raise SpecError(
                    f"{p}: layer_types: full-attention layers {full[:4]}... are not every n-th layer; "
                    "only that pattern is priced"
                )
    out["sliding_window"] = window
    out["full_attention_every"] = every


def _seq_len(p: Path, cfg: dict[str, Any], model_type: str, stated: int | None) -> tuple[int, str]:
    """The sequence length to price and where it comes from: the pre-training context a RoPE-scaled
    model was stretched from (`rope_scaling.original_max_position_embeddings`: Llama 3.1's 8192,
    DeepSeek-V2's 4096), else the context window (capped at MAX_SEQ_LEN), else the length the
    architecture trains at where its configs state none (Falcon, BLOOM), else DEFAULT_SEQ_LEN."""
    scaling = cfg.get("rope_scaling")
    original = scaling.get("original_max_position_embeddings") if isinstance(scaling, dict) else None
    if original is not None:
        if isinstance(original, bool) or not isinstance(original, int) or original < 1:
            raise SpecError(
                f"{p}: rope_scaling.original_max_position_embeddings: {original!r} is not allowed; "
                "it must be a whole number >= 1"
            )
        if stated is None or original < stated:
            seq_len = min(original, MAX_SEQ_LEN)
            return seq_len, f"sequence length {seq_len}, the pre-training context before RoPE scaling to {stated}"
    if stated is None and model_type in _TYPE_WINDOW:
        window = _TYPE_WINDOW[model_type]
        return window, f"sequence length {window} assumed: no context window stated; {model_type} models train at it"
    seq_len = DEFAULT_SEQ_LEN if stated is None else min(stated, MAX_SEQ_LEN)
    return seq_len, seq_len_assumption(stated, seq_len)


# Classes whose configs' model_type names another model: xAI's Grok-2 config.json states model_type "git" (transformers'
# GIT, a captioning model) beside architectures Grok1ForCausalLM, the class SGLang's models/grok.py serves (EntryClass
# Grok1ForCausalLM, Grok1ModelForCausalLM); the Grok-1 ports' configuration_grok1.py says "grok-1" (hpcai-tech/grok-1).
_CLASS_ARCHITECTURES = {"grok1forcausallm": "grok-1", "grok1modelforcausallm": "grok-1"}


def _model_file(p: Path, cfg: dict[str, Any]) -> str | None:
    """The architecture an engine runs the config with (`specs.Model.architecture`): the top-level
    `model_type`, lower-cased (a multimodal wrapper's own, "llama4" or "gemma3", not its text_config's:
    what vLLM and SGLang load; but see `specs.model.RULED_LANGUAGE_MODEL_FILES`), Falcon's names before
    transformers 4.33 (RefinedWeb, RefinedWebModel) as "falcon", and where `architectures[0]` is a class of
    _CLASS_ARCHITECTURES its architecture whatever model_type says; None where the config states
    neither, or a model_type no architecture is spelt as (`specs.model.ARCHITECTURE_PATTERN`: the
    config is priced by its shapes, its architecture unknown)."""
    from shardwise.specs.model import ARCHITECTURE_PATTERN

    classes = cfg.get("architectures")
    first = classes[0] if isinstance(classes, list) and classes and isinstance(classes[0], str) else ""
    if first.lower() in _CLASS_ARCHITECTURES:
        return _CLASS_ARCHITECTURES[first.lower()]
    model_type = hf_fields.text(p, cfg, "model_type").lower()
    if model_type in _FALCON_TYPES:
        return "falcon"
    return model_type if re.fullmatch(ARCHITECTURE_PATTERN, model_type) else None


def _architecture(p: Path, cfg: dict[str, Any], model_type: str, out: dict[str, Any]) -> None:
    """The family and its switches (gated MLP, tied embeddings, positions, biases, norm, dropout)."""
    act_keys = ("mlp_hidden_act", "hidden_act", "hidden_activation", "activation_function")  # 3rd: Gemma's
    act_key = next((k for k in act_keys if k in cfg), "hidden_act")
    act = hf_fields.text(p, cfg, act_key).lower()  # mlp_hidden_act: NemotronHConfig's MLP (relu2: squared ReLU)
    gpt_like = model_type in _GPT_TYPES
    out["family"] = "gpt" if gpt_like else "llama"
    gemma = model_type in _GEMMA_TYPES
    out["gated_mlp"] = act in _GATED_ACTIVATIONS or gemma or (not gpt_like and act in ("", "silu"))
    out["activation"] = _activation(act, model_type, gemma, out["gated_mlp"])  # `specs.Model.activation`
    if "ffn_hidden" not in out and gpt_like:
        out["ffn_hidden"] = 4 * out["hidden"]
    out["tied_embeddings"] = hf_fields.flag(p, cfg, ("tie_word_embeddings", "tie_embeddings"), gpt_like or gemma)
    out["learned_positions"] = model_type in ("gpt2", "opt", "gpt_bigcode")
    out["bias"] = hf_fields.flag(p, cfg, ("attention_bias", "bias"), gpt_like)
    out["rmsnorm"] = "rms_norm_eps" in cfg or not gpt_like
    # GPT-OSS (transformers GptOssConfig `swiglu_limit`, 7.0): the gated activation's inputs clamped
    out["glu_clamp"] = hf_fields.limit(p, cfg, "swiglu_limit") > 0
    out.update(_rope_fields(p, cfg))  # yarn_rope, rope_theta
    dropouts = ("attention_dropout", "resid_pdrop", "hidden_dropout", "dropout", "emb_pdrop")
    out["dropout"] = any(hf_fields.probability(p, cfg, key) > 0 for key in dropouts)
    # transformers FalconAttention: one KV head under multi_query (falcon-7b) unless
    # new_decoder_architecture (falcon-40b, -180B), whose num_kv_heads then counts
    multi_query = hf_fields.flag(p, cfg, ("multi_query",), True) and not hf_fields.flag(
        p, cfg, ("new_decoder_architecture",), False
    )
    if model_type in _FALCON_TYPES and multi_query:
        out["kv_heads"] = 1
    if model_type == "mpt":
        _mpt(p, cfg, out)


def _mpt(p: Path, cfg: dict[str, Any], out: dict[str, Any]) -> None:
    """MosaicML MPT (configuration_mpt.py's MPTConfig, shipped with the mosaicml/mpt-7b config, and
    its defaults): MLP width int(expansion_ratio * d_model), biases unless no_bias, learned
    positions unless ALiBi or RoPE, LayerNorm unless norm_type names an RMSNorm, a gated MLP for
    ffn_type mptglu, and the KV heads of attn_config (multiquery: 1; grouped_query_attention: kv_n_heads)."""
    attn = cfg.get("attn_config") or {}
    ffn = cfg.get("ffn_config") or {}
    if not isinstance(attn, dict) or not isinstance(ffn, dict):
        raise SpecError(f"{p}: attn_config and ffn_config must be JSON objects")
    ratio = cfg.get("expansion_ratio", 4)
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio <= 64:
        raise SpecError(f"{p}: expansion_ratio: {ratio!r} is not allowed; it must be a number in (0, 64]")
    width = ffn.get("ffn_hidden_size")  # MPTConfig: an explicit width wins over the ratio
    if width is not None and (isinstance(width, bool) or not isinstance(width, int) or width < 1):
        raise SpecError(f"{p}: ffn_config.ffn_hidden_size: {width!r} is not allowed; it must be a whole number >= 1")
    out["ffn_hidden"] = width or int(ratio * out["hidden"])
    out["bias"] = not hf_fields.flag(p, cfg, ("no_bias",), False)
    positional = hf_fields.flag(p, attn, ("alibi",), False) or hf_fields.flag(p, attn, ("rope",), False)
    out["learned_positions"] = hf_fields.flag(p, cfg, ("learned_pos_emb",), True) and not positional
    out["rmsnorm"] = "rmsnorm" in hf_fields.text(p, cfg, "norm_type").lower()
    out["gated_mlp"] = hf_fields.text(p, ffn, "ffn_type").lower() == "mptglu"
    out["dropout"] = out["dropout"] or hf_fields.probability(p, attn, "attn_pdrop") > 0
    kind = hf_fields.text(p, attn, "attn_type").lower()
    if kind == "multiquery_attention":
        out["kv_heads"] = 1
    elif kind == "grouped_query_attention" and attn.get("kv_n_heads") is not None:
        value = attn["kv_n_heads"]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SpecError(f"{p}: attn_config.kv_n_heads: {value!r} is not allowed; it must be a whole number >= 1")
        out["kv_heads"] = value


def seq_len_assumption(window: int | None, seq_len: int) -> str:
    """Where the sequence length comes from, in words."""
    if window is None:
        return f"sequence length {seq_len} assumed: the config states no context window"
    if window > seq_len:
        return f"sequence length {seq_len}: the config's context window of {window} tokens capped at {MAX_SEQ_LEN}"
    return f"sequence length {seq_len}, the config's context window"


def note_seq_len(fields: dict[str, Any], seq_len_given: bool = False) -> None:
    """One `note:` line on stderr each: where the imported sequence length is not the config's
    context window (capped, not in serve: `hf_notes`; or assumed where it states none; not where
    `--seq-len` chose it), and what the config states that is not priced (`hf_support.unpriced_notes`)."""
    import click

    for note in fields.get("notes") or ():
        if not ((seq_len_given and note.endswith(SEQ_LEN_HINT)) or hf_notes.skipped(note)):
            click.echo(f"note: {note}", err=True)


def _keys(fields: list[str]) -> list[str]:
    return [k for f, keys in _FIELDS if f in fields for k in keys]
