import os

import pytest
import torch

from adherence.kernels.maxsim import maxsim, maxsim_reference, maxsim_torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TOL = {
    torch.float32: dict(atol=1e-4, rtol=1e-5),
    torch.float16: dict(atol=2e-2, rtol=2e-3),
    torch.bfloat16: dict(atol=1e-1, rtol=1e-2),
}


def _ragged(n, lo, hi, dim, dtype, g, empty_first=False):
    lens = torch.randint(lo, hi, (n,), generator=g)
    if empty_first:
        lens[0] = 0
    off = torch.zeros(n + 1, dtype=torch.int64)
    off[1:] = lens.cumsum(0)
    emb = torch.nn.functional.normalize(torch.randn(int(off[-1]), dim, generator=g), dim=-1)
    return emb.to(dtype), off


def _pairs(nq, nd, n, g):
    return torch.randint(0, nq, (n,), generator=g), torch.randint(0, nd, (n,), generator=g)


@pytest.mark.parametrize("dim", [16, 384, 769])
def test_torch_pairs_and_matrix_match_definition(dim):
    g = torch.Generator().manual_seed(dim)
    q, qo = _ragged(6, 1, 40, dim, torch.float32, g, empty_first=True)
    d, do = _ragged(9, 0, 300, dim, torch.float32, g, empty_first=True)
    qi, di = _pairs(6, 9, 50, g)
    ref = maxsim_reference(q, qo, d, do, qi, di)
    torch.testing.assert_close(maxsim_torch(q, qo, d, do, qi, di), ref, **TOL[torch.float32])
    # A tiny memory budget forces one pair / one document per block: same numbers.
    torch.testing.assert_close(maxsim_torch(q, qo, d, do, qi, di, budget=10), ref, **TOL[torch.float32])
    full = maxsim_torch(q, qo, d, do)
    qa, da = torch.arange(6).repeat_interleave(9), torch.arange(9).repeat(6)
    torch.testing.assert_close(full.flatten(), maxsim_reference(q, qo, d, do, qa, da), **TOL[torch.float32])
    torch.testing.assert_close(maxsim_torch(q, qo, d, do, budget=10), full, **TOL[torch.float32])
    assert float(full[0].abs().max()) == 0.0 and float(full[:, 0].abs().max()) == 0.0  # empty query / document


def test_hand_computed():
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    d = torch.tensor([[0.5, -1.0], [0.2, 0.3], [-1.0, 2.0]])
    out = maxsim_torch(q, torch.tensor([0, 2]), d, torch.tensor([0, 2, 3]))
    # doc 0: max(0.5, 0.2) + max(-1.0, 0.3) = 0.8 ; doc 1: -1.0 + 2.0 = 1.0
    torch.testing.assert_close(out, torch.tensor([[0.8, 1.0]]))


def test_bad_offsets_are_rejected():
    q = torch.zeros(3, 4)
    with pytest.raises(ValueError, match="rise from 0"):
        maxsim_torch(q, torch.tensor([0, 2]), q, torch.tensor([0, 3]))
    with pytest.raises(ValueError, match="out of range"):
        maxsim_torch(q, torch.tensor([0, 3]), q, torch.tensor([0, 3]), torch.tensor([0]), torch.tensor([1]))
    with pytest.raises(ValueError, match="backend"):
        maxsim(q, torch.tensor([0, 3]), q, torch.tensor([0, 3]), backend="cuda")


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("nq,nd,dim,max_q,max_d", [(1, 1, 16, 2, 3), (4, 7, 384, 40, 300), (3, 5, 769, 70, 129)])
@pytest.mark.parametrize("strided", [False, True])
def test_triton_kernel_matches_reference(dtype, nq, nd, dim, max_q, max_d, strided):
    pytest.importorskip("triton")
    if DEVICE == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("no GPU and TRITON_INTERPRET is not set")
    from adherence.kernels.maxsim import maxsim_triton

    g = torch.Generator().manual_seed(nq * 100 + dim)
    q, qo = _ragged(nq, 1, max_q, dim, dtype, g)
    d, do = _ragged(nd, 0, max_d, dim, dtype, g, empty_first=nd > 1)
    qi, di = _pairs(nq, nd, 6, g)
    ref = maxsim_reference(q, qo, d, do, qi, di)
    if strided:  # a column slice of a wider tensor: the wrapper must handle non-contiguous rows
        wide = torch.zeros(d.shape[0], dim * 2, dtype=dtype)
        wide[:, :dim] = d
        d = wide[:, :dim]
    got = maxsim_triton(
        q.to(DEVICE),
        qo.to(DEVICE),
        d.to(DEVICE),
        do.to(DEVICE),
        qi.to(DEVICE),
        di.to(DEVICE),
        block_q=16,
        block_t=64 if max_d > 64 else 16,
        block_k=64 if dim >= 64 else 16,
    )
    torch.testing.assert_close(got.cpu(), ref, **TOL[dtype])
    if nq * nd <= 1 or (dim == 384 and not strided and dtype == torch.float16):
        full = maxsim_triton(
            q.to(DEVICE), qo.to(DEVICE), d.to(DEVICE), do.to(DEVICE), block_q=16, block_t=16, block_k=16
        )
        torch.testing.assert_close(full.cpu(), maxsim_torch(q, qo, d.contiguous(), do), **TOL[dtype])


@pytest.mark.parametrize("group", [True, False])
@pytest.mark.parametrize("max_q", [20, 200])  # 200: longer than a grouped tile, the per-pair kernel in document order
@pytest.mark.slow
def test_triton_pairs_grouped_by_document_land_where_they_were_asked(group, max_q):
    # Pairs that share documents (overlapping pools, repeated pairs, documents out of order, an empty
    # document) are scored grouped by document; every score must still land at its own pair's position.
    pytest.importorskip("triton")
    if DEVICE == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("no GPU and TRITON_INTERPRET is not set")
    from adherence.kernels.maxsim import _by_document, _groups, maxsim_triton

    g = torch.Generator().manual_seed(7)
    q, qo = _ragged(5, 1, max_q, 32, torch.float32, g)
    d, do = _ragged(6, 0, 40, 32, torch.float32, g, empty_first=True)
    qi = torch.tensor([4, 0, 3, 0, 2, 1, 4, 4, 0, 1, 2, 3])
    di = torch.tensor([5, 2, 2, 5, 0, 2, 5, 1, 3, 2, 2, 2])
    oq, od, pos = _by_document(qi, di)
    assert od.tolist() == sorted(di.tolist()) and torch.equal(oq, qi[pos]) and sorted(pos.tolist()) == list(range(12))
    start, count, per_doc = _groups(od, 2)  # document 2 has 6 pairs, document 5 has 3
    assert list(zip(od[start].tolist(), count.tolist())) == [
        (0, 1),
        (1, 1),
        (2, 2),
        (2, 2),
        (2, 2),
        (3, 1),
        (5, 2),
        (5, 1),
    ]
    assert per_doc == 12 / 5
    ref = maxsim_reference(q, qo, d, do, qi, di)
    dev = [t.to(DEVICE) for t in (q, qo, d, do)]
    for tiles in (dict(block_t=16, block_k=16), dict(block_t=64, block_k=64)):
        got = maxsim_triton(*dev, qi.to(DEVICE), di.to(DEVICE), block_q=16, group=group, **tiles)
        torch.testing.assert_close(got.cpu(), ref, **TOL[torch.float32])
    full = maxsim_triton(*dev, block_q=16, block_t=16, block_k=16, group=group)
    torch.testing.assert_close(full.cpu(), maxsim_torch(q, qo, d, do), **TOL[torch.float32])
