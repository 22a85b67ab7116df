"""The models the rows of `data/public_memory_evidence.csv` name (`analyses.memory_validation`):
a preset, or the shape the source gives, keyed by the CSV's model column."""

from __future__ import annotations

_GPT7B: dict[str, int | str] = {
    "layers": 32,
    "hidden": 4096,
    "heads": 32,
    "kv_heads": 8,
    "ffn_hidden": 16384,
    "tied_embeddings": False,
}
# The models the rows name: a preset, or the shape the source gives (InternLM configs: vocab 103168,
# SwiGLU, RMSNorm; GPT-3 1.3B as Megatron-DeepSpeed's script runs it, vocab padded to 50304).
MODELS: dict[str, tuple[str, dict[str, int | str]]] = {
    "InternLM-7B": (
        "internlm-7b",
        {"layers": 32, "hidden": 4096, "heads": 32, "ffn_hidden": 11008, "vocab": 103168, "family": "llama"},
    ),
    "InternLM-20B": (
        "internlm-20b",
        {"layers": 60, "hidden": 5120, "heads": 40, "ffn_hidden": 13824, "vocab": 103168, "family": "llama"},
    ),
    "GPT-3 1.3B (L24 h2048 heads16)": ("gpt3-1.3b", {"layers": 24, "hidden": 2048, "heads": 16, "vocab": 50304}),
    "Llama-3-8B": ("llama3-8b", {}),
    "Llama3-8B": ("llama3-8b", {}),
    "Llama-2-70B-chat": ("llama2-70b", {}),
    "Llama4-Scout-17Bx16E truncated to 2 layers (torchtitan debug config)": ("llama4-scout", {"layers": 2}),
    "Llama-2-7B": ("llama2-7b", {}),
    "Llama-3-70B": ("llama3-70b", {}),
    "Llama-3.3-70B-Instruct": ("llama3-70b", {}),  # Llama 3.1 70B's shape
    "Meta-Llama-3-8B": ("llama3-8b", {}),
    # torchtitan's DeepSeek-V3 "16B" flavor (torchtitan/models/deepseek_v3/__init__.py at 82a9530f6: 27
    # layers, 1 dense, dim 2048, 16 heads, MLA kv_lora_rank 512 without a query latent, 64 routed experts
    # top-6 of width 1408, 2 shared, dense inter_dim 10944, vocab 102400): Moonlight-16B's shape
    # (DeepSeek-V2-Lite's) with that vocabulary and dense width
    "DeepSeek-V3 16B (torchtitan flavor: L27 h2048, 64 experts top-6 + 2 shared, MLA, vocab 102400)": (
        "moonlight-16b",
        {"vocab": 102400, "ffn_hidden": 10944},
    ),
    # Megatron-LM's GPT 7B functional test: GeLU 4h MLP, learned positions, LayerNorm, biases, dropout
    # 0.1 (gpt family), untied; vocab 131073 padded to 128 x tp
    "GPT 7B functional test (L32 h4096 a32 g8, GeLU 4h, vocab 131200)": ("gpt-7b-test", _GPT7B | {"vocab": 131200}),
    "GPT 7B functional test (L32 h4096 a32 g8, GeLU 4h, vocab 131584)": ("gpt-7b-test", _GPT7B | {"vocab": 131584}),
    # jindajia/Megatron-LM debug/gpt2_755.sh: --swiglu (ffn int(4h 2/3) to a multiple of 64), GPT-2 BPE
    "GPT 774M (L36 h1280 a20, SwiGLU)": (
        "gpt-774m-swiglu",
        {"layers": 36, "hidden": 1280, "heads": 20, "ffn_hidden": 3392, "vocab": 50304, "gated_mlp": True},
    ),
}
# hpcaitech's Lightning benchmark (benchmark/gpt/model.py @6a82b801 gpt2_xl: GPT2LMHeadModel from a
# GPT2Config with n_embd 1600, n_layer 48, n_head 25, vocab 50257): Hugging Face's gpt2-xl shape
MODELS["GPT2-XL (HF GPT2LMHeadModel, n_embd 1600, n_layer 48, n_head 25, vocab 50257)"] = ("gpt2-xl", {})
