import os

import pytest
import torch

from adherence.kernels import fused_scores, fused_scores_reference
from adherence.kernels.fused_scores import fused_scores_triton

pytest.importorskip("triton")

# The kernel runs on CUDA, or on CPU under the Triton interpreter (set in conftest).
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("no GPU and TRITON_INTERPRET is not set", allow_module_level=True)

TOL = {torch.float32: dict(atol=2e-5, rtol=2e-5), torch.float16: dict(atol=2e-3, rtol=2e-3),
       torch.bfloat16: dict(atol=1e-2, rtol=1e-2)}


def _inputs(B, D, K, V, dtype, strided, seed=0):
    g = torch.Generator().manual_seed(seed)

    def mk(*shape):
        t = torch.randn(*shape, generator=g).to(dtype).to(DEVICE)
        if strided:  # every other column of a wider tensor: non-unit inner stride
            wide = torch.zeros(*shape[:-1], shape[-1] * 2, dtype=dtype, device=DEVICE)
            wide[..., ::2] = t
            t = wide[..., ::2]
        return t

    x, y, r = mk(B, D), mk(B, D), mk(K, D)
    mu = torch.randn(D, generator=g).to(dtype).to(DEVICE)
    inv_var = (1.0 / (torch.rand(D, generator=g) + 0.01)).to(dtype).to(DEVICE)
    p = torch.softmax(torch.randn(V, generator=g), 0).to(DEVICE)
    q = torch.softmax(torch.randn(B, V, generator=g), 1)
    if strided:
        q = q.T.contiguous().T  # column-major
    return dict(x=x, paired=y, refs=r, mu=mu, inv_var=inv_var, p=p, q=q.to(DEVICE))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("B,D,K,V", [(1, 16, 1, 16), (7, 384, 5, 500), (5, 769, 33, 5125)])
@pytest.mark.parametrize("strided", [False, True])
def test_kernel_matches_reference(dtype, B, D, K, V, strided):
    inp = _inputs(B, D, K, V, dtype, strided)
    if strided:
        assert inp["x"].stride(1) == 2
    got = fused_scores_triton(**inp)
    want = fused_scores_reference(**inp)
    tol = TOL[dtype]
    torch.testing.assert_close(got[:, :3], want[:, :3], **tol)
    # KL sums V terms in float32 whatever the embedding dtype
    torch.testing.assert_close(got[:, 3], want[:, 3], atol=1e-4, rtol=1e-4)


def test_per_row_reference_ranges_and_empty_range():
    inp = _inputs(6, 64, 10, 16, torch.float32, False)
    start = torch.tensor([0, 2, 5, 9, 3, 4])
    end = torch.tensor([2, 5, 9, 10, 3, 10])  # row 4 has no reference -> NaN
    got = fused_scores_triton(inp["x"], refs=inp["refs"], ref_start=start, ref_end=end)
    want = fused_scores_reference(inp["x"], refs=inp["refs"], ref_start=start, ref_end=end)
    torch.testing.assert_close(got, want, equal_nan=True)
    assert torch.isnan(got[4, 1]) and not torch.isnan(got[3, 1])
    # only the kNN column was asked for
    assert torch.isnan(got[:, [0, 2, 3]]).all()


def test_reference_definitions_by_hand():
    x = torch.tensor([[3.0, 4.0]])
    out = fused_scores_reference(
        x, paired=torch.tensor([[3.0, 4.0]]), refs=torch.tensor([[1.0, 0.0], [0.0, 1.0]]),
        mu=torch.tensor([0.0, 0.0]), inv_var=torch.tensor([1.0, 4.0]),
        p=torch.tensor([0.5, 0.5]), q=torch.tensor([[0.25, 0.75]]),
    )[0]
    assert out[0].item() == pytest.approx(1.0)
    assert out[1].item() == pytest.approx(0.8)  # max(3/5, 4/5)
    assert out[2].item() == pytest.approx((9 + 4 * 16) ** 0.5)
    assert out[3].item() == pytest.approx(0.5 * torch.log(torch.tensor(2.0)).item() + 0.5 * torch.log(torch.tensor(2 / 3)).item())


def test_dispatch_and_errors():
    x = torch.randn(3, 8)
    # CPU tensors take the torch path by default
    torch.testing.assert_close(fused_scores(x, paired=x), fused_scores_reference(x, paired=x), equal_nan=True)
    with pytest.raises(ValueError, match="paired"):
        fused_scores(x, paired=torch.randn(2, 8))
    with pytest.raises(ValueError, match="backend"):
        fused_scores(x, backend="cuda")
    with pytest.raises(ValueError, match="mu"):
        fused_scores(x, mu=torch.zeros(8))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("knn", ["tiles", "rows"])
def test_knn_paths_match_reference_over_a_shared_pool(dtype, knn):
    # 70 rows (two row blocks, the second partial), 300 references (three tiles, split across programs)
    inp = _inputs(70, 384, 300, 16, dtype, False, seed=3)
    got = fused_scores_triton(inp["x"], refs=inp["refs"], knn=knn)
    want = fused_scores_reference(inp["x"], refs=inp["refs"])
    torch.testing.assert_close(got[:, 1], want[:, 1], **TOL[dtype])


@pytest.mark.parametrize("knn", ["tiles", "rows", "auto"])
def test_knn_paths_honour_per_row_ranges(knn):
    inp = _inputs(80, 48, 400, 16, torch.float32, True, seed=5)
    g = torch.Generator().manual_seed(7)
    start = torch.randint(0, 400, (80,), generator=g)
    end = torch.minimum(start + torch.randint(0, 60, (80,), generator=g), torch.tensor(400))
    end[3] = start[3]  # an empty range -> NaN
    got = fused_scores_triton(inp["x"], refs=inp["refs"], ref_start=start, ref_end=end, knn=knn)
    want = fused_scores_reference(inp["x"], refs=inp["refs"], ref_start=start, ref_end=end)
    torch.testing.assert_close(got, want, equal_nan=True, atol=2e-5, rtol=2e-5)
    assert torch.isnan(got[3, 1])


def test_auto_picks_tiles_for_a_shared_pool_and_rows_for_scattered_ranges():
    from adherence.kernels.fused_scores import _use_tiles

    B = 200
    assert _use_tiles(torch.zeros(B, dtype=torch.long), torch.full((B,), 5000), 64)
    start = torch.arange(B) * 50  # each row its own 5 references, far apart
    assert not _use_tiles(start, start + 5, 64)
    with pytest.raises(ValueError, match="knn"):
        fused_scores_triton(torch.ones(2, 16, device=DEVICE), refs=torch.ones(3, 16, device=DEVICE), knn="dense")
