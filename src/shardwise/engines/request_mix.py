"""Per-request lengths drawn from a `RequestMix`, and arrival times: seeded, so a run repeats.

Lengths and arrivals come from separate generators of one seed (`numpy.random.default_rng([seed,
stream])`), so the arrival times of a rate do not depend on the mix. A log-normal mix is drawn with
rejection: pairs outside the filter (`RequestMix`) or longer than the model's context are drawn
again, as the benchmarks skip them. A table is drawn with replacement, in proportion to its weights,
as given (no truncation: a user's rows are what they are).

Arrivals at a rate r follow vLLM's `--burstiness` b (vllm/benchmarks/serve.py `get_request`):
gaps Gamma(shape b, scale 1 / (r b)), mean 1 / r and coefficient of variation 1 / sqrt(b); b = 1
is a Poisson process, b < 1 burstier, b > 1 more even.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardwise.errors import SpecError
from shardwise.specs.request_mix import RequestMix

LENGTH_STREAM = 1  # the generator of lengths: default_rng([seed, LENGTH_STREAM])
# Pairs drawn to summarise a mix (its means, the context decode sees): the mean of a ShareGPT draw
# of this many is within about 0.5% of the mix's.
SUMMARY_DRAWS = 100_000
MAX_REJECTION_ROUNDS = 200


@dataclass(frozen=True)
class MixSummary:
    """What the iteration cost and the KV cache are priced with: the mean prompt and output, and
    the mean context a decoding sequence reads, weighted by decode steps (a request of output o
    decodes o times over a context growing from its prompt i to i + o: sum o (i + o / 2) / sum o)."""

    mean_input_len: float
    mean_output_len: float
    decode_context: float


def sample_lengths(
    mix: RequestMix, n: int, seed: int = 0, max_context: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """`n` (prompt, output) token counts, int64 arrays."""
    rng = np.random.default_rng([int(seed), LENGTH_STREAM])
    if not mix.parametric:
        pick = rng.choice(len(mix.weights), size=n, p=mix.weights)
        return mix.input_lens[pick], mix.output_lens[pick]
    low = mix.min_tokens
    total = min(x for x in (mix.max_total_len, max_context, np.iinfo(np.int64).max) if x is not None)
    high = min(total - low, mix.max_input_len or total)
    if high < low:
        raise SpecError(
            f"--lengths {mix.name}: a context of {total} tokens holds no request of at least {low} each way"
        )
    ins, outs, have = [], [], 0
    for _ in range(MAX_REJECTION_ROUNDS):
        k = max(2 * (n - have), 64)
        i = np.rint(np.exp(mix.input.mu + mix.input.sigma * rng.standard_normal(k)))
        o = np.rint(np.exp(mix.output.mu + mix.output.sigma * rng.standard_normal(k)))
        keep = (i >= low) & (o >= low) & (i <= high) & (i + o <= total)
        ins.append(i[keep])
        outs.append(o[keep])
        have += int(keep.sum())
        if have >= n:
            return np.concatenate(ins)[:n].astype(np.int64), np.concatenate(outs)[:n].astype(np.int64)
    raise SpecError(f"--lengths {mix.name}: too few requests fit a context of {total} tokens")


def summarize(input_lens: np.ndarray, output_lens: np.ndarray) -> MixSummary:
    """The `MixSummary` of drawn lengths (`SUMMARY_DRAWS` of them: `sample_lengths`)."""
    i, o = np.asarray(input_lens, dtype=float), np.asarray(output_lens, dtype=float)
    return MixSummary(float(i.mean()), float(o.mean()), float(np.sum(o * (i + o / 2)) / np.sum(o)))


def arrival_times(rate_per_s: float, n: int, seed: int = 0, burstiness: float = 1.0) -> np.ndarray:
    """Arrival times (s) of `n` requests at `rate_per_s` (see the module docstring)."""
    rng = np.random.default_rng(seed)
    if burstiness == 1.0:  # Poisson (exactly the exponential draws of the generator)
        return np.cumsum(rng.exponential(1.0 / float(rate_per_s), n))
    return np.cumsum(rng.gamma(burstiness, 1.0 / (float(rate_per_s) * burstiness), n))
