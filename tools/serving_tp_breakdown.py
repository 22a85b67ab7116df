"""Which term of the TensorRT-LLM TP(k) / TP(k/2) serving ratios is wrong (#37 items 1 and 6):
each side's batch and what limits it, one GPU's memory, one request's prefill and one decode step
split into attention, GEMMs and all-reduces, tokens/s predicted and measured
(`analyses.serving_tp_breakdown`; the pairs `shardwise validate inference_scaling` compares), and
every TensorRT-LLM row's error by its lengths (`--by-length`), and which of prefill and decode
each model, GPU and TP size's rows say is priced wrong, with candidate decode-step terms ranked
by how much of the error each removes (`--decode`, `analyses.serving_decode_split`: a diagnostic,
nothing shipped is fitted).

    PYTHONPATH=src python tools/serving_tp_breakdown.py [--by-length | --decode]
"""

from __future__ import annotations

import sys

from shardwise.analyses.serving_tp_breakdown import errors_by_length, trtllm_pair_breakdowns

GB = 1e9


def pairs() -> None:
    head = (
        f"{'row':38} {'batch':>5} {'limit':>14} {'S':>5} {'N':>6} {'M GB':>6} {'W':>5} {'act':>5} {'buf':>5} "
        f"{'AR ws':>5} {'KV GB':>6} {'KV/tok':>7} {'pre ms':>7} {'(AR)':>5} {'attn':>5} {'GEMM':>5} {'AR':>5} "
        f"{'TPOT':>5} {'pre%':>5} {'pred':>6} {'meas':>6} {'error':>7}"
    )
    print(head)
    for key, big, small in trtllm_pair_breakdowns():
        for b in (small, big):
            print(
                f"{b.row:38} {b.batch:5d} {b.limit:>14} {b.max_batch_size:5d} {b.max_num_tokens:6d} "
                f"{b.memory_bytes / GB:6.1f} {b.weights_bytes / GB:5.1f} {b.activation_bytes / GB:5.2f} "
                f"{b.runtime_buffers_bytes / GB:5.2f} {b.allreduce_workspace_bytes / GB:5.2f} "
                f"{b.kv_cache_bytes / GB:6.1f} {b.kv_bytes_per_token / 1e3:6.1f}k "
                f"{b.prefill_per_request_s * 1e3:7.1f} {b.prefill_allreduce_per_request_s * 1e3:5.1f} "
                f"{b.decode_attention_s * 1e3:5.1f} {b.decode_gemm_s * 1e3:5.1f} {b.decode_allreduce_s * 1e3:5.2f} "
                f"{b.tpot_s * 1e3:5.1f} {b.prefill_share:5.0%} {b.predicted_tokens_per_s:6.0f} "
                f"{b.measured_tokens_per_s:6.0f} {b.error:+7.1%}"
            )
        predicted = big.predicted_tokens_per_s / small.predicted_tokens_per_s
        measured = big.measured_tokens_per_s / small.measured_tokens_per_s
        print(f"  {key}: ratio {predicted:.2f} predicted, {measured:.2f} measured ({predicted / measured - 1:+.1%})")


def by_length() -> None:
    for (isl, osl), rows in errors_by_length().items():
        cells = "  ".join(f"{r.removeprefix('TRTLLM-').rsplit('-', 1)[0]} {e:+.1%}" for r, e in rows)
        print(f"{isl}/{osl}: {cells}")


def decode() -> None:
    from shardwise.analyses.serving_decode_split import decode_candidates, prefill_decode_split, row_shares

    shares = row_shares()
    print("e = p y + (1 - p) x per model, GPU and TP (prefill priced 1 + y, decode steps 1 + x times too fast)")
    print(f"{'rows':28} {'n':>3} {'y prefill':>9} {'x decode':>9} {'rms left':>8}")
    for g in prefill_decode_split(shares):
        print(f"{g.group:28} {g.rows:3d} {g.prefill:+9.1%} {g.decode:+9.1%} {g.residual:8.1%}")
    for free in (False, True):
        print()
        print("one decode term fitted over every row; prefill " + ("factor y fitted too" if free else "as priced"))
        cands = decode_candidates(shares, free)
        models = list(cands[0].mape_by_model)
        print(
            f"{'term':30} {'fitted':>8} {'unit':24} {'y':>6} {'MAPE':>6} {'bias':>6} "
            + " ".join(f"{m:>14}" for m in models)
        )
        for c in cands:
            cells = " ".join(f"{c.mape_by_model[m]:14.1%}" for m in models)
            print(f"{c.name:30} {c.value:8.3f} {c.unit:24} {c.prefill:+6.1%} {c.mape:6.1%} {c.bias:+6.1%} {cells}")


if __name__ == "__main__":
    flags = sys.argv[1:]
    unknown = [f for f in flags if f not in ("--by-length", "--decode")]
    if unknown:
        print(f"serving_tp_breakdown: unknown flag {unknown[0]!r}; allowed: --by-length, --decode", file=sys.stderr)
        sys.exit(2)
    by_length() if "--by-length" in flags else decode() if "--decode" in flags else pairs()
