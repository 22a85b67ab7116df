"""One DGX H100 (8 GPUs, NVLink) under the `nanotron` preset: every dp x tp x pp = 8 layout, with
micro-batch 1-8 and ZeRO 0/1, of the model shapes nanotron's own scripts/scaling_benchmarks.py
writes (multi-head attention, tied embeddings below 4B, vocabulary 131072, 4096 tokens; read for
its settings only), each with `--accumulation` micro-batches per step (at least pp - 1, as that
script requires). Prints one row per layout that fits in memory (step time, tokens/s per GPU, the
exposed data-parallel part), how many are called out of memory, the predicted best (most tokens/s
per GPU) per model, and with `--compare FILE` (a `--json` output of another checkout) the step's
change per model and Spearman's rho between the two rankings by tokens/s per GPU.

    PYTHONPATH=src python tools/nanotron_grid.py --json /tmp/after.json --compare /tmp/before.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

# (layers, hidden, heads, MLP, tied): scripts/scaling_benchmarks.py's model_configs, 0e0a27ea
MODELS = {
    "1B": (16, 2048, 32, 8192, True),
    "3B": (28, 3072, 32, 8192, True),
    "8B": (32, 4096, 32, 14336, False),
}
LAYOUTS = [(dp, tp, 8 // (dp * tp)) for dp in (1, 2, 4, 8) for tp in (1, 2, 4, 8) if 8 % (dp * tp) == 0]


def _model_file(folder: Path, name: str) -> Path:
    layers, hidden, heads, mlp, tied = MODELS[name]
    path = folder / f"nanotron-{name}.yaml"
    path.write_text(
        f"name: nanotron-{name}\nlayers: {layers}\nhidden: {hidden}\nheads: {heads}\nkv_heads: {heads}\n"
        f"ffn_hidden: {mlp}\nvocab: 131072\nseq_len: 4096\nfamily: llama\ntied_embeddings: {str(tied).lower()}\n"
    )
    return path


def grid(accumulations: list[int], called_oom: dict[str, int] | None = None) -> list[dict[str, object]]:
    """The rows of the layouts that fit; `called_oom`, when given, counts per model those called out
    of memory."""
    from shardwise.requests.training import PredictRequest

    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in MODELS:
            model = _model_file(Path(tmp), name)
            for dp, tp, pp in LAYOUTS:
                for mbs, ga in ((m, max(a, pp - 1)) for m in (1, 2, 4, 8) for a in accumulations):
                    sequences = dp * mbs * ga
                    for zero in (0, 1):
                        if dp == 1 and zero == 1:
                            continue
                        argv = (
                            f"--model {model} --system dgx-h100 --nodes 1 --framework nanotron --tp {tp} --pp {pp} "
                            f"--dp {dp} --micro-batch {mbs} --global-batch {sequences} --zero {zero}"
                        )
                        est = PredictRequest.from_argv(argv).run().estimate
                        if not bool(est.fits_in_memory):
                            if called_oom is not None:
                                called_oom[name] = called_oom.get(name, 0) + 1
                            continue
                        step = float(est.step_time_s)
                        rows.append(
                            {
                                "model": name,
                                "layout": f"dp{dp} tp{tp} pp{pp} mbs{mbs} ga{ga} zero{zero}",
                                "step_s": step,
                                "tokens_per_s_per_gpu": sequences * 4096 / step / 8,
                                "dp_exposed_s": float(est.breakdown.dp_comm_s),
                            }
                        )
    return rows


def _spearman(a: list[float], b: list[float]) -> float:
    def ranks(x: list[float]) -> list[float]:
        order = sorted(range(len(x)), key=x.__getitem__)
        out = [0.0] * len(x)
        for r, i in enumerate(order):
            out[i] = float(r)
        return out

    ra, rb = ranks(a), ranks(b)
    n = len(a)
    return 1.0 - 6.0 * sum((x - y) ** 2 for x, y in zip(ra, rb, strict=True)) / (n * (n * n - 1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--accumulation", default="1,8", help="micro-batches per step, comma-separated")
    parser.add_argument("--json", type=Path, help="write the rows here")
    parser.add_argument("--compare", type=Path, help="rows of another checkout (--json) to compare with")
    args = parser.parse_args()
    oom: dict[str, int] = {}
    rows = grid(sorted({int(a) for a in args.accumulation.split(",")}), oom)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    for name in MODELS:
        mine = [r for r in rows if r["model"] == name]
        for r in mine:
            print(f"{name:3} {r['layout']:32} {r['step_s'] * 1e3:9.1f} ms {r['tokens_per_s_per_gpu']:9.0f} tok/s/GPU")
        best = max(mine, key=lambda r: r["tokens_per_s_per_gpu"])
        print(f"{name}: {len(mine)} layouts fit, {oom.get(name, 0)} called out of memory; best {best['layout']}")
        if args.compare:
            old = {(r["model"], r["layout"]): r for r in json.loads(args.compare.read_text())}
            both = [(old[(name, r["layout"])], r) for r in mine if (name, r["layout"]) in old]
            change = [n["step_s"] / o["step_s"] - 1 for o, n in both]
            rate = "tokens_per_s_per_gpu"
            rho = _spearman([o[rate] for o, _ in both], [n[rate] for _, n in both])
            old_best = max((o for o, _ in both), key=lambda r: r[rate])["layout"]
            print(
                f"{name}: step {statistics.median(change):+.1%} median ({min(change):+.1%} to {max(change):+.1%}) "
                f"over {len(both)} layouts; Spearman {rho:.3f}; best before {old_best}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
