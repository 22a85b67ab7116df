"""One replica of a serving plan under in-flight batching (`Replica`): its KV capacity, sequence
slots and iteration costs, prepared once, and its runs of traffic (`engines.inflight_sim.simulate`).
Split out of `engines.inflight`, which re-exports it.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np

from shardwise.engines.dp_attention import dp_attention
from shardwise.engines.engine_presets import engine, sglang_max_running_requests
from shardwise.engines.inflight_lockstep import Lockstep, lockstep_costs
from shardwise.engines.inflight_sim import (
    KV_BLOCK_TOKENS,
    MAX_BATCHED_TOKENS,
    Simulated,
    Traffic,
    kv_blocks,
    kv_capacity,
    simulate,
)
from shardwise.engines.iteration import IterationTable, iteration_table
from shardwise.engines.request_mix import SUMMARY_DRAWS, sample_lengths, summarize
from shardwise.engines.serving import kv_cache_free_bytes, max_sequences_per_replica, memory_per_gpu, serving_scenario
from shardwise.engines.trtllm_buffers import BENCH_MAX_BATCH
from shardwise.errors import SpecError
from shardwise.specs import Scenario
from shardwise.specs.request_mix import RequestMix
from shardwise.specs.serving import ServingWorkload


class Replica:
    """One replica of `scn` serving `wl` in flight: its KV capacity and iteration costs, prepared
    once; `run` simulates traffic on it. With a request `mix` the lengths are drawn per request
    (truncated to the model's context, `engines.request_mix`), the KV cache admits requests by
    their own blocks, and the iteration cost is priced, as with fixed lengths, on one grid: for
    the mix's mean prompt and the mean context decode reads (`MixSummary`)."""

    def __init__(
        self,
        scn: Scenario,
        wl: ServingWorkload,
        max_batched_tokens: int = MAX_BATCHED_TOKENS,
        mix: RequestMix | None = None,
        seed: int = 0,
    ) -> None:
        self.scenario = scn = serving_scenario(scn, wl)
        preset, pp = engine(wl.engine), int(np.max(scn.plan.pp))
        # the vLLM buffers gathered at the whole budget (`engines.serving.kv_cache_free_bytes`)
        self.gather_budget = max_batched_tokens
        if preset.dp_attention_splits_budget and scn.model.is_moe and bool(np.any(dp_attention(scn.plan))):
            max_batched_tokens = max(max_batched_tokens // int(np.max(scn.plan.dp)), 1)  # SGLang: chunk / dp
        self.max_batched_tokens, self.mix = max_batched_tokens, mix
        # an iteration here is one round of the pp micro-batches; where the engine schedules each
        # micro-batch with its own budget (and slots), the round holds pp of them
        # (`engines.engine_presets`, "Budgets under pipeline parallelism")
        self.round_tokens = max_batched_tokens * (pp if preset.budget_per_micro_batch else 1)
        # the decoding sequences take their tokens from that budget where a batch mixes them with
        # prompt chunks; where prompts are prefilled apart (SGLang, mixed chunks off), the whole
        # budget is the prompts' (`PrefillAdder` is given 0 decode tokens then)
        self.decodes_share_budget = not preset.prefill_apart
        # ... and on one GPU its prefill step comes before the decode step of the same iteration: the
        # prompts' first tokens are sampled at its end, a decode step c(d, 0) before the iteration's
        # (`engines.iteration`, prefill apart); under pp the round's end is kept
        self.prefill_step_first = preset.prefill_apart and pp == 1
        self.replicas = int(scn.plan.dp)
        # requests are drawn within the context the model serves; SGLang sizes its request pool by
        # it too: its context_len, config.json max_position_embeddings (configs/model_config.py
        # `get_context_length`), or the --context-length that `--emit sglang` writes for a longer
        # priced request (review 43 #7; it was the pre-training sequence length: Llama 3.1's 8,192
        # for its 131,072, a pool of 4,096 where SGLang keeps 2,048)
        self.max_context = scn.model.serving_context
        self.pool_context = max(int(self.max_context), int(wl.input_len) + int(wl.output_len))
        self.kv_total_blocks: int | None = None
        if mix is None:
            self.workload = wl
            self.max_sequences = max_sequences_per_replica(scn, wl)  # the engine's cap (TensorRT-LLM: trtllm-bench's)
            weights, kv_per_seq = memory_per_gpu(scn, wl)
            self.weights_bytes, self.kv_bytes_per_sequence = float(weights), float(kv_per_seq)
            context = wl.input_len + wl.output_len
            free = float(kv_cache_free_bytes(scn, wl, self.weights_bytes, self.gather_budget))
            self.kv_pool_bytes = max(free, 0.0)  # what the engine pre-allocates for its KV cache, per GPU
            per_token = self.kv_bytes_per_sequence / context
            self._cap_sequences(wl, free, per_token)
            self.capacity = kv_capacity(max(free, 0.0), per_token, wl.input_len, wl.output_len)
            self.slots = top = min(self.capacity, self.max_sequences)
            self.mean_context = wl.input_len + wl.output_len / 2
            self.mean_input_len, self.mean_output_len = wl.input_len, wl.output_len
        else:
            inputs, outputs = sample_lengths(mix, SUMMARY_DRAWS, seed, self.max_context)
            summary = summarize(inputs, outputs)
            self.mean_input_len, self.mean_output_len = summary.mean_input_len, summary.mean_output_len
            self.workload = wl = replace(
                wl, input_len=max(1, round(summary.mean_input_len)), output_len=max(1, round(summary.mean_output_len))
            )
            self.max_sequences = max_sequences_per_replica(scn, wl)  # trtllm-bench sizes by the mean lengths
            weights, kv_per_seq = memory_per_gpu(scn, wl)
            self.weights_bytes = float(weights)
            per_token = float(kv_per_seq) / (wl.input_len + wl.output_len)
            self.kv_bytes_per_sequence = per_token * (summary.mean_input_len + summary.mean_output_len)
            free = float(kv_cache_free_bytes(scn, wl, self.weights_bytes, self.gather_budget))
            self.kv_pool_bytes = max(free, 0.0)
            self.kv_total_blocks = int(max(free, 0.0) // (KV_BLOCK_TOKENS * per_token))
            self._cap_sequences(wl, free, per_token)
            blocks = kv_blocks(inputs, outputs)
            self.capacity = int(self.kv_total_blocks // float(np.mean(blocks)))
            self.slots = min(self.capacity, self.max_sequences)
            # short requests pack more sequences than the mean: price up to as many as the cache holds
            top = min(self.max_sequences, max(self.slots, self.kv_total_blocks // int(blocks.min())))
            self.mean_context = summary.decode_context
        fits = self.capacity >= 1
        self.top = top  # the most decoding sequences the iteration table prices
        self.table = self._table(top) if fits else None
        self.lockstep = self._lockstep()

    def _lockstep(self) -> Lockstep | None:
        """The data-parallel attention ranks stepped together (`engines.inflight_lockstep`), or None."""
        if self.table is None:
            return None
        scn, wl = self.scenario, self.workload
        return lockstep_costs(
            scn, wl, self.table, self.top, self.round_tokens, self.mean_context, self.max_batched_tokens
        )

    def _decode_step_s(self, d: float, q: float) -> float:
        """The decode step of `d` sequences that follows a prefill step in one iteration (`q` > 0)."""
        return self.table(d, 0.0) if d > 0 and self.table is not None else 0.0

    def _table(self, top: int) -> IterationTable:
        scn, wl = self.scenario, self.workload
        return iteration_table(scn, wl, top, self.round_tokens, self.mean_context, self.max_batched_tokens)

    def holding(self, sequences: int) -> Replica:
        """This replica as if its memory held `sequences` requests at once (of the mean length) instead of
        `capacity`: the same GPUs, kernels and engine (its cap on sequences still applies), only more or
        less KV cache (`analyses.pp_scaling`). TensorRT-LLM's cap is trtllm-bench's `max_batch_size`,
        sized from the memory (at least the requests it holds, at most 4096 per replica,
        `engines.trtllm_buffers`): with more memory trtllm-bench sets it higher, so it follows."""
        other = copy.copy(self)
        other.__dict__.pop("_runs", None)  # another capacity: none of this one's runs
        scale = sequences / max(self.capacity, 1)
        other.capacity = int(sequences)
        other.kv_pool_bytes = self.kv_pool_bytes * scale
        if engine(self.workload.engine).bench_buffers:
            other.max_sequences = max(self.max_sequences, min(int(sequences), BENCH_MAX_BATCH))
        other.slots = min(other.capacity, other.max_sequences)
        if self.kv_total_blocks is not None:
            other.kv_total_blocks = int(self.kv_total_blocks * scale)
        other.top = min(other.max_sequences, max(other.slots, int(self.top * scale)))
        fits = other.capacity >= 1
        other.table = other._table(other.top) if fits else None
        other.lockstep = other._lockstep()
        return other

    def _cap_sequences(self, wl: ServingWorkload, free_bytes: float, per_token_bytes: float) -> None:
        """SGLang sizes its request pool, and so its cap, by the KV tokens of one GPU
        (`engines.engine_presets.sglang_max_running_requests`); vLLM runs no more sequences at once
        than its token budget (`EnginePreset.seqs_within_budget`)."""
        if engine(wl.engine).seqs_from_kv_pool and per_token_bytes > 0:
            tokens = max(free_bytes, 0.0) / per_token_bytes
            self.max_sequences = sglang_max_running_requests(tokens, self.pool_context)
        if engine(wl.engine).seqs_within_budget:  # vLLM: max_num_seqs <= max_num_batched_tokens
            self.max_sequences = min(self.max_sequences, int(self.max_batched_tokens))

    def remembering(self) -> Replica:
        """This replica, its runs kept from now on: one repeated (the same seeded traffic: `serve`'s
        full-load run of a plan, again for its pipeline-scaling split) is the first one's. Only for a
        replica no one changes after (`requests.serve_result`): a field set anew would not be read."""
        self._runs: dict[Traffic, Simulated] = {}
        return self

    def run(self, traffic: Traffic) -> Simulated:
        if self.table is None:
            raise ValueError("no request fits the KV cache")
        runs = self.__dict__.get("_runs")
        if runs is None:
            return self._run(traffic)
        if traffic not in runs:
            runs[traffic] = self._run(traffic)
        return runs[traffic]

    def _run(self, traffic: Traffic) -> Simulated:
        wl, step = self.workload, self.lockstep
        after = self._decode_step_s if self.prefill_step_first else None  # this replica's table (`holding`)
        if step is not None:  # `traffic` is a rank's: the group's runs together, its rates per rank
            users = None if traffic.users is None else traffic.group_users or traffic.users * step.ranks
            rate = None if traffic.rate_per_s is None else traffic.rate_per_s * step.ranks
            requests = traffic.requests * step.ranks  # `traffic.requests` a rank's, as the users and rate
            traffic = replace(traffic, users=users, rate_per_s=rate, requests=requests)
            after = None  # a pass ends at its first tokens
        if self.mix is None:
            return simulate(
                self.table, wl.input_len, wl.output_len, self.capacity, traffic, self.round_tokens, self.max_sequences,
                chunk_tokens=self.max_batched_tokens, decodes_share_budget=self.decodes_share_budget,
                after_first_s=after, lockstep=step,
            )  # fmt: skip
        inputs, outputs = sample_lengths(self.mix, traffic.count, traffic.seed, self.max_context)
        need = int(kv_blocks(inputs, outputs).max())
        if need > self.kv_total_blocks:
            raise SpecError(
                f"--lengths {self.mix.name}: a request of {need * KV_BLOCK_TOKENS:,} tokens needs more KV cache than "
                f"a replica of this plan holds ({self.kv_total_blocks * KV_BLOCK_TOKENS:,} tokens)"
            )
        return simulate(
            self.table, inputs, outputs, self.max_sequences, traffic, self.round_tokens, self.max_sequences,
            self.kv_total_blocks, self.max_batched_tokens, decodes_share_budget=self.decodes_share_budget,
            after_first_s=after, lockstep=step,
        )  # fmt: skip
