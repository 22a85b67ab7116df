"""What a new user met walking through plan, serve, calibrate, explore, timeline and emit with their
own inputs (sixth pass): each finding's fix, with a test that failed before it."""

from __future__ import annotations


def test_why_says_why_a_neighbour_was_not_searched_when_nothing_was_fixed():
    """Llama 3 70B on 64 H100: the best plan interleaves v=8 at pp=2 (40 layers a stage); its
    neighbour pp=4 keeps v=8, which does not divide 20 layers, so the search (v divides a stage's
    layers) left it out. The why said "outside your fixed values" though the user fixed nothing."""
    from shardwise.requests import PlanRequest

    result = PlanRequest.from_argv(
        "--model llama3-70b --system dgx-h100 --nodes 8 --global-batch 512 --top 1"
    ).run()
    assert (result.search.plan(int(result.search.ranked()[0])).vpp, result.rows[0]["pp"]) == (8, 2)
    excluded = {a.change: a.excluded for a in result.why}
    assert "does not divide a stage's 20 layers" in excluded["pp=4, dp=2"]
    assert "--vpp 8" in excluded["pp=4, dp=2"]
    assert not any(e and "fixed values" in e for e in excluded.values())


def test_serve_without_plans_says_a_moe_s_layouts_have_no_expert_parallelism():
    """`serve` with no --plan on a mixture of experts compares tp x pp layouts only (experts split by
    tp); on 16 H200 its tp=8,ep=8 beats every one of them, so the answer says EP was not compared
    and how to ask for it. A dense model's answer has no such note, nor has a MoE's with --plan."""
    from shardwise.requests import ServeRequest

    moe = ServeRequest.from_argv("--model qwen3-235b-a22b --system dgx-h200 --num-gpus 16").setting()
    assert all(dict(s.options).get("ep") is None for s in moe.specs)
    assert any("no expert parallelism" in n and "--plan tp=N,ep=M" in n for n in moe.notes)
    dense = ServeRequest.from_argv("--model llama3-70b --system dgx-h200 --num-gpus 16").setting()
    chosen = ServeRequest.from_argv("--model qwen3-235b-a22b --system dgx-h200 --num-gpus 16 --plan tp=8,ep=8")
    assert not any("expert parallelism" in n for n in (*dense.notes, *chosen.setting().notes))


def test_predict_warns_when_a_plan_fits_inside_the_headroom_plan_keeps_free(cli):
    """Llama 3 8B on a DGX H100, tp=2 micro-batch 2 ZeRO-1: predict said "fits" (84.7 of 84.9 GB)
    while plan's why said the same layout "does not fit: needs 85 GB per GPU (> 76 GB)". predict now
    says the plan keeps 10% free and drops it; a layout with room to spare gets no such line."""
    base = ["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--tp", "2", "--global-batch", "64"]
    code, out, err = cli([*base, "--micro-batch", "2"])
    assert code == 0, err
    assert "fits in" in out and "less than the 10% of each GPU `plan` keeps free" in " ".join(out.split())
    code, out, err = cli([*base, "--micro-batch", "1"])
    assert code == 0, err
    assert "fits in" in out and "keeps free" not in out
