"""Fused scoring of candidate embeddings: cosine, kNN-max cosine, diagonal Mahalanobis, KL.

For each candidate row ``b`` in one kernel launch:

* ``cosine[b]``      = cos(x_b, y_b) to its paired reference;
* ``knn_max[b]``     = max_k cos(x_b, r_k) over the rows ``r[start_b:end_b]`` of a
  reference matrix (a shared pool, or each row's own slice of a packed matrix);
* ``mahalanobis[b]`` = sqrt(sum_d (x_bd - mu_d)^2 * inv_var_d);
* ``kl[b]``          = KL(P || Q_b) = sum_v P_v (log P_v - log Q_bv).

Every part is optional. :func:`fused_scores_reference` is the pure-torch
definition; :func:`fused_scores` dispatches to the Triton kernel for CUDA
tensors (or when forced, e.g. under ``TRITON_INTERPRET=1`` on CPU) and to the
reference otherwise. Arithmetic is float32 whatever the input dtype.
"""

from __future__ import annotations


import torch

from .._optional import is_available

__all__ = ["fused_scores", "fused_scores_reference", "FusedInputs", "COLUMNS", "triton_available"]

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


def fused_scores_reference(x, paired=None, refs=None, ref_start=None, ref_end=None, mu=None, inv_var=None, p=None, q=None):
    """Pure-torch definition of :func:`fused_scores`: ``[B, 4]`` float32, NaN where not asked (or no reference)."""
    a = FusedInputs(x, paired, refs, ref_start, ref_end, mu, inv_var, p, q)
    xf = a.x.float()
    out = torch.full((a.B, 4), float("nan"), dtype=torch.float32, device=x.device)
    xn = xf.norm(dim=1)
    if a.paired is not None:
        yf = a.paired.float()
        out[:, 0] = (xf * yf).sum(1) / (xn * yf.norm(dim=1)).clamp_min(_EPS)
    if a.refs is not None and a.B:
        rf = a.refs.float()
        cos = (xf @ rf.T) / (xn[:, None] * rf.norm(dim=1)[None, :]).clamp_min(_EPS)
        k = torch.arange(rf.shape[0], device=x.device)
        inside = (k[None, :] >= a.ref_start[:, None]) & (k[None, :] < a.ref_end[:, None])
        best = cos.masked_fill(~inside, float("-inf")).max(dim=1).values if rf.shape[0] else torch.full((a.B,), float("-inf"), device=x.device)
        out[:, 1] = torch.where(torch.isinf(best), torch.full_like(best, float("nan")), best)
    if a.mu is not None:
        diff = xf - a.mu.float()[None, :]
        out[:, 2] = ((diff * diff) * a.inv_var.float()[None, :]).sum(1).sqrt()
    if a.p is not None:
        pf, qf = a.p.float(), a.q.float()
        terms = torch.where(pf[None, :] > 0, pf[None, :] * (torch.log(pf)[None, :] - torch.log(qf)), torch.zeros_like(qf))
        out[:, 3] = terms.sum(1)
    return out


_KERNEL = None


def _build_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def _fused_scores_kernel(
        X, sxb, sxd,
        Y, syb, syd,
        R, srk, srd, RN, RSTART, REND,
        MU, IV,
        P, Q, sqb, sqv,
        OUT, sob,
        D, V,
        HAS_Y: tl.constexpr, HAS_R: tl.constexpr, HAS_M: tl.constexpr, HAS_KL: tl.constexpr,
        BLOCK_D: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr,
    ):
        b = tl.program_id(0).to(tl.int64)
        offs_d = tl.arange(0, BLOCK_D)
        xx = tl.zeros([BLOCK_D], dtype=tl.float32)
        xy = tl.zeros([BLOCK_D], dtype=tl.float32)
        yy = tl.zeros([BLOCK_D], dtype=tl.float32)
        mh = tl.zeros([BLOCK_D], dtype=tl.float32)
        # One sweep over the candidate row feeds cosine, the norm and Mahalanobis.
        for d0 in range(0, D, BLOCK_D):
            d = d0 + offs_d
            dm = d < D
            x = tl.load(X + b * sxb + d * sxd, mask=dm, other=0.0).to(tl.float32)
            xx += x * x
            if HAS_Y:
                y = tl.load(Y + b * syb + d * syd, mask=dm, other=0.0).to(tl.float32)
                xy += x * y
                yy += y * y
            if HAS_M:
                mu = tl.load(MU + d, mask=dm, other=0.0).to(tl.float32)
                iv = tl.load(IV + d, mask=dm, other=0.0).to(tl.float32)
                diff = x - mu
                mh += diff * diff * iv
        x_norm = tl.sqrt(tl.sum(xx, axis=0))
        if HAS_Y:
            denom = tl.maximum(x_norm * tl.sqrt(tl.sum(yy, axis=0)), 1e-12)
            tl.store(OUT + b * sob + 0, tl.sum(xy, axis=0) / denom)
        if HAS_M:
            tl.store(OUT + b * sob + 2, tl.sqrt(tl.sum(mh, axis=0)))
        if HAS_R:
            start = tl.load(RSTART + b)
            end = tl.load(REND + b)
            offs_k = tl.arange(0, BLOCK_K)
            best = tl.full([BLOCK_K], float("-inf"), dtype=tl.float32)
            for k0 in range(start, end, BLOCK_K):
                k = k0 + offs_k
                km = k < end
                dot = tl.zeros([BLOCK_K], dtype=tl.float32)
                for d0 in range(0, D, BLOCK_D):
                    d = d0 + offs_d
                    dm = d < D
                    x = tl.load(X + b * sxb + d * sxd, mask=dm, other=0.0).to(tl.float32)
                    r = tl.load(R + k[:, None] * srk + d[None, :] * srd, mask=km[:, None] & dm[None, :], other=0.0).to(tl.float32)
                    dot += tl.sum(r * x[None, :], axis=1)
                rn = tl.load(RN + k, mask=km, other=1.0)
                cos = dot / tl.maximum(rn * x_norm, 1e-12)
                best = tl.maximum(best, tl.where(km, cos, float("-inf")))
            tl.store(OUT + b * sob + 1, tl.max(best, axis=0))
        if HAS_KL:
            offs_v = tl.arange(0, BLOCK_V)
            acc = tl.zeros([BLOCK_V], dtype=tl.float32)
            for v0 in range(0, V, BLOCK_V):
                v = v0 + offs_v
                vm = v < V
                pv = tl.load(P + v, mask=vm, other=0.0).to(tl.float32)
                qv = tl.load(Q + b * sqb + v * sqv, mask=vm, other=1.0).to(tl.float32)
                safe_p = tl.where(pv > 0, pv, 1.0)
                acc += tl.where(pv > 0, pv * (tl.log(safe_p) - tl.log(qv)), 0.0)
            tl.store(OUT + b * sob + 3, tl.sum(acc, axis=0))

    return _fused_scores_kernel


def _next_pow2(n: int, lo: int, hi: int) -> int:
    v = lo
    while v < n and v < hi:
        v *= 2
    return v


def fused_scores_triton(x, paired=None, refs=None, ref_start=None, ref_end=None, mu=None, inv_var=None, p=None, q=None):
    """The Triton kernel (CUDA tensors, or any device under ``TRITON_INTERPRET=1``)."""
    global _KERNEL
    a = FusedInputs(x, paired, refs, ref_start, ref_end, mu, inv_var, p, q)
    if _KERNEL is None:
        _KERNEL = _build_kernel()
    out = torch.full((a.B, 4), float("nan"), dtype=torch.float32, device=x.device)
    if a.B == 0:
        return out
    dummy = torch.zeros(1, dtype=torch.float32, device=x.device)
    y = a.paired if a.paired is not None else x
    r = a.refs if a.refs is not None else x
    rn = a.refs.float().norm(dim=1).contiguous() if a.refs is not None else dummy
    rs = a.ref_start if a.refs is not None else torch.zeros(1, dtype=torch.int64, device=x.device)
    re_ = a.ref_end if a.refs is not None else rs
    mu_ = a.mu.contiguous() if a.mu is not None else dummy
    iv_ = a.inv_var.contiguous() if a.inv_var is not None else dummy
    p_ = a.p.contiguous() if a.p is not None else dummy
    q_ = a.q if a.q is not None else x
    V = a.p.shape[0] if a.p is not None else 1
    _KERNEL[(a.B,)](
        x, x.stride(0), x.stride(1),
        y, y.stride(0), y.stride(1),
        r, r.stride(0), r.stride(1), rn, rs, re_,
        mu_, iv_,
        p_, q_, q_.stride(0), q_.stride(1),
        out, out.stride(0),
        a.D, V,
        HAS_Y=a.paired is not None, HAS_R=a.refs is not None, HAS_M=a.mu is not None, HAS_KL=a.p is not None,
        BLOCK_D=_next_pow2(a.D, 16, 128), BLOCK_K=16, BLOCK_V=_next_pow2(V, 16, 1024),
    )
    if a.refs is not None:
        knn = out[:, 1]
        out[:, 1] = torch.where(torch.isinf(knn), torch.full_like(knn, float("nan")), knn)
    return out


def fused_scores(x, paired=None, refs=None, ref_start=None, ref_end=None, mu=None, inv_var=None, p=None, q=None,
                 *, backend: str = "auto"):
    """Score a batch of candidates; returns ``[B, 4]`` float32 with columns :data:`COLUMNS`.

    Args:
        x: candidates ``[B, D]`` (any float dtype, any strides).
        paired: paired references ``[B, D]`` -> ``cosine``.
        refs: reference matrix ``[K, D]`` -> ``knn_max`` over ``refs[ref_start[b]:ref_end[b]]``
            (the whole matrix when no ranges are given); NaN for an empty range.
        mu, inv_var: centroid and inverse variances ``[D]`` -> ``mahalanobis``.
        p, q: reference distribution ``[V]`` and candidate distributions ``[B, V]`` -> ``kl``.
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
