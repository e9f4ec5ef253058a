"""Two more features for the classifier, measured and left out: on the generated support log (the same turns, draws
and held-out protocol as ``adherence bench labels``), the held-out AUC with and without

- ``role prototype``: cos(reply, the mean embedding of the labelled adherent replies of the same role) and
  cos(reply, the mean embedding of every labelled violation);
- ``nearest labelled``: the mean cosine of the reply to its 5 nearest labelled adherent replies and to its 3
  nearest labelled violations;

each computed from the training labels only (a training turn leaves itself out).

    python benchmarks/labels_feature_variants.py benchmarks/results/2026-11-27-cpu-labels-variants.json
"""

import json
import sys

import numpy as np

import adherence.role._classifier as classifier
from adherence.bench._hardware import cpu_info
from adherence.bench.labels import _auc, support_turns
from adherence.models import Encoder
from adherence.role._classifier import classifier_features, fit_classifier


def main(out_path: str, conversations: int = 400, seed: int = 11, draws: int = 5) -> None:
    table, y = support_turns(conversations, seed)
    a, r, u = (table.column(c).to_pylist() for c in ("assistant", "role", "user"))
    x = classifier_features(Encoder(None, progress=False), r, u, a)
    dim = x.shape[1] - (len(classifier.FEATURES) - 1)
    emb = x[:, :dim]
    role_id = np.unique(np.array(r), return_inverse=True)[1]

    def unit(v):
        return v / (np.linalg.norm(v) + 1e-12)

    def prototype(train, rows):
        yt = y[train]
        vio = unit(emb[train][yt == 0].mean(0)) if (yt == 0).any() else np.zeros(dim)
        out = np.zeros((len(rows), 2))
        for j, i in enumerate(rows):
            same = train[(role_id[train] == role_id[i]) & (yt == 1) & (train != i)]
            out[j] = [emb[i] @ (unit(emb[same].mean(0)) if len(same) else np.zeros(dim)), emb[i] @ vio]
        return out

    def nearest(train, rows):
        out = np.zeros((len(rows), 2))
        for j, i in enumerate(rows):
            keep = train != i
            sims, yt = emb[train[keep]] @ emb[i], y[train[keep]]
            out[j] = [np.sort(sims[yt == 1])[-5:].mean(), np.sort(sims[yt == 0])[-3:].mean()]
        return out

    def fit(xi, yi, s, extra):
        old = classifier.FEATURES  # the extra columns count as scalar features, beside the embedding's block
        classifier.FEATURES = tuple(old) + tuple(f"extra{k}" for k in range(extra))
        try:
            return fit_classifier(xi, yi, folds=5, seed=s)
        finally:
            classifier.FEATURES = old

    variants = {"features as shipped": None, "role prototype": prototype, "nearest labelled": nearest}
    results: dict = {}
    for n in (50, 100, 200):
        results[str(n)] = {}
        for name, extra in variants.items():
            held = []
            for s in range(draws):
                idx = np.random.default_rng(1000 + s).choice(len(y), size=n, replace=False)
                rest = np.setdiff1d(np.arange(len(y)), idx)
                xi, xr = x[idx], x[rest]
                k = 0
                if extra is not None:
                    xi, xr = (np.column_stack([m[:, :dim], extra(idx, rows), m[:, dim:]])
                              for m, rows in ((xi, idx), (xr, rest)))  # fmt: skip
                    k = 2
                f = fit(xi, y[idx], s, k)
                mu, sd, coef = (np.asarray(f[key]) for key in ("mean", "scale", "coef"))
                held.append(_auc(y[rest], ((xr - mu) / sd) @ coef + f["intercept"]))
            results[str(n)][name] = {"held_out_auc_mean": float(np.mean(held)), "min": float(np.min(held)),
                                     "max": float(np.max(held))}  # fmt: skip
            print(n, name, results[str(n)][name], flush=True)
    doc = {
        "bench": "labels feature variants",
        "set": {
            "support_log_conversations": conversations,
            "seed": seed,
            "turns": len(y),
            "violations": int((y == 0).sum()),
        },  # fmt: skip
        "protocol": f"{draws} uniform draws of n labels (seeds 1000+), held-out AUC on every other turn",
        "results": results,
        "cpu": cpu_info(),
    }
    with open(out_path, "w") as f:
        json.dump(doc, f, indent=2)


if __name__ == "__main__":
    main(sys.argv[1])
