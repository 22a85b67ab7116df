"""The brief's claims about inference, checked with shardwise's serving model.

Llama 3 70B (BF16 weights and KV cache) on 8 H100 SXM: once with NVLink 4 between them (a DGX
H100), once with the same GPUs on PCIe Gen4 only (the brief's ~32 GB/s; H100s on Gen5 are noted
where the verdict changes); GPT-3 175B on two servers of 8 H100 for the multi-server claim.
Every number below is computed; the verdicts are comparisons of those numbers, not text written
by hand. Served as `shardwise serve` does by default: TensorRT-LLM's runtime (CUDA graphs, its own
one-shot all-reduce on NVLink below 500 kB), and for throughput in-flight batching with chunked
prefill, the KV cache kept full.

    python examples/serving_claims.py               # also writes docs/figures/serving-frontier.png
    python examples/serving_claims.py --no-figures
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

from shardwise import presets
from shardwise.analyses import serving
from shardwise.engines.inflight import estimate_inflight
from shardwise.engines.serving import estimate_serving, plan_for_serving, serving_scenario
from shardwise.physics.collectives import Fabric
from shardwise.specs import Scenario
from shardwise.specs.serving import ServingWorkload
from shardwise.units import format_seconds

OUT = Path(__file__).resolve().parent.parent / "docs" / "figures"
MODEL = presets.model("llama3-70b")
LINKS = {"NVLink": presets.link("nvlink4"), "PCIe": presets.link("pcie4"), "PCIe5": presets.link("pcie5")}
SHOWN = ("NVLink", "PCIe")  # PCIe5 only where it changes a verdict
PLANS = {"TP=8": (8, 1), "PP=8": (1, 8), "TP=2,PP=4": (2, 4)}


def scenario(link: str, tp: int, pp: int, model: str = "llama3-70b", nodes: int = 1) -> Scenario:
    cluster = presets.system("dgx-h100", nodes=nodes).with_(intra_node_link=LINKS[link])
    dp = int(cluster.num_gpus) // (tp * pp)
    return Scenario(presets.model(model), cluster, plan_for_serving(tp, pp, dp))


def workload(prompt: int = 512, new: int = 128, batch: int = 1) -> ServingWorkload:
    return ServingWorkload(prompt, new, batch, custom_all_reduce="trtllm")


def serve(link: str, plan: str, batch: int = 1, prompt: int = 512, new: int = 128):
    """One batch served together (a static batch: what a fixed number of requests sees)."""
    return estimate_serving(scenario(link, *PLANS[plan]), workload(prompt, new, batch))


def at_max_batch(scn: Scenario, prompt: int = 512, new: int = 128):
    """The KV cache kept full, in-flight batching (`shardwise serve --max-throughput`)."""
    return estimate_inflight(scn, workload(prompt, new))


def ms(seconds) -> str:
    return format_seconds(float(seconds))


def verdict(holds: bool, why: str = "") -> str:
    return "HOLDS" if holds else "FAILS" + (f" ({why})" if why else "")


def claim(source: str, text: str, finding: str) -> None:
    wrap = textwrap.TextWrapper(width=100, initial_indent="  ", subsequent_indent="  ")
    print(textwrap.fill(f"[{source}] {text}", width=100, subsequent_indent="  "))
    print("\n".join(wrap.fill(line.strip()) for line in finding.split("\n")) + "\n")


def tp_latency() -> None:
    e2e = {p: float(serve("NVLink", p).e2e_s) for p in PLANS}
    tpot = {p: float(serve("NVLink", p).tpot_s) for p in PLANS}
    best = min(e2e, key=e2e.get)
    weights_gb = 8 * float(serve("NVLink", "TP=8").weights_bytes) / 1e9
    claim(
        "ES",
        "With NVLink, TP gives the lowest single-request latency.",
        "batch 1, 512 + 128 tokens, NVLink: "
        + ", ".join(f"{p} {e2e[p]:.2f} s ({ms(tpot[p])}/token)" for p in PLANS)
        + f". Each token must read all {weights_gb:.0f} GB of weights; TP=8 reads them on 8 GPUs at once, PP=8 one "
        f"stage after another. {verdict(best == 'TP=8')}",
    )


def pp_throughput() -> None:
    one, eight = serve("NVLink", "PP=8", 1), serve("NVLink", "PP=8", 8)
    rate = lambda e: int(e.workload.batch) / float(e.tpot_s)  # noqa: E731
    best = {link: {p: at_max_batch(scenario(link, *PLANS[p])) for p in PLANS} for link in LINKS}
    tput = {link: {p: float(e.throughput_tokens_per_s) for p, e in v.items()} for link, v in best.items()}
    nv, pc = tput["NVLink"], tput["PCIe"]
    claim(
        "ES",
        "PP suits high-throughput batch serving: a full pipeline hides its idle time.",
        f"PP=8 decodes {rate(one):.0f} tokens/s with one request (stages busy {float(one.decode_utilization):.0%}) "
        f"and {rate(eight):.0f} with 8 ({float(eight.decode_utilization):.0%} busy) at {ms(eight.tpot_s)}/token "
        f"instead of {ms(one.tpot_s)}.\n  In-flight, the KV cache kept full (up to the engine's cap): "
        f"NVLink TP=8 {nv['TP=8']:,.0f}, "
        f"PP=8 {nv['PP=8']:,.0f} tokens/s; PCIe TP=8 {pc['TP=8']:,.0f}, PP=8 {pc['PP=8']:,.0f}. "
        + verdict(pc["PP=8"] > pc["TP=8"] and rate(eight) > 6 * rate(one))
        + f": batching fills PP's pipeline; on NVLink PP=8 gives {nv['PP=8'] / nv['TP=8']:.2f}x TP=8's throughput "
        f"(NVIDIA measured about 1.5x for Llama 3.1 405B on 8 H200), over PCIe {pc['PP=8'] / pc['TP=8']:.1f}x "
        f"({tput['PCIe5']['PP=8'] / tput['PCIe5']['TP=8']:.1f}x on PCIe Gen5).",
    )


def one_all_reduce(link: str, tokens: int) -> float:
    scn = serving_scenario(scenario(link, 8, 1), workload(1, 1))
    fabric = Fabric.of(scn.cluster)
    return float(fabric.group(8, 8).all_reduce(tokens * MODEL.hidden * 2.0))


def pcie_all_reduce() -> None:
    cases = {
        "decode, batch 1": (1, serve("PCIe", "TP=8", 1)),
        "decode, batch 64": (64, serve("PCIe", "TP=8", 64)),
        "prefill, one 2048-token prompt": (2048, serve("PCIe", "TP=8", 1, prompt=2048)),
    }
    parts, holds = [], False
    for name, (tokens, est) in cases.items():
        ar = one_all_reduce("PCIe", tokens)
        phase = est.prefill_s if name.startswith("prefill") else est.decode_s
        per_layer = float(phase["compute"]) / MODEL.layers
        parts.append(
            f"{name}: {tokens * MODEL.hidden * 2 / 1e3:,.0f} kB, {ms(ar)} "
            f"(NVLink {ms(one_all_reduce('NVLink', tokens))}) vs {ms(per_layer)} of compute per layer"
        )
        holds |= ar >= 2e-3 and per_layer < 1e-4  # milliseconds of all-reduce against microseconds of compute
    claim(
        "ES",
        "An all-reduce over PCIe takes several milliseconds while the compute takes microseconds.",
        "TP=8's all-reduce carries tokens x hidden x 2 bytes; "
        + ";\n  ".join(parts)
        + ". "
        + verdict(
            holds,
            "all-reduces reach milliseconds only for prefill-sized messages, where a layer's compute "
            "is also about a millisecond; a decode step's all-reduce is latency-bound, tens of microseconds",
        ),
    )


def overhead() -> None:
    rows = []
    shares = []
    for link in SHOWN:
        for batch in (1, 64):
            est = serve(link, "TP=8", batch, prompt=2048)
            pre = float(est.prefill_s["tp_comm"] / est.ttft_s)
            dec = float(est.decode_s["tp_comm"] / est.tpot_s)
            shares += [pre, dec]
            rows.append(f"{link} batch {batch}: prefill {pre:.0%}, decode {dec:.0%}")
    nvlink, pcie = shares[:4], shares[4:]
    claim(
        "ES",
        "Waiting for TP's data exchange can take 25-50% of the time in extreme cases; without NVLink TP is "
        "usually inefficient.",
        "TP=8's share of time in all-reduces (2048-token prompts): "
        + "; ".join(rows)
        + ". "
        + verdict(max(pcie) >= 0.25)
        + f", and PCIe goes beyond it: {min(pcie):.0%} to {max(pcie):.0%} of TP=8's time; on NVLink "
        f"{min(nvlink):.0%} to {max(nvlink):.0%}: even NVLink is no free lunch for TP=8 on this model.",
    )


def chatbot() -> None:
    tpot = {(p, link): float(serve(link, p).tpot_s) for p in ("TP=8", "PP=8") for link in SHOWN}
    claim(
        "RU 4.4",
        "Batch-1 chatbot serving: TP's per-layer all-reduce gives high latency; PP without micro-batches is lower.",
        "time per token at batch 1: "
        + ", ".join(f"{p} {link} {ms(v)}" for (p, link), v in tpot.items())
        + ". "
        + verdict(
            tpot[("PP=8", "NVLink")] < tpot[("TP=8", "NVLink")],
            "a token still crosses the 8 stages in turn and each reads its own 1/8 of the weights, so PP=8 "
            f"costs a whole GPU's weight read per token; TP's {2 * MODEL.layers} small all-reduces cost less "
            "even over PCIe",
        ),
    )


def ttft() -> None:
    rows, holds = [], []
    for prompt in (128, 2048, 8192):
        t = {(p, link): float(serve(link, p, prompt=prompt).ttft_s) for p in ("TP=8", "PP=8") for link in LINKS}
        rows.append(
            f"{prompt} tokens: NVLink TP=8 {ms(t[('TP=8', 'NVLink')])} vs PP=8 {ms(t[('PP=8', 'NVLink')])}, "
            f"PCIe {ms(t[('TP=8', 'PCIe')])} vs {ms(t[('PP=8', 'PCIe')])}"
        )
        holds.append(
            (
                t[("TP=8", "NVLink")] < t[("PP=8", "NVLink")],
                t[("TP=8", "PCIe")] < t[("PP=8", "PCIe")],
                t[("TP=8", "PCIe5")] < t[("PP=8", "PCIe5")],
            )
        )
    nv, pc = all(h[0] for h in holds), [p for p, h in zip((128, 2048, 8192), holds, strict=True) if h[1]]
    bw = {k: v.effective_bandwidth_bytes_per_s for k, v in LINKS.items()}
    ratio = float(bw["NVLink"] / bw["PCIe"])
    pcie = (
        f"over PCIe TP=8 is faster only for {', '.join(map(str, pc))}-token prompts"
        if pc
        else "over PCIe Gen4 PP=8 is faster at every prompt length"
    )
    gen5 = [p for p, h in zip((128, 2048, 8192), holds, strict=True) if h[2]]
    which = "every prompt length" if len(gen5) == 3 else f"{', '.join(map(str, gen5))}-token prompts"
    pcie5 = f"on PCIe Gen5 (twice the bandwidth) TP=8 wins again at {which}" if gen5 else "PP=8 also wins on PCIe Gen5"
    claim(
        "RU 5",
        "PP raises the time to first token (the prompt crosses the stages in turn); TP lowers it.",
        ";\n  ".join(rows) + ". " + verdict(nv) + f" on NVLink; {pcie}: prefill all-reduces carry every "
        f"prompt token, and PCIe Gen4 moves them {ratio:.0f}x slower than NVLink; {pcie5}.",
    )


def multi_server() -> None:
    from shardwise.loaders import per_gpu_nic

    plans = {"TP=16": (16, 1), "TP=8,PP=2": (8, 2), "PP=16": (1, 16)}
    networks = {
        "8 x IB NDR per server": per_gpu_nic(presets.link("ib-ndr"), 8, 8),
        "one 100 GbE NIC per server": per_gpu_nic(presets.link("eth-100g"), 1, 8),
    }
    lines, res = [], {}
    for net, nic in networks.items():
        parts = []
        for name, (tp, pp) in plans.items():
            scn = scenario("NVLink", tp, pp, model="gpt3-175b", nodes=2)
            scn = Scenario(scn.model, scn.cluster.with_(inter_node_link=nic), scn.plan)
            one, full = estimate_serving(scn, workload()), at_max_batch(scn)
            res[net, name] = (float(one.tpot_s), float(full.throughput_tokens_per_s))
            parts.append(f"{name} {ms(one.tpot_s)}/token, {res[net, name][1]:,.0f} tokens/s")
        lines.append(f"{net}: " + ", ".join(parts))
    fast, slow = networks
    lat = {net: res[net, "TP=16"][0] / res[net, "TP=8,PP=2"][0] for net in networks}
    tput = {net: res[net, "TP=8,PP=2"][1] / res[net, "TP=16"][1] for net in networks}
    claim(
        "ES",
        "Across servers PP is the more robust choice; in practice TP inside a server and PP across servers.",
        "GPT-3 175B (BF16) on 2 x 8 H100 (NVLink inside), batch 1 and the largest batch that fits:\n  "
        + ";\n  ".join(lines)
        + ".\n  "
        + verdict(lat[slow] > 1 and tput[slow] > 2)
        + f" on a slow network: with one 100 GbE NIC TP=8,PP=2 is {lat[slow]:.2f}x faster per token and gives "
        f"{tput[slow]:.1f}x the throughput of TP=16, whose all-reduces (every prompt token's in prefill) cross it. "
        f"With a DGX's 8 NDR NICs TP=16 is {1 / lat[fast]:.2f}x faster per token (it splits the weight reads 16 "
        f"ways) at {1 / tput[fast]:.2f}x the throughput. Pure PP=16 is never best: a token crosses 16 stages in turn.",
    )


def frontier() -> Path:
    from shardwise import plots

    panels = {
        f"8 x H100 SXM, {link} ({LINKS[link].name})": {
            plan: serving.frontier_inflight(scenario(link, tp, pp), workload()) for plan, (tp, pp) in PLANS.items()
        }
        for link in SHOWN
    }
    title = (
        "Llama 3 70B, BF16, 512 prompt + 128 new tokens, in-flight batching: throughput vs speed per user, "
        "1 to 2048 requests in flight"
    )
    return plots.save(plots.serving_frontier(panels, title), OUT / "serving-frontier.png")


if __name__ == "__main__":
    for check in (tp_latency, pp_throughput, pcie_all_reduce, overhead, chatbot, ttft, multi_server):
        check()
    if "--no-figures" not in sys.argv:
        OUT.mkdir(parents=True, exist_ok=True)
        print(f"figure: {frontier()}")
