"""One rule for `--hidden` on a named model, in every command (predict, plan, timeline, serve,
crossover, sweep): the model made that wide keeps its own head dim, query heads per KV head and
ffn_hidden / hidden (`analyses.evaluate.shape_for_hidden`, review 47 #1); --heads, --kv-heads and
--ffn-hidden given by the user win. Before, predict/plan/timeline/serve changed `hidden` alone
(llama3.1-8b at 8192: 32 heads of 256 and its 14336-wide MLP) while crossover/sweep kept the ratios."""

from __future__ import annotations

from typing import Any


def hidden_overrides(name: str | None, overrides: dict[str, Any], tp_max: int) -> dict[str, Any]:
    """`overrides` (the shape fields the user gave) with heads, kv_heads and ffn_hidden following a
    given `hidden` that differs from the named model's own; unchanged without a model name or a
    --hidden. `tp_max`: the largest tensor-parallel degree the command compares, which must split
    the heads (`evaluate.heads_for_hidden`)."""
    if not name or overrides.get("hidden") is None:
        return overrides
    from shardwise import presets
    from shardwise.analyses.evaluate import shape_for_hidden

    own = presets.model(name)
    h = int(overrides["hidden"])
    if h == own.hidden:
        return overrides
    shape = {k: int(v) for k, v in shape_for_hidden(own, h, max(int(tp_max), 1)).items()}
    if overrides.get("heads") and not overrides.get("kv_heads"):  # --heads: its query heads per KV head, else MHA
        group = shape["heads"] // shape["kv_heads"]
        shape["kv_heads"] = overrides["heads"] // group if overrides["heads"] % group == 0 else overrides["heads"]
    return {**shape, **overrides}
