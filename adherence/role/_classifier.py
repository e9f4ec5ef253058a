"""``classifier``: a regularised logistic model over the bundled encoder's features, trained on the user's labels.

Features of a turn (``FEATURES``, in this order, standardised with the training labels' means and deviations):

- ``reply``: the reply's embedding (384 numbers with all-MiniLM-L6-v2);
- ``role_similarity``: cos(reply, role), scope's first part; ``user_similarity``: cos(reply, user message);
- ``reply_length`` (log of 1 + words), ``role_overlap``, ``user_overlap``: the trivial baselines themselves, so the
  model is never worse than they are for lack of them.

``fit_classifier`` fits it by ridge-penalised Newton steps with both classes weighed equally, the embedding's
coefficients shrunk more than the scalars' by a factor chosen on the out-of-fold AUC (``stats.fit_logistic``;
scikit-learn's ``LogisticRegression(C=1/l2, class_weight="balanced")`` finds the same coefficients, as its tests
check), scores every labelled turn out of fold with conversations kept whole, and chooses the decision threshold on
those out-of-fold scores. A classifier file records the encoder, its digest, the features, the fold models, the
turns it was trained on with their out-of-fold scores, the threshold and what it does, the labels' digest and the
cross-validated figures, and ``load_classifier`` refuses one that does not add up. Nothing the model learned from
is ever scored by it: a training turn met again is scored by the fold model that did not see it.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import pyarrow as pa

from .._errors import OptionError
from ._base import Method, MethodResult, _blank, text_column
from ._classifier_file import (
    CLASSIFIER_FORMAT,
    FEATURES,
    Classifier,
    encoder_digest,
    load_classifier,
    model_digest,
    model_probability,
    reply_digest,
)

__all__ = [
    "CLASSIFIER_FORMAT",
    "FEATURES",
    "Classifier",
    "ClassifierMethod",
    "check_objective",
    "classifier_features",
    "classifier_folds",
    "decision_rates",
    "decision_threshold",
    "encoder_digest",
    "fit_classifier",
    "load_classifier",
    "model_digest",
    "training_record",
]


def classifier_features(encoder, roles: list, users: list, replies: list) -> np.ndarray:
    """The ``FEATURES`` of each turn as one float64 row: ``(n, dim + 5)``; two encodes a turn (the reply and the user
    message) and one a distinct role.

    Left out after measuring (docs/labels.md): the reply's embedding times the role's, element by element (lower
    out-of-fold AUC at every label count on the support log), and scope's worst-sentence term (+0.02 of held-out AUC
    at 50 labels and +0.006 at 200 on the support log, under 0.01 on the persona set, for encoding every sentence of
    every reply: about half the speed)."""
    from ..stats import text_baselines

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


def _fit_one(x, y, dim, shrink, l2, balanced) -> dict:
    from ..stats import balanced_weights, fit_logistic

    mu, sd = _standardise(x, dim, shrink)
    coef, b = fit_logistic((x - mu) / sd, y, l2=l2, sample_weight=balanced_weights(y) if balanced else None)
    return {"mean": mu.tolist(), "scale": sd.tolist(), "coef": coef.tolist(), "intercept": float(b)}


def _out_of_fold(x, y, fold, folds, dim, shrink, l2, balanced) -> tuple:
    oof = np.empty(len(y))
    models = []
    for k in range(folds):
        test, train = fold == k, fold != k
        m = _fit_one(x[train], y[train], dim, shrink, l2, balanced)
        oof[test] = model_probability(m, x[test])
        models.append(m)
    return oof, models


def check_objective(target_recall: Optional[float], max_false_flags: Optional[float]) -> None:
    """What ``decision_threshold`` is asked to aim at, checked (``classifier fit`` calls it before any work)."""
    if target_recall is not None and not 0 < target_recall <= 1:
        raise OptionError(f"--target-recall must be in (0, 1], got {target_recall}")
    if max_false_flags is not None and not 0 <= max_false_flags < 1:
        raise OptionError(f"--max-false-flags must be in [0, 1), got {max_false_flags}")
    if target_recall is not None and max_false_flags is not None:
        raise OptionError("give --target-recall or --max-false-flags, not both (each chooses the threshold)")


def decision_threshold(
    y: np.ndarray, oof: np.ndarray, *, target_recall: Optional[float] = None, max_false_flags: Optional[float] = None
) -> dict:
    """The cut on P(adherent) below which a turn is flagged a violation, chosen on out-of-fold scores: the one with
    the best balanced accuracy (the mean of the share of violations caught and of adherent turns passed); with
    ``target_recall``, the lowest that catches at least that share of the violations (fewest false flags there);
    with ``max_false_flags``, the highest that flags at most that share of the adherent turns (most violations
    caught there). Returns the threshold and what it does on the out-of-fold scores: ``violations_caught`` (recall
    of the violations) and ``adherent_flagged`` (the false-flag rate), the figures to expect on new turns."""
    from ..stats import fit_threshold

    check_objective(target_recall, max_false_flags)
    y = np.asarray(y, dtype=np.int8)
    s = np.asarray(oof, dtype=np.float64)
    if target_recall is not None:
        # the violations' recall rule on the reversed score; adherent is strictly above the violations' cut
        thr = float(np.nextafter(-fit_threshold(1 - y, -s, "recall", target_recall), np.inf))
        objective = "violation_recall"
    elif max_false_flags is not None:
        # the adherent turns' recall rule: at least 1 - F of them at or above the cut, the fewest violations there
        thr = fit_threshold(y, s, "recall", 1.0 - max_false_flags)
        objective = "false_flag_cap"
    else:
        thr = fit_threshold(y, s, "youden")
        objective = "balanced_accuracy"
    return {
        "threshold": float(thr),
        "objective": objective,
        "target_recall": target_recall,
        "max_false_flags": max_false_flags,
        "out_of_fold": decision_rates(y, s, thr),
    }


def decision_rates(y: np.ndarray, score: np.ndarray, threshold: float) -> dict:
    """What flagging ``score < threshold`` does on labelled rows (``y``: 1 adherent, 0 violation)."""
    y = np.asarray(y, dtype=np.int8)
    flagged = np.asarray(score, dtype=np.float64) < threshold
    caught = float(flagged[y == 0].mean()) if (y == 0).any() else float("nan")
    false_flag = float(flagged[y == 1].mean()) if (y == 1).any() else float("nan")
    return {
        "violations_caught": caught,
        "adherent_flagged": false_flag,
        "balanced_accuracy": (caught + 1.0 - false_flag) / 2.0,
        "flagged_share": float(flagged.mean()),
    }


def classifier_folds(y: np.ndarray, groups, folds: int, seed: int) -> tuple:
    """``(fold of each row, grouped)``: folds that keep conversations whole (``stratified_group_folds``), or rows
    dealt into stratified folds without ``groups`` or when the violations sit in too few conversations for that."""
    from ..stats import stratified_folds, stratified_group_folds

    fold = None if groups is None else stratified_group_folds(y, groups, folds, seed)
    if fold is None:
        return stratified_folds(y, folds, seed), False
    return fold, True


def fit_classifier(
    x: np.ndarray,
    y: np.ndarray,
    *,
    groups=None,
    l2: float = 1.0,
    shrinks=SHRINKS,
    folds: int = 5,
    seed: int = 42,
    balanced: bool = True,
    target_recall: Optional[float] = None,
    max_false_flags: Optional[float] = None,
) -> dict:
    """Fit the model on every labelled row, measure it out of fold, and choose its decision threshold there.

    Args:
        x: ``classifier_features`` of the labelled turns.
        y: 1 adherent, 0 violation.
        groups: each row's conversation: folds keep conversations whole (``stratified_group_folds``); without them,
            or when the violations sit in too few conversations for that, rows are dealt into stratified folds
            (``cv.grouped`` says which).
        l2: the ridge penalty on the standardised scalar features' coefficients (the intercept is not penalised).
        shrinks: the embedding's extra shrinkage factors to choose from, by out-of-fold AUC on the same folds
            (the reported AUC is the chosen one's: with three candidates, a little optimistic; ``adherence bench
            labels`` measures on held-out turns).
        balanced: weigh both classes equally in the fit (scikit-learn's ``class_weight="balanced"``).
        target_recall: choose the threshold that catches this share of violations (default: best balanced
            accuracy); see ``decision_threshold``.
        max_false_flags: choose the threshold that flags at most this share of adherent turns, catching the most
            violations there (instead of ``target_recall``).

    Returns:
        ``{"mean", "scale", "coef", "intercept", "l2", "shrink", "balanced", "folds": [each fold's model],
        "cv": {"folds", "seed", "grouped", "auc", "oof", "fold", "by_shrink"}, "decision": {...}}`` (``oof``: each
        row's out-of-fold P(adherent), from ``folds[fold[i]]``, the model fit without the row's fold).
    """
    from ..stats import roc_auc_score

    y = np.asarray(y, dtype=np.int8)
    n_pos, n_neg = int(y.sum()), int(len(y) - y.sum())
    if min(n_pos, n_neg) < folds:
        raise OptionError(
            f"a classifier needs at least {folds} labelled turns of each class for its {folds}-fold check; got "
            f"{n_pos} adherent and {n_neg} violation(s): label more turns (or lower --folds)"
        )
    dim = x.shape[1] - (len(FEATURES) - 1)
    fold, grouped = classifier_folds(y, groups, folds, seed)
    tried = {float(s): _out_of_fold(x, y, fold, folds, dim, float(s), l2, balanced) for s in shrinks}
    aucs = {s: float(roc_auc_score(y, oof)) for s, (oof, _) in tried.items()}
    shrink = max(aucs, key=lambda s: (aucs[s], s))  # ties: the stronger shrinkage
    oof, fold_models = tried[shrink]
    return dict(
        _fit_one(x, y, dim, shrink, l2, balanced),
        l2=l2,
        shrink=shrink,
        balanced=balanced,
        folds=fold_models,
        cv={
            "folds": folds,
            "seed": seed,
            "grouped": grouped,
            "auc": aucs[shrink],
            "oof": oof.tolist(),
            "fold": fold.tolist(),
            "by_shrink": {str(k): v for k, v in aucs.items()},
        },
        decision=decision_threshold(y, oof, target_recall=target_recall, max_false_flags=max_false_flags),
    )


_LOADED: dict = {}


def _loaded(config) -> Classifier:
    """The job's classifier file, loaded once per process (again when the file's digest changed)."""
    key = (config.classifier, config.classifier_digest)
    if key not in _LOADED:
        _LOADED.clear()
        _LOADED[key] = load_classifier(config.classifier)
    return _LOADED[key]


class ClassifierMethod(Method):
    """P(adherent) from a classifier file (``adherence classifier fit``) over the bundled encoder's features.

    A turn the classifier was trained on (its key and reply as recorded in the file) is scored by the model fit
    without that turn's fold, so no score in the output is in-sample: ``classifier_fold`` names the fold (null for
    every other turn), and ``classifier_crossfit`` holds the fold models' mean P(adherent) (for a training turn, its
    out-of-fold score), what a cross-fitted estimate reads. The decision threshold is the file's (chosen on
    out-of-fold scores), unless ``--threshold`` or ``--calibration`` gives another."""

    name = "classifier"
    needs_ground_truth = False
    needs_reference_texts = False

    def decision_threshold(self, config) -> Optional[float]:
        return _loaded(config).threshold if config.classifier else self.default_threshold

    def encoder_model(self, config) -> Optional[str]:
        return _loaded(config).encoder_model() if config.classifier else None

    def prepare(self, config, resources):
        if not config.classifier:
            raise OptionError("--method classifier needs --classifier CLF.json (from `adherence classifier fit`)")
        _loaded(config).check_encoder(resources.encoder)

    def row_errors(self, turns, config):
        out = super().row_errors(turns, config)
        for i, r in enumerate(text_column(turns, "role")):
            if out[i] is None and _blank(r):
                out[i] = "no role: the classifier reads the role (the system prompt); give a role column or --role-file"
        return out

    def score(self, turns, config, resources):
        clf = _loaded(config)
        tuned = clf.learner == "fine-tuned"
        errors = self.row_errors(turns, config)
        ok = np.array([e is None for e in errors], dtype=bool)
        score = np.full(turns.num_rows, np.nan)
        cross = np.full(turns.num_rows, np.nan)
        fold = np.full(turns.num_rows, -1, dtype=np.int64)
        if ok.any():
            idx = np.flatnonzero(ok)
            a, r, u = (text_column(turns, c) for c in ("assistant", "role", "user"))
            x = classifier_features(resources.encoder, [r[i] for i in idx], [u[i] for i in idx], [a[i] for i in idx])
            score[idx] = clf.probability(x)
            at = clf.training_at(text_column(turns, "conversation_id"), text_column(turns, "turn_index"), a, idx)
            seen = at >= 0
            fold[idx[seen]] = np.asarray(clf.data["training"]["fold"], dtype=np.int64)[at[seen]]
            if tuned:
                # the fold encoders are not kept: a training turn gets the out-of-fold score recorded at the fit
                score[idx[seen]] = np.asarray(clf.data["training"]["oof"], dtype=np.float64)[at[seen]]
            else:
                cross[idx] = clf.crossfit_probability(x)
                for k in np.unique(fold[idx][seen]):
                    k_at = np.flatnonzero(fold[idx] == k)
                    score[idx[k_at]] = cross[idx[k_at]] = clf.fold_probability(int(k), x[k_at])
        return MethodResult(
            score,
            errors,
            extra={
                "classifier_fold": pa.array([int(f) if f >= 0 else None for f in fold], pa.int32()),
                "classifier_crossfit": pa.array(
                    [float(c) if k and not tuned else None for c, k in zip(cross, ok)], pa.float64()
                ),
            },
        )


def training_record(conversation_ids: list, turn_indices: list, replies: Optional[list]) -> dict:
    """Which turns trained a classifier (or fitted a calibration), as its file records them: each turn's key and its
    reply's digest (a turn of another log under the same key is not taken for a training turn; None without the
    replies, a table of scores alone)."""
    return {
        "conversation_id": [str(c) for c in conversation_ids],
        "turn_index": [int(t) for t in turn_indices],
        "reply_digest": [None] * len(conversation_ids) if replies is None else [reply_digest(a) for a in replies],
    }


def classifier_document(
    fit: dict,
    *,
    encoder,
    dim: int,
    source: dict,
    baselines: Optional[dict],
    training: Optional[dict] = None,
    learner: Optional[dict] = None,
    digest: Optional[str] = None,
) -> dict:
    """The classifier file's document: the model, its fold models, the turns it was trained on with their
    out-of-fold scores, the decision threshold, the features, the encoder and its digest (``digest`` when given: a
    tuned encoder's, taken while its checkpoint was on disk), what the labels were, and the cross-validated figures
    beside the trivial baselines'."""
    from .._version import __version__

    cv = dict(fit["cv"])
    oof, fold = cv.pop("oof"), cv.pop("fold")
    train = dict(training or {"conversation_id": [], "turn_index": [], "reply_digest": []})
    if train["conversation_id"]:
        train.update(fold=list(fold), oof=list(oof))
    else:
        train.update(fold=[], oof=[])
    doc: dict[str, Any] = {
        "format": CLASSIFIER_FORMAT,
        "learner": dict(learner or {"name": "frozen"}),
        "features": list(FEATURES),
        "encoder": {"name": encoder.describe().get("name"), "digest": digest or encoder_digest(encoder), "dim": dim},
        "model": {k: fit[k] for k in ("mean", "scale", "coef", "intercept", "l2", "shrink", "balanced")},
        "folds": fit["folds"],
        "decision": fit["decision"],
        "training": train,
        "cv": dict(cv, baselines=baselines),
        "source": source,
        "adherence": __version__,
    }
    doc["digest"] = model_digest(doc)
    return doc
