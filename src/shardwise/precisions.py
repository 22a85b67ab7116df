"""The training precisions, one list for the Plan and the command line (no imports: the CLI's
option modules read it at import time and must stay light)."""

# "fp8" is per-tensor scaling (Transformer Engine's delayed or current scaling, Hopper and later);
# "mxfp8" is block scaling, one E8M0 scale per 32 elements (OCP Microscaling v1.0), which
# Blackwell's tensor cores apply inside the GEMM (Megatron-Core `--fp8-recipe mxfp8`).
FP8_PRECISIONS = ("fp8", "mxfp8")
# "nvfp4": 4-bit training as Transformer Engine's NVFP4BlockScaling recipe runs it (Megatron-Core
# `--fp4-format e2m1 --fp4-recipe nvfp4`, Megatron-Bridge `bf16_with_nvfp4_mixed`): all three GEMMs
# of every linear layer on E2M1 operands with an E4M3 scale per 16 elements (`physics.casts`).
FP4_TRAINING_PRECISIONS = ("nvfp4",)
TRAINING_PRECISIONS = ("bf16", "fp16", *FP8_PRECISIONS, *FP4_TRAINING_PRECISIONS)  # what --precision accepts
# "fp4": 4-bit block-scaled tensor-core GEMMs (NVFP4 / MXFP4 on Blackwell), for serving only: the
# serving engines set it from the weights' storage (`engines.serving.compute_precision`).
FP4_PRECISIONS = ("fp4",)
COMPUTE_PRECISIONS = (*TRAINING_PRECISIONS, *FP4_PRECISIONS)  # what a Plan accepts
# how a served model's weights and KV cache may be stored (`serve --weight-precision/--kv-precision`)
STORAGE_PRECISIONS = ("bf16", "fp16", "fp8", "int8", "int4", "nvfp4", "mxfp4", "q8_0", "q4_0", "q4_k")
# How FP8 training casts and multiplies (`physics.fp8_recipes`, `Plan.fp8_recipe`): Transformer
# Engine's delayed scaling ("te": PyTorch, weights cached per step), current scaling ("te_current",
# Megatron-Core's --fp8-recipe tensorwise) or JAX path ("te-jax": weights cast at every use), or a
# torchao.float8 recipe (torchtitan's --float8.recipe_name; with mxfp8, torchao's MX)
FP8_RECIPES = (
    "te",
    "te_current",
    "te-jax",
    "tensorwise",
    "tensorwise_fp8_all_gather",
    "rowwise",
    "rowwise_with_gw_hp",
)
