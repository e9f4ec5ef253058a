"""``classifier``: a regularised logistic model over the bundled encoder's features, trained on the user's labels.

Features of a turn (``FEATURES``, in this order, standardised with the training labels' means and deviations):

- ``reply``: the reply's embedding (384 numbers with all-MiniLM-L6-v2);
- ``role_similarity``: cos(reply, role), scope's first part; ``user_similarity``: cos(reply, user message);
- ``reply_length`` (log of 1 + words), ``role_overlap``, ``user_overlap``: the trivial baselines themselves, so the
  model is never worse than they are for lack of them.

``fit_classifier`` fits it by ridge-penalised Newton steps, the embedding's coefficients shrunk more than the
scalars' by a factor chosen on the out-of-fold AUC (``stats.fit_logistic``; scikit-learn's
``LogisticRegression(C=1/l2)`` finds the same coefficients, as its tests check) and reports its stratified k-fold
out-of-fold AUC beside the trivial baselines'. A classifier file records the encoder, its digest, the features,
the labels' digest and the cross-validated figures, and ``load_classifier`` refuses one that does not add up.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from .._errors import OptionError
from ._base import Method, MethodResult, _blank, text_column
from ._classifier_file import CLASSIFIER_FORMAT, FEATURES, Classifier, encoder_digest, load_classifier, model_digest

__all__ = [
    "CLASSIFIER_FORMAT",
    "FEATURES",
    "Classifier",
    "ClassifierMethod",
    "classifier_features",
    "encoder_digest",
    "fit_classifier",
    "load_classifier",
    "model_digest",
]


def classifier_features(encoder, roles: list, users: list, replies: list) -> np.ndarray:
    """The ``FEATURES`` of each turn as one float64 row: ``(n, dim + 5)``; two encodes a turn (the reply and the user
    message) and one a distinct role.

    Left out after measuring (docs/labels.md): the reply's embedding times the role's, element by element (lower
    out-of-fold AUC at every label count on the support log), and scope's worst-sentence term (+0.02 of held-out AUC
    at 50 labels and +0.006 at 200 on the support log, under 0.01 on the persona set, for encoding every sentence of
    every reply: about half the speed)."""
    from ..stats._baselines import text_baselines

    roles = [r or "" for r in roles]
    users = [u or "" for u in users]
    reply = encoder.encode(list(replies)).float().cpu().numpy().astype(np.float64)
    uniq = {r: i for i, r in enumerate(dict.fromkeys(roles))}
    role = encoder.encode(list(uniq)).float().cpu().numpy().astype(np.float64)
    role_sim = (reply * role[[uniq[r] for r in roles]]).sum(-1)
    has_user = np.array([not _blank(u) for u in users])
    user_sim = np.zeros(len(replies))
    if has_user.any():
        ue = encoder.encode([u for u, h in zip(users, has_user) if h]).float().cpu().numpy().astype(np.float64)
        user_sim[has_user] = (reply[has_user] * ue).sum(-1)
    base = text_baselines({"assistant": list(replies), "role": roles, "user": users})
    return np.column_stack(
        [reply, role_sim, user_sim, np.log1p(base["reply_length"]), base["role_overlap"], base["user_overlap"]]
    )


#: How much more the embedding's coefficients are shrunk than the five scalar features' (chosen per fit, by the
#: out-of-fold AUC): a few hundred labels cannot pin down 384 coefficients, and how far to trust them depends on
#: the data (with 200 labels, 1 or 10 on the generated support log, 100 on the persona set: docs/labels.md).
SHRINKS = (1.0, 10.0, 100.0)


def _standardise(x: np.ndarray, dim: int, shrink: float) -> tuple:
    """Means and scales that standardise every feature, the embedding's block further divided by sqrt(shrink):
    ridge with penalty ``l2`` on these is ridge with ``l2 * shrink`` on the standardised embedding."""
    mu, sd = x.mean(axis=0), x.std(axis=0)
    sd[sd == 0] = 1.0
    sd[:dim] *= np.sqrt(shrink)
    return mu, sd


def _out_of_fold(x, y, fold, folds, dim, shrink, l2) -> np.ndarray:
    from ..stats._baselines import fit_logistic

    oof = np.empty(len(y))
    for k in range(folds):
        test, train = fold == k, fold != k
        mu, sd = _standardise(x[train], dim, shrink)
        coef, b = fit_logistic((x[train] - mu) / sd, y[train], l2=l2)
        oof[test] = 1.0 / (1.0 + np.exp(-np.clip(((x[test] - mu) / sd) @ coef + b, -35, 35)))
    return oof


def fit_classifier(
    x: np.ndarray, y: np.ndarray, *, l2: float = 1.0, shrinks=SHRINKS, folds: int = 5, seed: int = 42
) -> dict:
    """Fit the model on every labelled row and measure it by stratified k-fold out-of-fold AUC.

    Args:
        x: ``classifier_features`` of the labelled turns.
        y: 1 adherent, 0 violation.
        l2: the ridge penalty on the standardised scalar features' coefficients (the intercept is not penalised).
        shrinks: the embedding's extra shrinkage factors to choose from, by out-of-fold AUC on the same folds
            (the reported AUC is the chosen one's: with three candidates, a little optimistic; ``adherence bench
            labels`` measures on held-out turns).

    Returns:
        ``{"mean", "scale", "coef", "intercept", "l2", "shrink", "cv": {"folds", "seed", "auc", "oof",
        "by_shrink"}}`` (``oof``: each row's out-of-fold probability, in order).
    """
    from ..stats._baselines import fit_logistic
    from ..stats._calibration import _stratified_folds
    from ..stats._ranking import roc_auc_score

    y = np.asarray(y, dtype=np.int8)
    n_pos, n_neg = int(y.sum()), int(len(y) - y.sum())
    if min(n_pos, n_neg) < folds:
        raise OptionError(
            f"a classifier needs at least {folds} labelled turns of each class for its {folds}-fold check; got "
            f"{n_pos} adherent and {n_neg} violation(s): label more turns (or lower --folds)"
        )
    dim = x.shape[1] - (len(FEATURES) - 1)
    fold = _stratified_folds(y, folds, seed)
    tried = {float(s): _out_of_fold(x, y, fold, folds, dim, float(s), l2) for s in shrinks}
    aucs = {s: float(roc_auc_score(y, oof)) for s, oof in tried.items()}
    shrink = max(aucs, key=lambda s: (aucs[s], s))  # ties: the stronger shrinkage
    mu, sd = _standardise(x, dim, shrink)
    coef, b = fit_logistic((x - mu) / sd, y, l2=l2)
    return {
        "mean": mu.tolist(),
        "scale": sd.tolist(),
        "coef": coef.tolist(),
        "intercept": float(b),
        "l2": l2,
        "shrink": shrink,
        "cv": {
            "folds": folds,
            "seed": seed,
            "auc": aucs[shrink],
            "oof": tried[shrink].tolist(),
            "by_shrink": {str(k): v for k, v in aucs.items()},
        },  # fmt: skip
    }


_LOADED: dict = {}


def _loaded(path: str) -> Classifier:
    if path not in _LOADED:
        _LOADED.clear()
        _LOADED[path] = load_classifier(path)
    return _LOADED[path]


class ClassifierMethod(Method):
    """P(adherent) from a classifier file (``adherence classifier fit``) over the bundled encoder's features."""

    name = "classifier"
    needs_ground_truth = False
    needs_reference_texts = False

    def prepare(self, config, resources):
        if not config.classifier:
            raise OptionError("--method classifier needs --classifier CLF.json (from `adherence classifier fit`)")
        _loaded(config.classifier).check_encoder(resources.encoder)

    def row_errors(self, turns, config):
        out = super().row_errors(turns, config)
        for i, r in enumerate(text_column(turns, "role")):
            if out[i] is None and _blank(r):
                out[i] = "no role: the classifier reads the role (the system prompt); give a role column or --role-file"
        return out

    def score(self, turns, config, resources):
        clf = _loaded(config.classifier)
        errors = self.row_errors(turns, config)
        ok = np.array([e is None for e in errors], dtype=bool)
        score = np.full(turns.num_rows, np.nan)
        if ok.any():
            idx = np.flatnonzero(ok)
            a, r, u = (text_column(turns, c) for c in ("assistant", "role", "user"))
            x = classifier_features(resources.encoder, [r[i] for i in idx], [u[i] for i in idx], [a[i] for i in idx])
            score[idx] = clf.probability(x)
        return MethodResult(score, errors)


def classifier_document(fit: dict, *, encoder, dim: int, source: dict, baselines: Optional[dict]) -> dict:
    """The classifier file's document: the model, the features, the encoder and its digest, what the labels were,
    and the cross-validated figures beside the trivial baselines'."""
    from .._version import __version__

    cv = dict(fit["cv"])
    cv.pop("oof", None)
    doc: dict[str, Any] = {
        "format": CLASSIFIER_FORMAT,
        "features": list(FEATURES),
        "encoder": {"name": encoder.describe().get("name"), "digest": encoder_digest(encoder), "dim": dim},
        "model": {k: fit[k] for k in ("mean", "scale", "coef", "intercept", "l2", "shrink")},
        "cv": dict(cv, baselines=baselines),
        "source": source,
        "adherence": __version__,
    }
    doc["digest"] = model_digest(doc)
    return doc
