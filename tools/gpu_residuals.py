"""Is a GPU's fitted sustained efficiency consistent across stacks? (issue #32 item 3)

Every dev row on the A100 silicon (A100-SXM4 40/64/80 GB, A800) and the H100 silicon (H100 SXM5
64/80 GB, H800, Meta's H100) with its leave-one-source-out error (`analyses.loso.by_source`) and
the scale of its GPU's fitted efficiency at which the model would price it exactly (its *implied
scale*, read off the row's step time over `loso.GRID`, interpolated between its points; the shipped
scales are `loso.SHIPPED_SCALES`). Rows whose implied scales agree across stacks share the GPU's
clock; a stack whose rows sit apart carries a cost of its own. Then, for the Modalities layouts
published on both Leonardo (A100 64 GB) and MareNostrum 5 (H100 64 GB), each step split by kind of
work as priced, beside the measured and priced A100 / H100 step ratios: which term differs between
the two machines.

Dev rows only (`split == dev`): the holdout rows are for reporting, never for choosing
(docs/validation.md). Nothing here is fitted into the model; the study is in docs/model.md
("Is the A100's fitted efficiency consistent across stacks?").

    python tools/gpu_residuals.py            # the tables
    python tools/gpu_residuals.py --rows     # and every row
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import numpy as np

from shardwise.analyses import loso
from shardwise.analyses import public_validation as pv

FAMILIES = {"a100-sxm4-80gb": "A100", "h100-sxm5-80gb": "H100"}  # the fitted GPU of each silicon
PAIRED_SYSTEMS = ("leonardo-booster", "marenostrum5-acc")  # Modalities' two machines


def implied_scale(p: loso.Priced) -> tuple[float, str]:
    """The fitted GPU's scale at which `p` is priced at its measured step, and "<" or ">" where the
    grid's end does not reach it (the step falls as the scale grows)."""
    measured = p.row.measured_step_s
    grid = np.asarray(p.grid_s, dtype=float)
    if measured >= grid[0]:
        return float(loso.GRID[0]), "<"
    if measured <= grid[-1]:
        return float(loso.GRID[-1]), ">"
    return float(np.interp(measured, grid[::-1], loso.GRID[::-1])), ""


def dev_rows() -> list[dict[str, object]]:
    """Each dev row on the A100 and H100 silicon: its source, stack, LOSO error and implied scale."""
    raws = {r["id"]: r for r in pv.raw_rows()}
    out = []
    for source, preds in sorted(loso.by_source().items()):
        for x in preds:
            p = x.priced
            if p.row.split != "dev" or p.fitted_gpu not in FAMILIES:
                continue
            scale, bound = implied_scale(p)
            raw = raws[p.row.run_id]
            out.append(
                {
                    "id": p.row.run_id,
                    "family": FAMILIES[p.fitted_gpu],
                    "gpu": p.gpu,
                    "stack": p.stack,
                    "source": source,
                    "group": p.row.group,
                    "system": raw["system"],
                    "model": raw["model"],
                    "seq": raw["seq_len"],
                    "gpus": raw["num_gpus"],
                    "precision": p.precision,
                    "error": x.predicted_step_s / p.row.measured_step_s - 1.0,
                    "scale": scale,
                    "bound": bound,
                    "share": p.compute_share,
                    "sets": p.sets_scale,
                }
            )
    return out


def summary(rows: list[dict[str, object]]) -> list[str]:
    """One line per (GPU, stack, source): rows, groups, median LOSO error, median implied scale."""
    cells: dict[tuple[str, str, str, str], list[dict[str, object]]] = defaultdict(list)
    for r in rows:
        cells[(str(r["family"]), str(r["gpu"]), str(r["stack"]), str(r["source"]))].append(r)
    lines = [
        f"{'GPU':16s} {'stack':19s} {'source':31s} {'rows':>4s} {'groups':>6s} {'sets':>4s} "
        f"{'LOSO median':>11s} {'range':>15s} {'implied scale':>13s}"
    ]
    for family in FAMILIES.values():
        shipped = loso.SHIPPED_SCALES[next(g for g, f in FAMILIES.items() if f == family)]
        lines.append(f"{family} silicon (shipped scale {shipped:.3f})")
        for (fam, gpu, stack, source), cell in sorted(cells.items()):
            if fam != family:
                continue
            errors = np.array([float(r["error"]) for r in cell])  # type: ignore[arg-type]
            scales = np.array([float(r["scale"]) for r in cell])  # type: ignore[arg-type]
            lines.append(
                f"{gpu[:16]:16s} {stack[:19]:19s} {source[:31]:31s} {len(cell):4d} "
                f"{len({r['group'] for r in cell}):6d} {sum(bool(r['sets']) for r in cell):4d} "
                f"{np.median(errors):+10.1%} {errors.min():+7.1%}..{errors.max():+6.1%} {np.median(scales):13.3f}"
            )
    return lines


def row_lines(rows: list[dict[str, object]]) -> list[str]:
    return [
        f"{r['id']} {str(r['gpu'])[:14]:14s} {str(r['stack'])[:16]:16s} {str(r['source'])[:24]:24s} "
        f"{str(r['model'])[:14]:14s} s{r['seq']:>6} n{r['gpus']:>5} {r['precision']:5s} "
        f"compute {float(r['share']):.2f} {'sets' if r['sets'] else '    '} "  # type: ignore[arg-type]
        f"LOSO {float(r['error']):+6.1%} implied scale {r['bound']}{float(r['scale']):.3f}"  # type: ignore[arg-type]
        for r in rows
    ]


def step_parts(raw: dict[str, str]) -> dict[str, float]:
    """One published step split by kind of work as the model prices it, seconds: the layers'
    GEMMs (forward and backward), their attention kernels, their element-wise kernels, the rest of
    the compute (embedding, output layer, loss, gradient accumulation), the exposed data-parallel
    communication and the optimizer; and the step."""
    from shardwise.engines.context_parallel import cp_step_s, micro_batch_view
    from shardwise.engines.costs import layer_cost, plan_layer_times
    from shardwise.engines.tp_overlap import tp_comm
    from shardwise.engines.training import estimate_training_step
    from shardwise.physics.collectives import Fabric
    from shardwise.physics.topology import placement

    scn = pv.scenario_for(raw)
    est = estimate_training_step(scn)
    model, plan = scn.model, scn.plan
    local = micro_batch_view(scn)
    fabric = Fabric.of(scn.cluster)
    place = placement(plan, scn.cluster.gpus_per_node)
    cp = cp_step_s(scn, fabric, place)
    _, fwd = layer_cost(local, tp_comm(local, fabric, place["tp"]), kv_len=model.seq_len, cp=plan.cp, cp_step=cp)
    lt = plan_layer_times(fwd, scn.cluster.gpu, local.plan)
    n = model.layers * int(raw["gbs"]) // (plan.dp * plan.micro_batch)  # layers x micro-batches per rank
    gemms = sum(float(g.forward_s + g.input_grad_s + g.weight_grad_s) for g in lt.linears)
    parts = {
        "GEMMs": n * gemms,
        "attention": n * float(lt.attention_s + lt.attention_bwd_s),
        "element-wise": n * float(lt.elementwise_s + lt.elementwise_bwd_s),
    }
    bd = {k: float(v) for k, v in est.breakdown.as_dict().items()}
    parts["other compute"] = bd["compute"] - sum(parts.values())
    parts["exposed DP"] = bd["dp_comm"]
    parts["optimizer"] = bd["optimizer"]
    parts["step"] = float(est.step_time_s)
    return parts


def paired_lines() -> list[str]:
    """The Modalities dev layouts published on both machines (same model, GPUs, sequence, micro-batch,
    sharding and checkpointing): measured and priced A100 / H100 step ratios and each part's."""
    raws = {r["id"]: pv.public_moe.resolved(r) for r in pv.raw_rows()}
    measured = {r.run_id: r.measured_step_s for r in pv.validate_public() if not r.skip}
    by_key: dict[tuple[str, ...], dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for rid, raw in raws.items():
        if raw["system"] in PAIRED_SYSTEMS and raw["split"] == "dev" and rid in measured:
            key = tuple(raw[k] for k in ("model", "num_gpus", "seq_len", "mbs", "fsdp", "recompute"))
            by_key[key][raw["system"]].append(rid)
    lines = []
    for key, systems in sorted(by_key.items()):
        if len(systems) < 2:
            continue
        a_ids, h_ids = systems[PAIRED_SYSTEMS[0]], systems[PAIRED_SYSTEMS[1]]
        a, h = step_parts(raws[a_ids[0]]), step_parts(raws[h_ids[0]])
        meas = np.mean([measured[i] for i in a_ids]) / np.mean([measured[i] for i in h_ids])
        lines.append(
            f"{key[0]} {key[1]} GPUs s{key[2]} mb{key[3]} sharded over {key[4] or '-'} rec={key[5] or 'none'} "
            f"({', '.join(a_ids)} / {', '.join(h_ids)}): A100/H100 step measured {meas:.2f}, "
            f"priced {a['step'] / h['step']:.2f}"
        )
        for name in a:
            if name != "step":
                ratio = a[name] / h[name] if h[name] > 0 else float("nan")
                lines.append(
                    f"    {name:14s} A100 {a[name] * 1e3:7.1f} ms ({a[name] / a['step']:4.0%})  "
                    f"H100 {h[name] * 1e3:7.1f} ms ({h[name] / h['step']:4.0%})  ratio {ratio:5.2f}"
                )
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", action="store_true", help="print every dev row as well")
    args = parser.parse_args(argv)
    rows = dev_rows()
    print("\n".join(summary(rows)))
    if args.rows:
        print("\n".join(row_lines(rows)))
    print("Modalities layouts published on both Leonardo (A100 64GB) and MareNostrum 5 (H100 64GB), priced:")
    print("\n".join(paired_lines()))


if __name__ == "__main__":
    main()
