"""The serving stacks' and runtimes' names and ShareGPT's mean lengths, for `serve`'s options (no
imports: the CLI reads them when `shardwise serve --help` builds its options and must stay light,
as `precisions`; review 40 #19: importing them from `requests.serve` pulled in numpy and the specs)."""

# Serving stacks and the runtime each implies (engines/serving.py RUNTIMES)
SERVING_FRAMEWORKS = {
    "tensorrt-llm": "graphs",
    "vllm": "graphs",
    "sglang": "graphs",
    "llama.cpp": "graphs",
    "fastertransformer": "cpp-eager",
    "pytorch": "pytorch-eager",
}
# ... and those that start NCCL with NVLS off: SGLang sets NCCL_NVLS_ENABLE from --enable-nccl-nvls,
# default false (sglang PR 631; srt/entrypoints/engine.py)
FRAMEWORK_NVLS_OFF = ("sglang",)
RUNTIME_NAMES = ("graphs", "cpp-eager", "pytorch-eager")
# the mean prompt and reply of the ShareGPT mix (`specs.request_mix.SHAREGPT`, where they are derived)
SHAREGPT_MEAN_INPUT_TOKENS = 224.0
SHAREGPT_MEAN_OUTPUT_TOKENS = 198.1
