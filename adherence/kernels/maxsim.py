"""Exact late-interaction MaxSim over token embeddings stored contiguously with offsets.

For a query ``q`` (tokens ``Q[q_off[q]:q_off[q+1]]``) and a document ``d`` (tokens
``D[d_off[d]:d_off[d+1]]``)::

    maxsim(q, d) = sum_i max_j <Q_i, D_j>

An empty document or query scores 0. Three implementations share that definition:

* ``maxsim_reference`` — a loop over pairs, the plain definition (tests);
* ``maxsim_torch`` — the CPU path: documents' tokens stay back to back, one float32
  matmul against a block of queries, then a segmented max per document (no padding),
  for a list of ``(query, document)`` pairs or (``pairs=None``) the full matrix;
* ``maxsim_triton`` — Triton, no padded copy ever made. Pairs are grouped by document:
  one program takes a document and up to ``G`` of the queries paired with it (the queries
  whose pools overlap), multiplies tiles of its tokens by all their tokens at once through
  ``tl.dot`` (a ``[doc tokens, G x query length]`` tile, wide enough for the tensor cores)
  with a running max, and sums each query's maxima. A document is read from device memory
  about once for all its queries, not once per pair, and ``G`` follows the measured overlap
  (1 when every pair has its own document). Queries longer than 128 tokens take one program
  per pair instead. CUDA tensors use it by default.
"""

from __future__ import annotations

import os
from typing import Optional

import torch

from .._optional import is_available
from .fused_scores import _next_pow2

__all__ = ["maxsim", "maxsim_reference", "maxsim_torch", "maxsim_triton"]


def _check(q_emb, q_off, d_emb, d_off, q_idx=None, d_idx=None):
    if q_emb.dim() != 2 or d_emb.dim() != 2:
        raise ValueError(f"token embeddings must be [n_tokens, dim]; got {tuple(q_emb.shape)} and {tuple(d_emb.shape)}")
    if q_emb.shape[1] != d_emb.shape[1]:
        raise ValueError(f"query dim {q_emb.shape[1]} != document dim {d_emb.shape[1]}")
    for name, off, emb in (("q_off", q_off, q_emb), ("d_off", d_off, d_emb)):
        if off.dim() != 1 or off.numel() < 1:
            raise ValueError(f"`{name}` must be 1-D with n+1 entries")
        if int(off[0]) != 0 or int(off[-1]) != emb.shape[0] or bool((off[1:] < off[:-1]).any()):
            raise ValueError(f"`{name}` must rise from 0 to the number of tokens ({emb.shape[0]})")
    if (q_idx is None) != (d_idx is None):
        raise ValueError("pass both `q_idx` and `d_idx`, or neither")
    if q_idx is not None:
        if q_idx.shape != d_idx.shape or q_idx.dim() != 1:
            raise ValueError("`q_idx` and `d_idx` must be 1-D of the same length")
        nq, nd = q_off.numel() - 1, d_off.numel() - 1
        if q_idx.numel() and (int(q_idx.min()) < 0 or int(q_idx.max()) >= nq):
            raise ValueError(f"`q_idx` out of range [0, {nq})")
        if d_idx.numel() and (int(d_idx.min()) < 0 or int(d_idx.max()) >= nd):
            raise ValueError(f"`d_idx` out of range [0, {nd})")


def maxsim_reference(q_emb, q_off, d_emb, d_off, q_idx, d_idx) -> torch.Tensor:
    """The definition, one pair at a time (float32). Returns ``[n_pairs]``."""
    _check(q_emb, q_off, d_emb, d_off, q_idx, d_idx)
    out = torch.zeros(q_idx.numel(), dtype=torch.float32)
    for p, (qi, di) in enumerate(zip(q_idx.tolist(), d_idx.tolist())):
        q = q_emb[int(q_off[qi]) : int(q_off[qi + 1])].float()
        d = d_emb[int(d_off[di]) : int(d_off[di + 1])].float()
        if len(q) and len(d):
            out[p] = (q @ d.T).max(dim=1).values.sum()
    return out


def _padded_queries(emb, off, idx):
    """Queries ``idx`` as one ``[len(idx) * L, dim]`` float32 block (zero padding) and a ``[len(idx), L]`` mask."""
    starts, lens = off[idx], off[idx + 1] - off[idx]
    length = max(int(lens.max()) if len(idx) else 1, 1)
    pos = torch.arange(length, device=emb.device)
    valid = pos[None, :] < lens[:, None]
    if emb.shape[0] == 0:
        return torch.zeros(len(idx) * length, emb.shape[1], device=emb.device), valid
    rows = (starts[:, None] + pos[None, :]).clamp(max=emb.shape[0] - 1)
    x = emb[rows].float() * valid[..., None]
    return x.reshape(-1, emb.shape[1]), valid


def _segment_maxsim(tokens, lens, qflat, qmask):
    """MaxSim of padded queries ``qflat``/``qmask`` against documents stored back to back in ``tokens``
    (``lens`` tokens each): one matmul, a per-document max over its token rows, a masked sum. ``[nq, nd]``."""
    nq, lq = qmask.shape
    sims = tokens.float() @ qflat.T  # [n_tokens, nq * lq]
    best = torch.segment_reduce(sims, "max", lengths=lens, axis=0, unsafe=True)  # [nd, nq * lq]
    best = best.view(len(lens), nq, lq)
    keep = qmask[None, :, :] & (lens > 0)[:, None, None]
    return torch.where(keep, best, torch.zeros((), device=best.device)).sum(dim=2).T


def maxsim_torch(q_emb, q_off, d_emb, d_off, q_idx=None, d_idx=None, *, budget: int = 1 << 25) -> torch.Tensor:
    """MaxSim with large float32 matmuls and a segmented max over document tokens (no document padding).

    Args:
        q_emb: query token embeddings ``[Nq_tokens, dim]``.
        q_off: query offsets ``[nq + 1]`` into ``q_emb``.
        d_emb: document token embeddings ``[Nd_tokens, dim]``.
        d_off: document offsets ``[nd + 1]`` into ``d_emb``.
        q_idx: query of each pair to score (``[P]``); ``None`` scores every query against every document.
        d_idx: document of each pair to score (``[P]``); ``None`` with ``q_idx``.
        budget: float32 elements of the largest similarity block held at once (memory bound).

    Returns:
        ``[P]`` for pairs, ``[nq, nd]`` for the full matrix.
    """
    _check(q_emb, q_off, d_emb, d_off, q_idx, d_idx)
    dev = q_emb.device
    q_off, d_off = q_off.to(dev, torch.int64), d_off.to(dev, torch.int64)
    q_len, d_len = q_off[1:] - q_off[:-1], d_off[1:] - d_off[:-1]
    nq, nd = q_len.numel(), d_len.numel()
    if q_idx is not None:
        q_idx, d_idx = q_idx.to(dev, torch.int64), d_idx.to(dev, torch.int64)
        out = torch.zeros(q_idx.numel(), dtype=torch.float32, device=dev)
        # One query at a time: its documents' token ranges copied back to back, then one matmul.
        order = torch.argsort(q_idx, stable=True)
        uq, counts = torch.unique_consecutive(q_idx[order], return_counts=True)
        start = 0
        for qi, n in zip(uq.tolist(), counts.tolist()):
            sel = order[start : start + n]
            start += n
            qflat, qmask = _padded_queries(q_emb, q_off, torch.tensor([qi], device=dev))
            docs = d_idx[sel]
            lens = d_len[docs]
            per_block = max(1, budget // max(1, qflat.shape[0]))
            s = 0
            while s < len(docs):  # blocks of documents whose tokens fit the budget
                cum = torch.cumsum(lens[s:], 0)
                e = s + max(1, int(torch.searchsorted(cum, per_block, right=True)))
                blk = docs[s:e]
                ln = lens[s:e]
                # Row indices of the block's token ranges (index_select beats concatenating slices by ~10x).
                rows = torch.repeat_interleave(d_off[blk] - torch.cumsum(ln, 0) + ln, ln) + torch.arange(
                    int(ln.sum()), device=dev
                )
                tokens = d_emb.index_select(0, rows)
                out[sel[s:e]] = _segment_maxsim(tokens, lens[s:e], qflat, qmask)[0]
                s = e
        return out
    out = torch.zeros(nq, nd, dtype=torch.float32, device=dev)
    if nq == 0 or nd == 0:
        return out
    q_order = torch.argsort(q_len, stable=True)
    lq_max = max(int(q_len.max()), 1)
    q_step = max(1, min(nq, 4096 // lq_max))
    for qs in range(0, nq, q_step):
        qi = q_order[qs : qs + q_step]
        qflat, qmask = _padded_queries(q_emb, q_off, qi)
        per_block = max(1, budget // qflat.shape[0])
        cum = torch.cumsum(d_len, 0)
        s = 0
        while s < nd:  # contiguous runs of documents: a slice of the store, no copy
            base = int(cum[s - 1]) if s else 0
            e = max(s + 1, int(torch.searchsorted(cum, base + per_block, right=True)))
            a, b = int(d_off[s]), int(d_off[e])
            out[qi[:, None], torch.arange(s, e, device=dev)[None, :]] = _segment_maxsim(
                d_emb[a:b], d_len[s:e], qflat, qmask
            )
            s = e
    return out


_KERNELS: dict = {}

# Tiles (document tokens, feature chunk, warps, pipeline stages) per kernel: what the H100's autotuner
# chose for 384-d fp16 tokens (grouped: on pools overlapping 1.6x to 32x; per pair: 1000-document pools),
# fixed so that a job over many pool shapes does not pay a tuning run for each.
_PAIR_TILES = (64, 128, 4, 3)
_GROUP_TILES = (128, 64, 4, 3)
#: Query tokens x queries per grouped tile (tl.dot's N): the width the tensor cores are fed.
_GROUP_WIDTH = 128


def _build_kernels():
    import triton
    import triton.language as tl

    @triton.jit
    def _pair_kernel(
        Q,
        stride_q,
        D,
        stride_d,
        q_off,
        d_off,
        q_idx,
        d_idx,
        out_pos,
        out,
        dim,
        BLOCK_Q: tl.constexpr,
        BLOCK_T: tl.constexpr,
        BLOCK_K: tl.constexpr,
        UPCAST: tl.constexpr,
    ):
        # Program p scores pair p of the launch order and writes it at out[out_pos[p]].
        p = tl.program_id(0)
        qi = tl.load(q_idx + p)
        di = tl.load(d_idx + p)
        qa = tl.load(q_off + qi)
        qb = tl.load(q_off + qi + 1)
        da = tl.load(d_off + di)
        db = tl.load(d_off + di + 1)
        total = tl.zeros([BLOCK_Q], dtype=tl.float32)
        for q0 in range(qa, qb, BLOCK_Q):
            rq = q0 + tl.arange(0, BLOCK_Q)
            mq = rq < qb
            best = tl.full([BLOCK_Q], float("-inf"), dtype=tl.float32)
            for t0 in range(da, db, BLOCK_T):
                rt = t0 + tl.arange(0, BLOCK_T)
                mt = rt < db
                acc = tl.zeros([BLOCK_Q, BLOCK_T], dtype=tl.float32)
                for k0 in range(0, dim, BLOCK_K):
                    rk = k0 + tl.arange(0, BLOCK_K)
                    mk = rk < dim
                    q = tl.load(Q + rq[:, None] * stride_q + rk[None, :], mask=mq[:, None] & mk[None, :], other=0.0)
                    d = tl.load(D + rt[None, :] * stride_d + rk[:, None], mask=mt[None, :] & mk[:, None], other=0.0)
                    if UPCAST:
                        q = q.to(tl.float32)
                        d = d.to(tl.float32)
                    acc += tl.dot(q, d, input_precision="ieee", out_dtype=tl.float32)
                acc = tl.where(mt[None, :], acc, float("-inf"))
                best = tl.maximum(best, tl.max(acc, axis=1))
            total += tl.where(mq & (db > da), best, 0.0)
        tl.store(out + tl.load(out_pos + p), tl.sum(total, axis=0))

    @triton.jit
    def _group_kernel(
        Q,
        stride_q,
        D,
        stride_d,
        q_off,
        d_off,
        q_idx,
        d_idx,
        out_pos,
        g_start,
        g_count,
        out,
        dim,
        G: tl.constexpr,
        QL: tl.constexpr,
        BLOCK_T: tl.constexpr,
        BLOCK_K: tl.constexpr,
        UPCAST: tl.constexpr,
    ):
        # Program g: pairs g_start[g] .. + g_count[g] of the launch order, which share one document.
        # Column c of the tile is token c % QL of the group's query c // QL (padding masked to 0).
        g = tl.program_id(0)
        base = tl.load(g_start + g)
        cnt = tl.load(g_count + g)
        di = tl.load(d_idx + base)
        da = tl.load(d_off + di)
        db = tl.load(d_off + di + 1)
        c = tl.arange(0, G * QL)
        j = c // QL
        jm = j < cnt
        qi = tl.load(q_idx + base + j, mask=jm, other=0)
        qrow = tl.load(q_off + qi, mask=jm, other=0) + c % QL
        qm = jm & (qrow < tl.load(q_off + qi + 1, mask=jm, other=0))
        best = tl.full([G * QL], float("-inf"), dtype=tl.float32)
        for t0 in range(da, db, BLOCK_T):
            rt = t0 + tl.arange(0, BLOCK_T)
            mt = rt < db
            acc = tl.zeros([BLOCK_T, G * QL], dtype=tl.float32)
            for k0 in range(0, dim, BLOCK_K):
                rk = k0 + tl.arange(0, BLOCK_K)
                mk = rk < dim
                d = tl.load(D + rt[:, None] * stride_d + rk[None, :], mask=mt[:, None] & mk[None, :], other=0.0)
                q = tl.load(Q + qrow[None, :] * stride_q + rk[:, None], mask=qm[None, :] & mk[:, None], other=0.0)
                if UPCAST:
                    q = q.to(tl.float32)
                    d = d.to(tl.float32)
                acc += tl.dot(d, q, input_precision="ieee", out_dtype=tl.float32)
            acc = tl.where(mt[:, None], acc, float("-inf"))
            best = tl.maximum(best, tl.max(acc, axis=0))
        per_query = tl.sum(tl.reshape(tl.where(qm & (db > da), best, 0.0), (G, QL)), axis=1)
        jj = tl.arange(0, G)
        jjm = jj < cnt
        tl.store(out + tl.load(out_pos + base + jj, mask=jjm, other=0), per_query, mask=jjm)

    return {"pair": _pair_kernel, "group": _group_kernel}


def _by_document(q_idx, d_idx):
    """The pairs' launch order grouped by document (``(q_idx, d_idx, out_pos)`` in that order)."""
    order = torch.argsort(d_idx, stable=True)
    return q_idx[order], d_idx[order], order


def _runs(d_sorted):
    """Where each document's run of pairs starts in a document-sorted launch order (and the first-of-run mask)."""
    first = torch.ones(d_sorted.numel(), dtype=torch.bool, device=d_sorted.device)
    first[1:] = d_sorted[1:] != d_sorted[:-1]
    return torch.nonzero(first).flatten(), first


def _groups(d_sorted, width: int):
    """Groups of at most ``width`` consecutive pairs of one document in a document-sorted launch order:
    ``(start, count)`` per group, and the mean number of pairs per document."""
    n = d_sorted.numel()
    run_start, first = _runs(d_sorted)
    run_end = torch.cat([run_start[1:], torch.tensor([n], device=d_sorted.device)])
    run_of = torch.cumsum(first.long(), 0) - 1
    rank = torch.arange(n, device=d_sorted.device) - run_start[run_of]
    start = torch.nonzero(rank % width == 0).flatten()
    count = torch.minimum(run_end[run_of[start]] - start, torch.full_like(start, width))
    return start, count, n / max(run_start.numel(), 1)


def maxsim_triton(
    q_emb,
    q_off,
    d_emb,
    d_off,
    q_idx=None,
    d_idx=None,
    *,
    block_q: int = 32,
    block_t: Optional[int] = None,
    block_k: Optional[int] = None,
    group: bool = True,
) -> torch.Tensor:
    """The Triton kernels (CUDA tensors, or any device under ``TRITON_INTERPRET=1``).

    Embeddings are read in their own dtype (fp16/bf16 through tensor cores) and
    accumulated in float32. Returns ``[P]`` for pairs, ``[nq, nd]`` for the full matrix.

    Args:
        block_q: query tokens per tile of the per-pair kernel.
        block_t, block_k: document tokens and features per tile; ``None``: the kernel's measured tiles.
        group: pairs grouped by document, each document's queries scored together (queries up to 128
            tokens; longer ones take the per-pair kernel, launched in document order); False: one
            program per pair, in the order given.
    """
    _check(q_emb, q_off, d_emb, d_off, q_idx, d_idx)
    dev = q_emb.device
    full = q_idx is None
    nq, nd = q_off.numel() - 1, d_off.numel() - 1
    q_off, d_off = q_off.to(dev, torch.int64).contiguous(), d_off.to(dev, torch.int64).contiguous()
    if full:  # document-major: the queries of one document are neighbours; out[q, d] at q * nd + d
        q_idx = torch.arange(nq, device=dev).repeat(nd)
        d_idx = torch.arange(nd, device=dev).repeat_interleave(nq)
        pos = q_idx * nd + d_idx
    else:
        q_idx, d_idx = q_idx.to(dev, torch.int64), d_idx.to(dev, torch.int64)
        if group:
            q_idx, d_idx, pos = _by_document(q_idx, d_idx)
        else:
            pos = torch.arange(q_idx.numel(), device=dev)
    if d_emb.dtype != q_emb.dtype:
        d_emb = d_emb.to(q_emb.dtype)
    q_emb, d_emb = q_emb.contiguous(), d_emb.contiguous()
    out = torch.zeros(q_idx.numel(), dtype=torch.float32, device=dev)
    if not out.numel():
        return out.view(nq, nd) if full else out
    if not _KERNELS:
        _KERNELS.update(_build_kernels())
    common = (q_emb, q_emb.stride(0), d_emb, d_emb.stride(0), q_off, d_off, q_idx.contiguous(), d_idx.contiguous())
    # The interpreter's dot (numpy) has no bfloat16: upcast there; GPUs use tensor cores.
    upcast = os.environ.get("TRITON_INTERPRET") == "1" and q_emb.dtype == torch.bfloat16

    def tiles(default):
        t, k, warps, stages = default
        return dict(BLOCK_T=block_t or t, BLOCK_K=block_k or k, num_warps=warps, num_stages=stages)

    q_len = max(int((q_off[1:] - q_off[:-1]).max()), 1)
    if group and q_len <= _GROUP_WIDTH:
        ql = _next_pow2(q_len, 16, _GROUP_WIDTH)
        per_doc = d_idx.numel() / max(_runs(d_idx)[0].numel(), 1)
        g = 1
        while g * 2 <= min(per_doc, _GROUP_WIDTH // ql):  # as many queries per tile as documents have
            g *= 2
        start, count, _ = _groups(d_idx, g)
        _KERNELS["group"][(start.numel(),)](
            *common,
            pos.contiguous(),
            start,
            count,
            out,
            q_emb.shape[1],
            G=g,
            QL=ql,
            UPCAST=upcast,
            **tiles(_GROUP_TILES),
        )
    else:
        _KERNELS["pair"][(q_idx.numel(),)](
            *common, pos.contiguous(), out, q_emb.shape[1], BLOCK_Q=block_q, UPCAST=upcast, **tiles(_PAIR_TILES)
        )
    return out.view(nq, nd) if full else out


def maxsim(
    q_emb,
    q_off,
    d_emb,
    d_off,
    q_idx: Optional[torch.Tensor] = None,
    d_idx: Optional[torch.Tensor] = None,
    *,
    backend: str = "auto",
) -> torch.Tensor:
    """Exact MaxSim scores (float32) for pairs ``(q_idx[p], d_idx[p])``, or the full matrix.

    Args:
        backend: ``"auto"`` (Triton for CUDA tensors when installed, torch otherwise),
            ``"triton"`` or ``"torch"``.

    Example:
        >>> q = torch.tensor([[1.0, 0.0], [0.0, 1.0]]); q_off = torch.tensor([0, 2])
        >>> d = torch.tensor([[1.0, 0.0], [0.5, 0.5], [0.0, 0.9]]); d_off = torch.tensor([0, 1, 3])
        >>> maxsim(q, q_off, d, d_off)  # doc 0: 1 + 0; doc 1: 0.5 + 0.9
        tensor([[1.0000, 1.4000]])
    """
    if backend not in ("auto", "triton", "torch"):
        raise ValueError(f"`backend` must be 'auto', 'triton' or 'torch', got {backend!r}")
    use_triton = backend == "triton" or (backend == "auto" and q_emb.is_cuda and is_available("triton"))
    fn = maxsim_triton if use_triton else maxsim_torch
    return fn(q_emb, q_off, d_emb, d_off, q_idx, d_idx)
