"""What lengths the requests a server sees have: fixed (every request the `ServingWorkload`'s
`input_len` prompt and `output_len` new tokens: no mix at all), a ShareGPT-like mix (a log-normal
per direction, filtered as the serving benchmarks filter ShareGPT), or a table of (prompt, output)
rows with weights (a user's CSV of requests or a histogram). `engines.request_mix` draws from it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from shardwise.serving_names import SHAREGPT_MEAN_INPUT_TOKENS, SHAREGPT_MEAN_OUTPUT_TOKENS  # noqa: F401 (the mix's means)
from shardwise.specs._checks import SpecError


@dataclass(frozen=True)
class LogNormal:
    """Token counts round(exp(mu + sigma Z)), Z standard normal."""

    mu: float
    sigma: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.mu) and math.isfinite(self.sigma) and self.sigma > 0):
            raise SpecError(f"log-normal lengths: mu {self.mu!r}, sigma {self.sigma!r}; both finite, sigma above 0")


@dataclass(frozen=True, eq=False)
class RequestMix:
    """Per-request lengths: `input`/`output` log-normals (with the filter below), or the rows of a
    table (`input_lens`, `output_lens`, `weights`: drawn with replacement in proportion to the
    weights). The filter, as vLLM's benchmark applies it to ShareGPT: at least `min_tokens` each
    way, a prompt of at most `max_input_len`, at most `max_total_len` in all (None: no bound)."""

    name: str
    source: str
    input: LogNormal | None = None
    output: LogNormal | None = None
    min_tokens: int = 1
    max_input_len: int | None = None
    max_total_len: int | None = None
    input_lens: np.ndarray | None = field(default=None, repr=False)
    output_lens: np.ndarray | None = field(default=None, repr=False)
    weights: np.ndarray | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        parametric = self.input is not None and self.output is not None
        table = self.input_lens is not None and self.output_lens is not None
        if parametric == table:
            raise SpecError(f"request mix {self.name!r}: give either two log-normals or a table of lengths, not both")
        if table:
            i = np.asarray(self.input_lens)
            o = np.asarray(self.output_lens)
            w = np.ones(i.shape) if self.weights is None else np.asarray(self.weights, dtype=float)
            if i.ndim != 1 or i.shape != o.shape or i.shape != w.shape or i.size == 0:
                raise SpecError(f"request mix {self.name!r}: the table needs as many prompt, output and weight values")
            for what, v in (("input_len", i), ("output_len", o)):
                if not np.issubdtype(v.dtype, np.integer) or v.min() < 1:
                    raise SpecError(f"request mix {self.name!r}: every {what} must be a whole number of at least 1")
            if not (np.all(np.isfinite(w)) and w.min() >= 0 and w.sum() > 0):
                raise SpecError(f"request mix {self.name!r}: weights must be at least 0 and not all 0")
            object.__setattr__(self, "input_lens", i.astype(np.int64))
            object.__setattr__(self, "output_lens", o.astype(np.int64))
            object.__setattr__(self, "weights", w / w.sum())

    @property
    def parametric(self) -> bool:
        return self.input is not None

    def table_means(self) -> tuple[float, float] | None:
        """A table's weighted mean prompt and output (None for log-normals, whose filter depends on
        the model's context)."""
        if self.parametric or self.weights is None:
            return None
        return float(np.dot(self.weights, self.input_lens)), float(np.dot(self.weights, self.output_lens))


# ShareGPT as vLLM's and SGLang's serving benchmarks send it (`vllm bench serve --dataset-name
# sharegpt`, `python -m sglang.bench_serving --dataset-name sharegpt`, on
# ShareGPT_V3_unfiltered_cleaned_split.json): each conversation's first prompt and first reply,
# leaving out pairs with fewer than 4 tokens either way, a prompt over 1,024 tokens or more than
# 2,048 in all (vLLM benchmarks/benchmark_dataset.py `is_valid_sequence`, copied from the original
# `sample_sharegpt_requests`). A log-normal per direction, prompt and reply drawn independently
# (their logarithms correlate by 0.19 in the distribution below):
# - scale: the means these benchmarks report, 224 prompt and 198 generated tokens per request
#   (sgl-project/sglang#2805: 369,103 input and 326,408 generated tokens over 1,648 requests, Llama 3.1
#   tokenizer; vllm-project/vllm#18566: 229,711 and 203,068 over 1,000, within 3%);
# - shape: the standard deviation of the logarithm of ShareGPT's first-round lengths as the vLLM
#   paper published them (Kwon et al. 2023; artifact sosp-ae-39/sosp-ae-astra,
#   datasets/sharegpt_opt_text_completion_length.pkl, 84,226 pairs, OPT tokenizer): 1.72 for prompts,
#   1.16 for replies;
# - mu such that, after the filter (both directions together), the means are 224 and 198 (solved
#   once on 4 million draws): medians then 129 and 111 tokens, p99 964 and 1,264, 83% of the draws
#   kept (tests/test_request_mix.py checks the means).
# (SHAREGPT_MEAN_INPUT_TOKENS, SHAREGPT_MEAN_OUTPUT_TOKENS: 224 and 198.1, in `serving_names`, imported above)
SHAREGPT = RequestMix(
    name="sharegpt",
    source="ShareGPT as vLLM's and SGLang's benchmarks sample it, log-normal: docs/serving.md#request-mixes",
    input=LogNormal(mu=5.1702, sigma=1.716),
    output=LogNormal(mu=4.7225, sigma=1.162),
    min_tokens=4,
    max_input_len=1024,
    max_total_len=2048,
)
