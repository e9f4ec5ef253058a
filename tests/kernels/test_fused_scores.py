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

TOL = {
    torch.float32: dict(atol=2e-5, rtol=2e-5),
    torch.float16: dict(atol=2e-3, rtol=2e-3),
    torch.bfloat16: dict(atol=1e-2, rtol=1e-2),
}


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
        x,
        paired=torch.tensor([[3.0, 4.0]]),
        refs=torch.tensor([[1.0, 0.0], [0.0, 1.0]]),
        mu=torch.tensor([0.0, 0.0]),
        inv_var=torch.tensor([1.0, 4.0]),
        p=torch.tensor([0.5, 0.5]),
        q=torch.tensor([[0.25, 0.75]]),
    )[0]
    assert out[0].item() == pytest.approx(1.0)
    assert out[1].item() == pytest.approx(0.8)  # max(3/5, 4/5)
    assert out[2].item() == pytest.approx((9 + 4 * 16) ** 0.5)
    assert out[3].item() == pytest.approx(
        0.5 * torch.log(torch.tensor(2.0)).item() + 0.5 * torch.log(torch.tensor(2 / 3)).item()
    )


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


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("knn", ["tiles", "rows"])
def test_knn_paths_match_reference_over_a_shared_pool(dtype, knn):
    # 70 rows (two row blocks, the second partial), 300 references (three tiles, split across programs), 200
    # dimensions (two blocks of the dimension loop, the second partial)
    inp = _inputs(70, 200, 300, 16, dtype, False, seed=3)
    got = fused_scores_triton(inp["x"], refs=inp["refs"], knn=knn)
    want = fused_scores_reference(inp["x"], refs=inp["refs"])
    torch.testing.assert_close(got[:, 1], want[:, 1], **TOL[dtype])


@pytest.mark.slow
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


@pytest.mark.parametrize("flat", [True, False])
@pytest.mark.parametrize("ranged", [False, True])
@pytest.mark.parametrize("knn_fp32", ["bf16x3", "ieee"])
def test_both_loop_forms_and_float32_modes_match_the_reference(flat, ranged, knn_fp32):
    # 70 rows over 300 references with D=100 (two feature chunks, the second partial): every
    # flattened-loop boundary (last chunk of a tile, partial last tile) is crossed
    inp = _inputs(70, 100, 300, 16, torch.float32, False, seed=11)
    kw = {}
    if ranged:
        g = torch.Generator().manual_seed(2)
        start = torch.randint(0, 150, (70,), generator=g)
        kw = dict(ref_start=start, ref_end=start + torch.randint(0, 150, (70,), generator=g))
        kw["ref_end"][5] = kw["ref_start"][5]  # an empty range -> NaN
    if DEVICE == "cuda" and not flat:
        pytest.skip("GPUs choose the loop form by autotuning")  # the interpreter runs the one asked for
    got = fused_scores_triton(inp["x"], refs=inp["refs"], knn="tiles", knn_fp32=knn_fp32, knn_flat=flat, **kw)
    want = fused_scores_reference(inp["x"], refs=inp["refs"], **kw)
    torch.testing.assert_close(got[:, 1], want[:, 1], equal_nan=True, atol=2e-5, rtol=2e-5)


def _float64_knn(x, pool):
    xd, pd = x.double(), pool.double()
    return ((xd @ pd.T) / (xd.norm(dim=1)[:, None] * pd.norm(dim=1)[None, :])).max(dim=1).values


def test_float32_split_products_are_float32_accurate_and_the_check_catches_plain_bf16():
    # Anisotropic embeddings (a shared direction, as encoders give) where cosines sit near their max:
    # the bound is |error| <= 1e-4 against float64.
    g = torch.Generator().manual_seed(4)
    common = torch.randn(384, generator=g)
    x = (torch.randn(96, 384, generator=g) * 0.3 + common).to(DEVICE)
    pool = (torch.randn(600, 384, generator=g) * 0.3 + common).to(DEVICE)
    want = _float64_knn(x, pool)
    got = fused_scores_triton(x, refs=pool, knn="tiles")[:, 1]
    assert (got.double() - want).abs().max().item() <= 1e-4
    # the planted bug: the lo terms dropped, i.e. the products taken from bf16-rounded operands
    bug = fused_scores_triton(x.bfloat16().float(), refs=pool.bfloat16().float(), knn="tiles", knn_fp32="ieee")[:, 1]
    assert (bug.double() - want).abs().max().item() > 1e-4


def test_knn_fp32_option_is_checked():
    with pytest.raises(ValueError, match="knn_fp32"):
        fused_scores_triton(torch.ones(2, 16, device=DEVICE), refs=torch.ones(3, 16, device=DEVICE), knn_fp32="tf32")


def test_autotune_candidates_are_valid_tiles():
    from adherence.kernels.fused_scores import _KNN_CONFIGS

    assert len(set(_KNN_CONFIGS)) == len(_KNN_CONFIGS) >= 4
    for bb, bk, bd, flat, warps, stages in _KNN_CONFIGS:
        assert all(v >= 16 and v & (v - 1) == 0 for v in (bb, bk, bd))  # tl.dot needs powers of two >= 16
        assert isinstance(flat, bool) and warps in (4, 8) and stages >= 2


class _EveryConfig:
    """Stands in for the GPU autotuner under the interpreter: runs every candidate configuration, as the
    autotuner's benchmarking does, into the same output buffer."""

    def __init__(self, raw, configs):
        self.raw, self.configs, self.launches = raw, configs, 0

    def __getitem__(self, grid):
        def launch(*args, **kw):
            for bb, bk, bd, flat, _, _ in self.configs:
                self.launches += 1
                meta = dict(BB=bb, BK=bk, BD=bd, FLAT=flat)
                self.raw[grid(meta)](*args, **kw, **meta)

        return launch


@pytest.mark.skipif(DEVICE == "cuda", reason="the interpreter's stand-in for the autotuner")
@pytest.mark.parametrize("ranged", [False, True])
def test_every_autotune_candidate_and_the_shared_split_buffer_give_the_reference(monkeypatch, ranged):
    import importlib

    fs = importlib.import_module("adherence.kernels.fused_scores")  # the package re-exports a function of that name
    fused_scores_triton(torch.ones(1, 16), refs=torch.ones(1, 16))  # builds the kernels
    monkeypatch.setattr(fs, "_autotuned", lambda x: True)
    tuner = _EveryConfig(fs._KERNELS["knn_dot"], fs._KNN_CONFIGS)
    monkeypatch.setitem(fs._KERNELS, "knn_dot_tuned", tuner)
    inp = _inputs(40, 80, 520, 16, torch.float32, False, seed=9)
    kw = {}
    if ranged:
        start = torch.arange(40) * 10
        kw = dict(ref_start=start, ref_end=start + 60)
    got = fused_scores_triton(inp["x"], refs=inp["refs"], knn="tiles", **kw)
    want = fused_scores_reference(inp["x"], refs=inp["refs"], **kw)
    assert tuner.launches == len(fs._KNN_CONFIGS)
    torch.testing.assert_close(got[:, 1], want[:, 1], atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("knn", ["tiles", "rows"])
def test_zero_vectors_score_zero_like_the_reference(knn):
    # 1/|x| and 1/|r| are applied as factors (0 for a zero vector): a zero candidate or a zero reference
    # must still give the reference's cosine of 0, never NaN or inf.
    x = torch.randn(5, 32)
    x[2] = 0
    refs = torch.randn(7, 32)
    refs[3] = 0
    refs[4] = -x[0] * 3  # the only reference for row 0 beside the zero one is opposite: its max is 0
    refs[[0, 1, 2, 5, 6]] = -x[0]
    start, end = torch.tensor([0, 0, 0, 3, 0]), torch.tensor([7, 7, 7, 4, 0])
    for kw in ({}, dict(ref_start=start, ref_end=end)):
        got = fused_scores_triton(x.to(DEVICE), refs=refs.to(DEVICE), knn=knn, **kw)[:, 1].cpu()
        want = fused_scores_reference(x, refs=refs, **kw)[:, 1]
        torch.testing.assert_close(got, want, equal_nan=True, atol=2e-5, rtol=2e-5)
        assert got[0] == 0 and got[2] == 0
    assert torch.isnan(
        fused_scores_triton(x.to(DEVICE), refs=refs.to(DEVICE), knn=knn, ref_start=start, ref_end=end)[4, 1]
    )
