"""The Triton kernels behind ``adherence.kernels.fused_scores`` (imported only when they run).

One module of ``@triton.jit`` functions, so that helpers such as ``_dot`` resolve as globals when
a kernel compiles; the wrapper, the checks and the torch reference live in ``fused_scores``.
"""

import triton
import triton.language as tl

__all__ = ["build"]


@triton.jit
def _rows_kernel(
    X,
    sxb,
    sxd,
    Y,
    syb,
    syd,
    MU,
    IV,
    P,
    Q,
    sqb,
    sqv,
    OUT,
    sob,
    XN,
    B,
    D,
    V,
    HAS_Y: tl.constexpr,
    HAS_M: tl.constexpr,
    HAS_KL: tl.constexpr,
    WANT_XN: tl.constexpr,
    ROWS: tl.constexpr,
    COLS: tl.constexpr,
):
    # ROWS candidate rows per program, every row read once in [ROWS, COLS] tiles (coalesced along
    # the feature axis): cosine, the norm and Mahalanobis share one sweep of x.
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    rm = rows < B
    cols = tl.arange(0, COLS)
    xx = tl.zeros([ROWS], dtype=tl.float32)
    xy = tl.zeros([ROWS], dtype=tl.float32)
    yy = tl.zeros([ROWS], dtype=tl.float32)
    mh = tl.zeros([ROWS], dtype=tl.float32)
    for d0 in range(0, D, COLS):
        d = d0 + cols
        dm = d < D
        m2 = rm[:, None] & dm[None, :]
        x = tl.load(X + rows[:, None] * sxb + d[None, :] * sxd, mask=m2, other=0.0).to(tl.float32)
        xx += tl.sum(x * x, axis=1)
        if HAS_Y:
            y = tl.load(Y + rows[:, None] * syb + d[None, :] * syd, mask=m2, other=0.0).to(tl.float32)
            xy += tl.sum(x * y, axis=1)
            yy += tl.sum(y * y, axis=1)
        if HAS_M:
            mu = tl.load(MU + d, mask=dm, other=0.0).to(tl.float32)
            iv = tl.load(IV + d, mask=dm, other=0.0).to(tl.float32)
            diff = x - mu[None, :]
            mh += tl.sum(diff * diff * iv[None, :], axis=1)
    x_norm = tl.sqrt(xx)
    if WANT_XN:  # 1/|x| for the kNN kernels (0 for a zero row: its products are 0)
        tl.store(XN + rows, tl.where(x_norm > 0, 1.0 / tl.maximum(x_norm, 1e-30), 0.0), mask=rm)
    if HAS_Y:
        denom = tl.maximum(x_norm * tl.sqrt(yy), 1e-12)
        tl.store(OUT + rows * sob + 0, xy / denom, mask=rm)
    if HAS_M:
        tl.store(OUT + rows * sob + 2, tl.sqrt(mh), mask=rm)
    if HAS_KL:
        acc = tl.zeros([ROWS], dtype=tl.float32)
        for v0 in range(0, V, COLS):
            v = v0 + cols
            vm = v < V
            pv = tl.load(P + v, mask=vm, other=0.0).to(tl.float32)
            qv = tl.load(Q + rows[:, None] * sqb + v[None, :] * sqv, mask=rm[:, None] & vm[None, :], other=1.0).to(
                tl.float32
            )
            safe_p = tl.where(pv > 0, pv, 1.0)
            acc += tl.sum(tl.where(pv[None, :] > 0, pv[None, :] * (tl.log(safe_p)[None, :] - tl.log(qv)), 0.0), axis=1)
        tl.store(OUT + rows * sob + 3, acc, mask=rm)


@triton.jit
def _dot(x, r, acc, MODE: tl.constexpr):
    # MODE 0: tensor cores in the input dtype; 1: float32 IEEE (no tensor cores); 2: float32 at
    # float32-level accuracy on bf16 tensor cores: x = xh + xl with xh = bf16(x), xl = bf16(x - xh),
    # x.r ~ xh.rh + xh.rl + xl.rh (the dropped xl.rl term is ~2^-16 of |x||r|); 3: the same split
    # with its bf16 operands held in float32 (the Triton interpreter has no bf16 matmul).
    if MODE == 0:
        acc = tl.dot(x, r, acc)
    elif MODE == 1:
        acc = tl.dot(x, r, acc, input_precision="ieee")
    elif MODE == 2:
        xh = x.to(tl.bfloat16)
        rh = r.to(tl.bfloat16)
        xl = (x - xh.to(tl.float32)).to(tl.bfloat16)
        rl = (r - rh.to(tl.float32)).to(tl.bfloat16)
        acc = tl.dot(xh, rh, acc)
        acc = tl.dot(xh, rl, acc)
        acc = tl.dot(xl, rh, acc)
    else:
        xh = x.to(tl.bfloat16).to(tl.float32)
        rh = r.to(tl.bfloat16).to(tl.float32)
        xl = (x - xh).to(tl.bfloat16).to(tl.float32)
        rl = (r - rh).to(tl.bfloat16).to(tl.float32)
        acc = tl.dot(xh, rh, acc, input_precision="ieee")
        acc = tl.dot(xh, rl, acc, input_precision="ieee")
        acc = tl.dot(xl, rh, acc, input_precision="ieee")
    return acc


@triton.jit
def _tile_dot(acc, X, sxb, sxd, R, srk, srd, rows, rm, k, km, d, D, MODE: tl.constexpr):
    # acc += x[rows, d] @ r[k, d]^T for one feature chunk d of one reference tile k
    dm = d < D
    x = tl.load(X + rows[:, None] * sxb + d[None, :] * sxd, mask=rm[:, None] & dm[None, :], other=0.0)
    r = tl.load(R + k[None, :] * srk + d[:, None] * srd, mask=km[None, :] & dm[:, None], other=0.0)
    return _dot(x, r, acc, MODE)


@triton.jit
def _tile_max(best, acc, RINV, k, km, start, end, SHARED: tl.constexpr):
    # the running max of <x, r_k> / |r_k| over one finished reference tile, within each row's range (the
    # row's 1/|x| is applied once to the max, after the last tile: it is positive, so the max is the same)
    rinv = tl.load(RINV + k, mask=km, other=0.0)
    sim = acc * rinv[None, :]
    if SHARED:
        inside = km[None, :]
    else:
        inside = (k[None, :] >= start[:, None]) & (k[None, :] < end[:, None])
    return tl.maximum(best, tl.max(tl.where(inside, sim, float("-inf")), axis=1))


@triton.jit
def _knn_dot_kernel(
    X,
    sxb,
    sxd,
    XINV,
    R,
    srk,
    srd,
    RINV,
    RSTART,
    REND,
    PART,
    spb,
    B,
    D: tl.constexpr,
    K,
    BUCKET,
    SHARED: tl.constexpr,
    MODE: tl.constexpr,
    FLAT: tl.constexpr,
    BB: tl.constexpr,
    BK: tl.constexpr,
    BD: tl.constexpr,
):
    # Tiled matmul of BB candidate rows against BK references at a time (float32 accumulation)
    # with a running max of the cosine: the [B, K] similarity matrix never exists. Program (i, j)
    # covers the j-th of num_programs(1) slices of the union of its rows' reference ranges (the
    # whole pool when SHARED). FLAT runs the reference tiles and feature chunks as one loop, so the
    # software pipeline never drains between tiles; otherwise the feature chunks of a tile are
    # unrolled (D is a compile-time constant, a few chunks) inside the loop over tiles. The cosine is
    # <x, r> * (1/|r|) per tile and * (1/|x|) once at the end (XINV, RINV: 0 for a zero vector, whose
    # products are 0). BUCKET (unused) is the autotuner's key for the number of row blocks.
    rows = tl.program_id(0).to(tl.int64) * BB + tl.arange(0, BB)
    split = tl.program_id(1)
    n_split = tl.num_programs(1)
    rm = rows < B
    if SHARED:
        lo = 0
        hi = K
        start = tl.zeros([BB], dtype=tl.int64)  # unread: the pool's tail is masked by km alone
        end = start
    else:
        start = tl.load(RSTART + rows, mask=rm, other=2**62)
        end = tl.load(REND + rows, mask=rm, other=-1)
        lo = tl.min(start, axis=0)
        hi = tl.max(end, axis=0)
    n_tiles = tl.cdiv(tl.maximum(hi - lo, 0), BK)
    per = tl.cdiv(n_tiles, n_split)
    t_lo = lo + split * per * BK
    t_hi = tl.minimum(hi, t_lo + per * BK)
    cols_k = tl.arange(0, BK)
    cols_d = tl.arange(0, BD)
    best = tl.full([BB], float("-inf"), dtype=tl.float32)
    if FLAT:
        nd = tl.cdiv(D, BD)
        n_mine = tl.cdiv(tl.maximum(t_hi - t_lo, 0), BK)
        acc = tl.zeros([BB, BK], dtype=tl.float32)
        for it in range(0, n_mine * nd):
            kt = it // nd
            dc = it - kt * nd
            k = t_lo + kt * BK + cols_k
            km = k < t_hi
            acc = _tile_dot(acc, X, sxb, sxd, R, srk, srd, rows, rm, k, km, dc * BD + cols_d, D, MODE)
            if dc == nd - 1:
                best = _tile_max(best, acc, RINV, k, km, start, end, SHARED)
                acc = tl.zeros([BB, BK], dtype=tl.float32)
    else:
        for k0 in range(t_lo, t_hi, BK):
            k = k0 + cols_k
            km = k < t_hi
            acc = tl.zeros([BB, BK], dtype=tl.float32)
            for d0 in tl.static_range(0, D, BD):
                acc = _tile_dot(acc, X, sxb, sxd, R, srk, srd, rows, rm, k, km, d0 + cols_d, D, MODE)
            best = _tile_max(best, acc, RINV, k, km, start, end, SHARED)
    xinv = tl.load(XINV + rows, mask=rm, other=1.0)
    best = tl.where(best == float("-inf"), best, best * xinv)
    tl.store(PART + split * spb + rows, best, mask=rm)


@triton.jit
def _knn_rows_kernel(
    X,
    sxb,
    sxd,
    XINV,
    R,
    srk,
    srd,
    RINV,
    RSTART,
    REND,
    OUT,
    sob,
    D,
    BLOCK_D: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    # One program per candidate row over its own reference range: for per-row ranges that share
    # little with their neighbours, where the tiled kernel would sweep their union.
    b = tl.program_id(0).to(tl.int64)
    offs_d = tl.arange(0, BLOCK_D)
    start = tl.load(RSTART + b)
    end = tl.load(REND + b)
    x_inv = tl.load(XINV + b)
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
            r = tl.load(R + k[:, None] * srk + d[None, :] * srd, mask=km[:, None] & dm[None, :], other=0.0).to(
                tl.float32
            )
            dot += tl.sum(r * x[None, :], axis=1)
        rinv = tl.load(RINV + k, mask=km, other=0.0)
        cos = dot * rinv * x_inv
        best = tl.maximum(best, tl.where(km, cos, float("-inf")))
    tl.store(OUT + b * sob + 1, tl.max(best, axis=0))


def build(configs):
    # On GPUs the tile shape and loop form are tuned per (feature size, precision, row blocks, pool form)
    # on first use; the interpreter runs the fixed default.
    tuned = triton.autotune(
        configs=[
            triton.Config(dict(BB=bb, BK=bk, BD=bd, FLAT=flat), num_warps=w, num_stages=s)
            for bb, bk, bd, flat, w, s in configs
        ],
        key=["D", "BUCKET", "SHARED", "MODE"],
    )(_knn_dot_kernel)
    return {"rows": _rows_kernel, "knn_dot": _knn_dot_kernel, "knn_dot_tuned": tuned, "knn_rows": _knn_rows_kernel}
