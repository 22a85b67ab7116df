"""tools/ring_bench.py: the ring it times is PyTorch's ring attention (the same result as causal
attention over the whole sequence, forward and gradients), and its FLOP count."""

import csv

import pytest

from script_module import load_script

torch = pytest.importorskip("torch")


def _load():
    return load_script("tools/ring_bench.py", "ring_bench")


rb = _load()


def _head_tail(x, cp):
    """Rank r's tokens of a (b, h, S, d) tensor: chunks r and 2 cp - 1 - r of 2 cp."""
    chunks = x.chunk(2 * cp, dim=2)
    return [torch.cat([chunks[a], chunks[b]], dim=2) for a, b in (rb.head_tail_chunks(r, cp) for r in range(cp))]


@pytest.mark.parametrize("cp", [2, 4])
def test_the_ring_of_every_rank_is_causal_attention_over_the_whole_sequence(cp):
    # float64 inputs; the ring merges and accumulates in float32 as PyTorch's does (convert_to_f32)
    b, h, s_local, d = 1, 2, 8, 4
    g = torch.Generator().manual_seed(cp)
    full = [torch.randn(b, h, cp * s_local, d, generator=g, dtype=torch.float64) for _ in range(4)]
    q, k, v, dout = full
    leaf = [t.clone().requires_grad_() for t in (q, k, v)]
    ref = torch.nn.functional.scaled_dot_product_attention(*leaf, is_causal=True)
    ref.backward(dout)

    flash = rb.Flash("cpu")
    qs, ks, vs, douts = (_head_tail(t, cp) for t in full)
    kvs = [(k_.contiguous(), v_.contiguous()) for k_, v_ in zip(ks, vs, strict=True)]
    acc = rb.zero_grads(kvs)
    outs, dqs = [], []
    for rank in range(cp):
        out, lse, saved = rb.ring_forward(flash, qs[rank], kvs, rank)
        outs.append(out)
        dqs.append(rb.ring_backward(flash, douts[rank], qs[rank], kvs, out, lse, rank, saved, acc))

    for rank in range(cp):
        assert torch.allclose(outs[rank].double(), _head_tail(ref.detach(), cp)[rank], atol=1e-5)
        assert torch.allclose(dqs[rank].double(), _head_tail(leaf[0].grad, cp)[rank], atol=1e-5)
        assert torch.allclose(acc[rank][0].double(), _head_tail(leaf[1].grad, cp)[rank], atol=1e-5)
        assert torch.allclose(acc[rank][1].double(), _head_tail(leaf[2].grad, cp)[rank], atol=1e-5)


def test_the_kernels_alone_leave_the_merge_undone():
    flash = rb.Flash("cpu")
    qs, kvs = rb.make_inputs(8, 2, (1, 2, 4), "cpu", torch.float32)
    out, lse, saved = rb.ring_forward(flash, qs[1], kvs, 1, bookkeeping=False)
    assert out is None and lse is None and len(saved) == 2


def test_a_ranks_flops_are_the_whole_causal_square_over_cp():
    b, h, s_local, d, cp = 1, 32, 32768, 128, 8
    whole = 4 * b * h * d * (cp * s_local) ** 2 / 2
    assert rb.ring_flops(b, h, s_local, d, cp) == whole / cp
    assert rb.ring_flops(b, h, s_local, d, cp, backward=True) == 2.5 * whole / cp


def test_head_tail_pairs_the_first_chunk_with_the_last():
    assert [rb.head_tail_chunks(r, 4) for r in range(4)] == [(0, 7), (1, 6), (2, 5), (3, 4)]


def test_a_quick_cpu_run_writes_both_passes_of_both_end_ranks(tmp_path):
    assert rb.main(["--device", "cpu", "--quick", "--out", str(tmp_path), "--budget-s", "60"]) == 0
    with open(tmp_path / "ring.csv") as f:
        rows = list(csv.DictReader(f))
    seen = {(int(r["cp"]), int(r["rank"]), r["pass"], r["what"]) for r in rows}
    for cp in (2, 4):
        for rank in (0, cp - 1):
            for p in ("fwd", "bwd"):
                assert {(cp, rank, p, "kernels"), (cp, rank, p, "ring")} <= seen
    assert all(float(r["time_s"]) > 0 for r in rows)
