"""Fused scoring of candidate embeddings: cosine, kNN-max cosine, diagonal Mahalanobis, KL.

For each candidate row ``b``:

* ``cosine[b]``      = cos(x_b, y_b) to its paired reference;
* ``knn_max[b]``     = max_k cos(x_b, r_k) over the rows ``r[start_b:end_b]`` of a
  reference matrix (a shared pool, or each row's own slice of a packed matrix);
* ``mahalanobis[b]`` = sqrt(sum_d (x_bd - mu_d)^2 * inv_var_d);
* ``kl[b]``          = KL(P || Q_b) = sum_v P_v (log P_v - log Q_bv).

Every part is optional. ``fused_scores_reference`` is the pure-torch
definition; ``fused_scores`` dispatches to the Triton kernel for CUDA
tensors (or when forced, e.g. under ``TRITON_INTERPRET=1`` on CPU) and to the
reference otherwise. Arithmetic is float32 whatever the input dtype.
"""

from __future__ import annotations

import torch

from .._optional import is_available

__all__ = ["fused_scores", "fused_scores_reference", "fused_scores_math", "FusedInputs", "COLUMNS", "triton_available"]

COLUMNS = ("cosine", "knn_max", "mahalanobis", "kl")
_EPS = 1e-12


def triton_available() -> bool:
    return is_available("triton")


class FusedInputs:
    """Checked, broadcast-ready inputs shared by the kernel and the reference."""

    def __init__(self, x, paired=None, refs=None, ref_start=None, ref_end=None, mu=None, inv_var=None, p=None, q=None):
        if x.dim() != 2:
            raise ValueError(f"`x` must be [B, D], got shape {tuple(x.shape)}")
        B, D = x.shape
        self.x, self.B, self.D = x, B, D
        if paired is not None and tuple(paired.shape) != (B, D):
            raise ValueError(f"`paired` must be [{B}, {D}], got {tuple(paired.shape)}")
        self.paired = paired
        self.refs = refs
        if refs is not None:
            if refs.dim() != 2 or refs.shape[1] != D:
                raise ValueError(f"`refs` must be [K, {D}], got {tuple(refs.shape)}")
            K = refs.shape[0]
            if (ref_start is None) != (ref_end is None):
                raise ValueError("pass both `ref_start` and `ref_end`, or neither")
            if ref_start is None:
                ref_start = torch.zeros(B, dtype=torch.int64, device=x.device)
                ref_end = torch.full((B,), K, dtype=torch.int64, device=x.device)
            ref_start = ref_start.to(device=x.device, dtype=torch.int64)
            ref_end = ref_end.to(device=x.device, dtype=torch.int64)
            if ref_start.shape != (B,) or ref_end.shape != (B,):
                raise ValueError(f"`ref_start`/`ref_end` must be [{B}]")
            if B and (bool((ref_start < 0).any()) or bool((ref_end > K).any()) or bool((ref_end < ref_start).any())):
                raise ValueError(f"reference ranges must satisfy 0 <= start <= end <= {K}")
        self.ref_start, self.ref_end = ref_start, ref_end
        if (mu is None) != (inv_var is None):
            raise ValueError("pass both `mu` and `inv_var`, or neither")
        if mu is not None and (mu.shape != (D,) or inv_var.shape != (D,)):
            raise ValueError(f"`mu` and `inv_var` must be [{D}]")
        self.mu, self.inv_var = mu, inv_var
        if (p is None) != (q is None):
            raise ValueError("pass both `p` and `q`, or neither")
        if p is not None:
            if p.dim() != 1 or q.dim() != 2 or q.shape != (B, p.shape[0]):
                raise ValueError(f"`p` must be [V] and `q` [{B}, V]; got {tuple(p.shape)} and {tuple(q.shape)}")
        self.p, self.q = p, q


def fused_scores_reference(
    x, paired=None, refs=None, ref_start=None, ref_end=None, mu=None, inv_var=None, p=None, q=None
):
    """Pure-torch definition of ``fused_scores``: ``[B, 4]`` float32, NaN where not asked (or no reference)."""
    a = FusedInputs(x, paired, refs, ref_start, ref_end, mu, inv_var, p, q)
    ranged = ref_start is not None
    return fused_scores_math(
        a.x, a.paired, a.refs, a.ref_start if ranged else None, a.ref_end if ranged else None, a.mu, a.inv_var, a.p, a.q
    )


def fused_scores_math(x, paired=None, refs=None, ref_start=None, ref_end=None, mu=None, inv_var=None, p=None, q=None):
    """The arithmetic of ``fused_scores_reference`` on inputs already checked, without a host sync or a
    data-dependent branch, so that ``torch.compile`` traces it whole (the benchmarks' compiled baseline).
    No ``ref_start``/``ref_end``: every row against every reference."""
    xf = x.float()
    B = xf.shape[0]
    out = torch.full((B, 4), float("nan"), dtype=torch.float32, device=x.device)
    xn = xf.norm(dim=1)
    if paired is not None:
        yf = paired.float()
        out[:, 0] = (xf * yf).sum(1) / (xn * yf.norm(dim=1)).clamp_min(_EPS)
    if refs is not None and B:
        rf = refs.float()
        cos = (xf @ rf.T) / (xn[:, None] * rf.norm(dim=1)[None, :]).clamp_min(_EPS)
        if ref_start is not None:
            k = torch.arange(rf.shape[0], device=x.device)
            inside = (k[None, :] >= ref_start[:, None]) & (k[None, :] < ref_end[:, None])
            cos = cos.masked_fill(~inside, float("-inf"))
        best = cos.max(dim=1).values if rf.shape[0] else torch.full((B,), float("-inf"), device=x.device)
        out[:, 1] = torch.where(torch.isinf(best), torch.full_like(best, float("nan")), best)
    if mu is not None:
        diff = xf - mu.float()[None, :]
        out[:, 2] = ((diff * diff) * inv_var.float()[None, :]).sum(1).sqrt()
    if p is not None:
        pf, qf = p.float(), q.float()
        terms = torch.where(
            pf[None, :] > 0, pf[None, :] * (torch.log(pf)[None, :] - torch.log(qf)), torch.zeros_like(qf)
        )
        out[:, 3] = terms.sum(1)
    return out


_KERNELS: dict = {}

# Row-block kernel: rows per program, columns per step (D and V are swept in chunks of these).
_ROWS, _COLS = 32, 128
# kNN tiles (tl.dot): candidate rows x references x feature chunk, per program (the interpreter's and
# the range-cost estimate's shape), and the GPU autotuner's candidates:
# (rows, references, feature chunk, flat loop, warps, pipeline stages).
_KNN_B, _KNN_K, _KNN_D = 64, 128, 64
_KNN_CONFIGS = (
    (64, 128, 64, False, 8, 3),  # the shape used before tuning
    (64, 128, 64, True, 4, 4),
    (64, 256, 64, True, 8, 3),
    (128, 128, 64, True, 8, 3),
    (128, 128, 64, True, 4, 4),
    (128, 256, 64, True, 8, 3),
    (128, 128, 128, True, 8, 3),
    (256, 128, 64, True, 8, 3),  # the H100's choice for 384-d pools of 10^4-10^6, bf16 and float32
    (128, 64, 128, True, 4, 4),
)


def _build_kernels():
    from . import _fused_triton

    return _fused_triton.build(_KNN_CONFIGS)


def _next_pow2(n: int, lo: int, hi: int) -> int:
    v = lo
    while v < n and v < hi:
        v *= 2
    return v


def _use_tiles(start, end, block: int) -> bool:
    """Whether the tiled kernel's sweep of each row block's range union costs at most 4x the rows' own
    ranges (a shared pool: 1x) — tl.dot is several times faster per pair than the row kernel."""
    B = start.shape[0]
    n_blocks = -(-B // block)
    pad = n_blocks * block - B
    s = torch.cat([start, start[-1:].expand(pad)]) if pad else start
    e = torch.cat([end, end[-1:].expand(pad)]) if pad else end
    union = (e.view(n_blocks, block).max(1).values - s.view(n_blocks, block).min(1).values).clamp_min(0)
    own = (end - start).clamp_min(0).sum()
    return bool(union.sum() * block <= 4 * max(int(own), 1))


def _autotuned(x) -> bool:
    """Whether the kNN tiles are autotuned for ``x``'s device (GPUs; the interpreter runs one fixed shape)."""
    return x.is_cuda


def _splits(n_row_blocks: int, n_tiles: int, device) -> int:
    """Slices of the reference range per row block, so that a few row blocks still fill the GPU."""
    if device.type != "cuda":
        return max(1, min(n_tiles, 3))  # the interpreter: exercise the split path cheaply
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    return max(1, min(n_tiles, -(-4 * sms // max(n_row_blocks, 1))))


def fused_scores_triton(
    x,
    paired=None,
    refs=None,
    ref_start=None,
    ref_end=None,
    mu=None,
    inv_var=None,
    p=None,
    q=None,
    *,
    knn: str = "auto",
    knn_fp32: str = "bf16x3",
    knn_flat: bool = True,
):
    """The Triton kernels (CUDA tensors, or any device under ``TRITON_INTERPRET=1``).

    ``knn``: ``"tiles"`` (tl.dot tiles with a running max; a shared pool), ``"rows"`` (one program per
    row over its own range) or ``"auto"`` (tiles unless the rows' ranges overlap too little).
    ``knn_fp32``: how the tiles multiply float32 embeddings: ``"bf16x3"`` (three bf16 tensor-core
    products of a hi/lo split, float32-level accuracy: |error| <= ~2^-16 |x||r|) or ``"ieee"`` (float32
    FMA, no tensor cores). ``knn_flat``: the loop form the interpreter runs (GPUs tune it).
    """
    import triton

    global _KERNELS
    if knn not in ("auto", "tiles", "rows"):
        raise ValueError(f"`knn` must be 'auto', 'tiles' or 'rows', got {knn!r}")
    if knn_fp32 not in ("bf16x3", "ieee"):
        raise ValueError(f"`knn_fp32` must be 'bf16x3' or 'ieee', got {knn_fp32!r}")
    a = FusedInputs(x, paired, refs, ref_start, ref_end, mu, inv_var, p, q)
    if not _KERNELS:
        _KERNELS = _build_kernels()
    out = torch.full((a.B, 4), float("nan"), dtype=torch.float32, device=x.device)
    if a.B == 0:
        return out
    dummy = torch.zeros(1, dtype=torch.float32, device=x.device)
    y = a.paired if a.paired is not None else x
    mu_ = a.mu.contiguous() if a.mu is not None else dummy
    iv_ = a.inv_var.contiguous() if a.inv_var is not None else dummy
    p_ = a.p.contiguous() if a.p is not None else dummy
    q_ = a.q if a.q is not None else x
    V = a.p.shape[0] if a.p is not None else 1
    # 1/|x| per row (the rows kernel writes it for the kNN kernels)
    xn = torch.empty(a.B, dtype=torch.float32, device=x.device) if a.refs is not None else dummy
    _KERNELS["rows"][(triton.cdiv(a.B, _ROWS),)](
        x,
        x.stride(0),
        x.stride(1),
        y,
        y.stride(0),
        y.stride(1),
        mu_,
        iv_,
        p_,
        q_,
        q_.stride(0),
        q_.stride(1),
        out,
        out.stride(0),
        xn,
        a.B,
        a.D,
        V,
        HAS_Y=a.paired is not None,
        HAS_M=a.mu is not None,
        HAS_KL=a.p is not None,
        WANT_XN=a.refs is not None,
        ROWS=_ROWS,
        COLS=_next_pow2(max(a.D, V if a.p is not None else 1), 16, _COLS),
        num_warps=4,
    )
    if a.refs is not None and a.refs.shape[0]:
        r = a.refs
        rn = r.float().norm(dim=1)
        rinv = torch.where(rn > 0, rn.reciprocal(), torch.zeros_like(rn)).contiguous()
        shared = ref_start is None  # every row against the whole pool: no range to inspect (no device sync)
        tiles = knn == "tiles" or (knn == "auto" and (shared or _use_tiles(a.ref_start, a.ref_end, _KNN_B)))
        if tiles:
            xd = x if r.dtype == x.dtype else x.to(torch.promote_types(x.dtype, r.dtype))
            mode = 0
            if xd.dtype == torch.float32:
                mode = 1 if knn_fp32 == "ieee" else (2 if x.is_cuda else 3)
            elif not x.is_cuda and xd.dtype == torch.bfloat16:
                xd, mode = xd.float(), 1  # the interpreter (numpy) has no bf16 matmul: exact products in fp32
            rd = r.to(xd.dtype)
            span = r.shape[0] if shared else int((a.ref_end.max() - a.ref_start.min()).clamp_min(0))
            args = (xd, xd.stride(0), xd.stride(1), xn, rd, rd.stride(0), rd.stride(1), rinv, a.ref_start, a.ref_end)
            if _autotuned(x):

                def n_split(bb, bk):
                    return _splits(triton.cdiv(a.B, bb), max(1, triton.cdiv(span, bk)), x.device)

                most = max(n_split(c[0], c[1]) for c in _KNN_CONFIGS)
                # Every slice a configuration writes is a max over part of the row's range, so rows left
                # from another configuration (autotuning) never change the final max.
                part = torch.full((most, a.B), float("-inf"), dtype=torch.float32, device=x.device)
                _KERNELS["knn_dot_tuned"][lambda m: (triton.cdiv(a.B, m["BB"]), n_split(m["BB"], m["BK"]))](
                    *args,
                    part,
                    part.stride(0),
                    a.B,
                    a.D,
                    r.shape[0],
                    _next_pow2(triton.cdiv(a.B, _KNN_B), 1, 4096),
                    SHARED=shared,
                    MODE=mode,
                )
            else:
                n_rb = triton.cdiv(a.B, _KNN_B)
                split = _splits(n_rb, max(1, triton.cdiv(span, _KNN_K)), x.device)
                part = torch.empty((split, a.B), dtype=torch.float32, device=x.device)
                _KERNELS["knn_dot"][(n_rb, split)](
                    *args,
                    part,
                    part.stride(0),
                    a.B,
                    a.D,
                    r.shape[0],
                    1,
                    SHARED=shared,
                    MODE=mode,
                    FLAT=knn_flat,
                    BB=_KNN_B,
                    BK=_KNN_K,
                    BD=_KNN_D,
                )
            out[:, 1] = part.max(dim=0).values
        else:
            _KERNELS["knn_rows"][(a.B,)](
                x,
                x.stride(0),
                x.stride(1),
                xn,
                r,
                r.stride(0),
                r.stride(1),
                rinv,
                a.ref_start,
                a.ref_end,
                out,
                out.stride(0),
                a.D,
                BLOCK_D=_next_pow2(a.D, 16, 128),
                BLOCK_K=16,
            )
        knn_col = out[:, 1]
        out[:, 1] = torch.where(torch.isinf(knn_col), torch.full_like(knn_col, float("nan")), knn_col)
    return out


def fused_scores(
    x,
    paired=None,
    refs=None,
    ref_start=None,
    ref_end=None,
    mu=None,
    inv_var=None,
    p=None,
    q=None,
    *,
    backend: str = "auto",
):
    """Score a batch of candidates; returns ``[B, 4]`` float32 with columns ``COLUMNS``.

    Args:
        x: candidates ``[B, D]`` (any float dtype, any strides).
        paired: paired references ``[B, D]`` -> ``cosine``.
        refs: reference matrix ``[K, D]`` -> ``knn_max`` over ``refs[ref_start[b]:ref_end[b]]``
            (the whole matrix when no ranges are given); NaN for an empty range.
        mu: centroid ``[D]`` -> ``mahalanobis`` (with ``inv_var``).
        inv_var: inverse variances ``[D]``.
        p: reference distribution ``[V]`` -> ``kl`` (with ``q``).
        q: candidate distributions ``[B, V]``.
        backend: ``"auto"`` (Triton for CUDA tensors, torch otherwise), ``"triton"`` or ``"torch"``.

    Example:
        >>> x = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
        >>> fused_scores(x, paired=torch.tensor([[1.0, 1.0], [0.0, 1.0]]))[:, 0]
        tensor([0.7071, 1.0000])
    """
    if backend not in ("auto", "triton", "torch"):
        raise ValueError(f"`backend` must be 'auto', 'triton' or 'torch', got {backend!r}")
    use_triton = backend == "triton" or (backend == "auto" and x.is_cuda and triton_available())
    fn = fused_scores_triton if use_triton else fused_scores_reference
    return fn(x, paired, refs, ref_start, ref_end, mu, inv_var, p, q)
