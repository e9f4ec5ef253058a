"""Feature variants for the classifier on logs with on-topic violations, measured and left out: AUC on the turns not
labelled, 12 uniform draws of 50 / 100 / 150 labels, on the two hand-written logs and the generated support log, one
learner for every variant (scikit-learn's class-balanced logistic regression on standardised features):

- ``A``: today's features (the reply's embedding; cosines to role and user; reply length, role and user overlap);
- ``B_pair``: the embedding of the user message and reply together instead of the reply's (and ``B_reply+pair``:
  both);
- ``C_knn``: A plus the mean cosine to the 3 nearest labelled adherent replies minus to the 3 nearest violations
  (a training turn leaves itself out); ``C_knn_only``: that feature alone;
- ``D_sentknn``: C plus, per reply, its worst sentence's nearest labelled adherent sentence minus nearest labelled
  violation sentence (every sentence encoded: about half the classifier's speed); ``D_sentknn_only``: that alone.

    python benchmarks/own_logs_feature_variants.py benchmarks/results/2026-12-07-cpu-own-logs-variants.json
"""

import json
import re
import sys

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score

from adherence.bench._hardware import cpu_info
from adherence.bench.own_logs import _support, own_log_turns
from adherence.models import Encoder
from adherence.stats._baselines import text_baselines

enc = Encoder(progress=False)


def E(texts):
    return enc.encode(list(texts)).float().cpu().numpy().astype(np.float64)


def sentences(t):
    parts = [s.strip() for s in re.split(r"(?<=[.!?])\s+", t or "") if s.strip()]
    return parts or [t or ""]


def prep(name):
    if name == "support":
        t, y, kinds = _support()
    else:
        t, y, kinds = own_log_turns(name)
    a, r, u = (t.column(c).to_pylist() for c in ("assistant", "role", "user"))
    r = [x or "" for x in r]
    u = [x or "" for x in u]
    reply = E(a)
    uniq = {x: i for i, x in enumerate(dict.fromkeys(r))}
    role = E(list(uniq))[[uniq[x] for x in r]]
    user = E(u)
    pair = E([f"{uu}\n{aa}" for uu, aa in zip(u, a)])
    sents = [sentences(x) for x in a]
    flat = [s for ss in sents for s in ss]
    se = E(flat)
    idx = np.cumsum([0] + [len(ss) for ss in sents])
    base = text_baselines({"assistant": a, "role": r, "user": u})
    scal = np.column_stack(
        [
            (reply * role).sum(-1),
            (reply * user).sum(-1),
            np.log1p(base["reply_length"]),
            base["role_overlap"],
            base["user_overlap"],
        ]
    )
    cid = np.array(t.column("conversation_id").to_pylist())
    return dict(y=y, reply=reply, role=role, user=user, pair=pair, se=se, idx=idx, scal=scal, cid=cid)


def fit_pred(Xtr, ytr, Xte, C):
    mu, sd = Xtr.mean(0), Xtr.std(0)
    sd[sd == 0] = 1
    m = LogisticRegression(C=C, class_weight="balanced", max_iter=2000)
    m.fit((Xtr - mu) / sd, ytr)
    return m.decision_function((Xte - mu) / sd)


def knn_feat(emb, tr, ytr, rows, k=3, loo=False):
    """mean top-k cos to violation train rows minus to adherent train rows."""
    S = emb[rows] @ emb[tr].T
    if loo:  # rows == tr: drop self
        np.fill_diagonal(S, -np.inf)
    out = []
    for cls in (0, 1):
        sub = S[:, ytr == cls]
        kk = min(k, sub.shape[1] - (1 if loo else 0))
        top = -np.sort(-sub, axis=1)[:, :kk]
        out.append(top.mean(1))
    return out[1] - out[0]


def sent_knn(d, tr, ytr, rows, k=3):
    """per reply: max over its sentences of (max cos to violation-train sentences) minus max cos to adherent-train replies' sentences"""
    se, idx = d["se"], d["idx"]

    def sent_rows(ix):
        return np.concatenate([np.arange(idx[i], idx[i + 1]) for i in ix]), np.concatenate(
            [[j] * (idx[i + 1] - idx[i]) for j, i in enumerate(ix)]
        )

    vs, _ = sent_rows(tr[ytr == 0])
    as_, _ = sent_rows(tr[ytr == 1])
    rs, owner = sent_rows(rows)
    sv = se[rs] @ se[vs].T
    sa = se[rs] @ se[as_].T
    # exclude own sentences when row in training
    own = {i: set(range(idx[i], idx[i + 1])) for i in rows}
    vmax = sv.max(1)
    amax = sa.max(1)
    # leave-own-out: recompute where row is in train
    trset = set(tr.tolist())
    for k_, o in enumerate(owner):
        ri = rows[o]
        if ri in trset:
            mv = [c for c, s in enumerate(vs) if s in own[ri]]
            ma = [c for c, s in enumerate(as_) if s in own[ri]]
            if mv:
                x = sv[k_].copy()
                x[mv] = -np.inf
                vmax[k_] = x.max()
            if ma:
                x = sa[k_].copy()
                x[ma] = -np.inf
                amax[k_] = x.max()
    diff = amax - vmax
    out = np.full(len(rows), np.inf)
    for k_, o in enumerate(owner):
        out[o] = min(out[o], diff[k_])  # the worst sentence
    return out


def variants(d, tr, te):
    y = d["y"]
    ytr = y[tr]
    base_tr = np.column_stack([d["reply"][tr], d["scal"][tr]])
    base_te = np.column_stack([d["reply"][te], d["scal"][te]])
    res = {}
    for C in (0.01, 0.1):
        res[f"A_C{C}"] = fit_pred(base_tr, ytr, base_te, C)
    res["B_pair"] = fit_pred(
        np.column_stack([d["pair"][tr], d["scal"][tr]]), ytr, np.column_stack([d["pair"][te], d["scal"][te]]), 0.01
    )
    res["B_reply+pair"] = fit_pred(
        np.column_stack([d["reply"][tr], d["pair"][tr], d["scal"][tr]]),
        ytr,
        np.column_stack([d["reply"][te], d["pair"][te], d["scal"][te]]),
        0.01,
    )
    kn_tr = knn_feat(d["reply"], tr, ytr, tr, loo=True)
    kn_te = knn_feat(d["reply"], tr, ytr, te)
    res["C_knn"] = fit_pred(np.column_stack([base_tr, kn_tr]), ytr, np.column_stack([base_te, kn_te]), 0.01)
    res["C_knn_only"] = kn_te
    sk_tr = sent_knn(d, tr, ytr, tr)
    sk_te = sent_knn(d, tr, ytr, te)
    res["D_sentknn"] = fit_pred(
        np.column_stack([base_tr, kn_tr, sk_tr]), ytr, np.column_stack([base_te, kn_te, sk_te]), 0.01
    )
    res["D_sentknn_only"] = sk_te
    return res


out_path = sys.argv[1]
draws = int(sys.argv[2]) if len(sys.argv) > 2 else 12
out = {
    "bench": "own-logs feature variants",
    "draws": draws,
    "sizes": [50, 100, 150],
    "metric": "AUC on unlabelled turns, mean over draws",
    "results": {},
}
for name in ("claims_desk", "pharmacy_line", "support"):
    d = prep(name)
    y = d["y"]
    n = len(y)
    for size in (50, 100, 150):
        rng = np.random.default_rng(0)
        agg = {}
        for _ in range(draws):
            tr = rng.choice(n, size, replace=False)
            if len(set(y[tr])) < 2 or min((y[tr] == 0).sum(), (y[tr] == 1).sum()) < 3:
                continue
            te = np.setdiff1d(np.arange(n), tr)
            for k, s in variants(d, tr, te).items():
                agg.setdefault(k, []).append(roc_auc_score(y[te], s))
        out["results"][f"{name}@{size}"] = {k: round(float(np.mean(v)), 3) for k, v in agg.items()}
        print(name, size, out["results"][f"{name}@{size}"], flush=True)
out["cpu"] = cpu_info()
with open(out_path, "w") as fh:
    json.dump(out, fh, indent=1)
