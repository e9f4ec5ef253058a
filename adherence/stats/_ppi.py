"""Prediction-powered estimates of a share: a few hundred labels and a judge's scores on every row, together.

A random sample of the rows carries a label ``y`` (1 adherent, 0 not); every row carries the judge's score
``f``. The labels alone give an unbiased but wide estimate of the adherent share; the judge alone gives a
narrow but biased one. PPI++ (Angelopoulos, Duchi and Zrnic, 2023) corrects the judge's mean over the rows
without a label by the judge's error on the labelled ones, with a weight ``lam`` tuned for the smallest
variance:

    theta = lam * mean(f over unlabelled) + mean(y - lam * f over labelled)

It is unbiased whatever the judge's quality (a useless judge gets ``lam`` near 0: the labels alone), and its
normal interval is valid as the labelled sample grows. Rows of one conversation are not independent, so the
variance of each mean is the cluster-robust one (the sum over conversations of their summed deviations,
squared); with one row per conversation it is the usual ``var / n`` and equals ``ppi_py.ppi_mean_ci``.

When the judge was trained on the labelled rows (a classifier fit on these labels), its scores on them are
in-sample and the rectifier above is biased towards zero: the interval is too narrow and misses. The estimate is
then cross-fitted (cross-prediction-powered inference, Zrnic and Candes, PNAS 2024): the labels are split into
the classifier's K folds, each labelled row is scored by the model fit without its fold, and every unlabelled row by
the mean of the K fold models. ``ppi_mean`` on those two score sets with ``lam=1`` and no clusters equals
``ppi_py.crossppi_mean_ci``; ``adherence estimate`` does it whenever a classifier's output says its labelled turns
trained it.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from .._errors import OptionError

__all__ = ["estimate_table", "ppi_mean"]


def _mean_variance(values: np.ndarray, clusters: Optional[np.ndarray]) -> float:
    """Variance of the mean of ``values``: cluster-robust when ``clusters`` groups the rows."""
    n = len(values)
    dev = values - values.mean()
    if clusters is None:
        return float((dev**2).sum() / n**2)
    _, idx = np.unique(clusters, return_inverse=True)
    sums = np.bincount(idx, weights=dev)
    return float((sums**2).sum() / n**2)


def _interval(estimate: float, variance: float, confidence: float) -> dict:
    from scipy.stats import norm

    half = norm.ppf(0.5 + confidence / 2) * np.sqrt(max(variance, 0.0))
    return {
        "estimate": float(estimate),
        "ci_low": float(estimate - half),
        "ci_high": float(estimate + half),
        "se": float(np.sqrt(max(variance, 0.0))),
    }


def ppi_mean(
    y,
    f_labelled,
    f_unlabelled,
    *,
    confidence: float = 0.95,
    clusters_labelled=None,
    clusters_unlabelled=None,
    lam: Optional[float] = None,
    weights=None,
) -> dict:
    """The prediction-powered estimate of ``mean(y)`` with its interval, beside the labels-only one.

    Args:
        y: the labels of the labelled rows (0/1, or any number).
        f_labelled: the judge's score on those rows.
        f_unlabelled: the judge's score on the rows without a label.
        confidence: the intervals' coverage (0.95: a 95% interval).
        clusters_labelled, clusters_unlabelled: each row's conversation (None: rows are independent).
        lam: the weight of the judge (None: tuned for the smallest variance and clipped to [0, 1] as
            ``ppi_py`` does; 0 is the labels alone, 1 plain PPI).
        weights: the labelled rows' design weights (1 / inclusion probability) when the labels were sampled
            with unequal probabilities; normalised to mean 1 as ``ppi_py``'s ``w`` is, the rectifier and the
            labels-only mean are weighted by them (a Hajek estimate). ``f_unlabelled`` should then be the scores
            of every row, labelled ones included (the labelled rows are not a sample of the rest).

    Returns:
        ``{"estimate", "ci_low", "ci_high", "se", "lam", "classical": {...}, "judge_only",
        "effective_labels", "effective_labels_capped", "n_labelled", "n_unlabelled", "confidence"}``;
        ``effective_labels`` is how many labels alone would give an interval as narrow (``n_labelled`` x the
        labels-only variance / ours), capped at the number of rows (labelling them all is an exact count).

    Example:
        >>> r = ppi_mean([1, 0, 1, 1], [0.9, 0.2, 0.8, 0.7], [0.9, 0.1, 0.8, 0.6, 0.95])
        >>> round(r["estimate"], 3), r["n_labelled"], r["n_unlabelled"]
        (0.763, 4, 5)
    """
    y = np.asarray(y, dtype=np.float64)
    f = np.asarray(f_labelled, dtype=np.float64)
    fu = np.asarray(f_unlabelled, dtype=np.float64)
    n, big_n = len(y), len(fu)
    if not 0 < confidence < 1:
        raise OptionError(f"`confidence` must be in (0, 1), got {confidence}")
    if len(f) != n:
        raise OptionError(f"{n} labels but {len(f)} scores on the labelled rows")
    if n < 2 or big_n < 1:
        raise OptionError(
            f"a prediction-powered estimate needs >= 2 labelled rows and >= 1 unlabelled, got {n} and {big_n}"
        )
    if not (np.isfinite(y).all() and np.isfinite(f).all() and np.isfinite(fu).all()):
        raise OptionError("labels and scores must be finite (leave unscored rows out)")
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64)
    if len(w) != n or not (np.isfinite(w).all() and (w > 0).all()):
        raise OptionError(f"`weights` must be {n} positive finite numbers, one per labelled row")
    w = w / w.mean()
    cl = None if clusters_labelled is None else np.asarray(clusters_labelled)
    cu = None if clusters_unlabelled is None else np.asarray(clusters_unlabelled)
    if lam is None:
        wy, wf = w * y, w * f
        cov = float(((wy - wy.mean()) * (wf - wf.mean())).mean())
        var = float(np.var(np.concatenate([wf, fu]), ddof=1))
        lam = float(np.clip(cov / ((1 + n / big_n) * var), 0.0, 1.0)) if var > 0 else 0.0
    estimate = float(lam * fu.mean() + (w * (y - lam * f)).mean())
    variance = _mean_variance(lam * fu, cu) + _mean_variance(w * (y - lam * f), cl)
    classical_var = _mean_variance(w * y, cl)
    out = _interval(estimate, variance, confidence)
    # labels are worth no more than labelling every row (an exact count): the ratio is capped there
    rows = big_n if weights is not None else n + big_n
    effective = float(n * classical_var / variance) if variance > 0 else None
    capped = effective is not None and effective > rows
    if capped:
        effective = float(rows)
    out.update(
        lam=lam,
        classical=_interval(float((w * y).mean()), classical_var, confidence),
        judge_only=float(np.concatenate([f, fu]).mean()),
        effective_labels=effective,
        effective_labels_capped=capped,
        n_labelled=n,
        n_unlabelled=big_n,
        confidence=confidence,
    )
    return out


def estimate_table(
    table,
    *,
    score: str,
    label: str,
    positive,
    confidence: float = 0.95,
    by: Optional[str] = None,
    cluster: Optional[str] = "conversation_id",
    file: Optional[str] = None,
    weight: Optional[str] = None,
) -> dict:
    """The adherent share of a scored table by ``ppi_mean``: rows with a ``label`` are the labelled sample
    (1 when the label is ``positive``), every row's ``score`` is the judge's; rows without a score are left
    out and counted. Clustered by ``cluster`` when the table has that column; ``by`` adds one estimate per
    value of that column. ``weight`` names the labelled rows' design-weight column (a labels file's ``weight``,
    joined as ``label_weight``): the labels were drawn with unequal probabilities, the rectifier is weighted, and
    the judge's mean is taken over every scored row.

    Raises:
        DataError: a missing column, or too few labelled / unlabelled rows (naming the file and column).
    """
    from ..data import DataError

    cols = table.column_names
    for what, col in (("score", score), ("label", label), ("--by", by)):
        if col is not None and col not in cols:
            raise DataError(f"no {what} column {col!r}; columns are: {', '.join(cols)}", file=file, column=col)
    s = np.asarray(table.column(score).cast("float64").fill_null(np.nan).to_numpy(zero_copy_only=False))
    labels = table.column(label).to_pylist()
    scored = np.isfinite(s)
    has_label = np.array([v is not None for v in labels])
    y = np.array([float(str(v) == str(positive)) for v in labels])
    clusters = np.asarray([str(c) for c in table.column(cluster).to_pylist()]) if cluster and cluster in cols else None
    w = None
    if weight is not None:
        w = np.asarray(table.column(weight).cast("float64").fill_null(np.nan).to_numpy(zero_copy_only=False))
        if not np.isfinite(w[has_label & scored]).all():
            raise DataError("every labelled row needs a design weight", file=file, column=weight)

    def one(mask: np.ndarray) -> dict:
        lab, unl = mask & scored & has_label, mask & scored & ~has_label
        if unl.sum() == 0 and lab.sum() >= 1:  # a census: every scored turn labelled, the share is counted
            share = float(y[lab].mean())
            exact = {"estimate": share, "ci_low": share, "ci_high": share, "se": 0.0}
            return dict(exact, lam=0.0, classical=dict(exact), judge_only=float(s[lab].mean()), effective_labels=None,
                        effective_labels_capped=False, n_labelled=int(lab.sum()), n_unlabelled=0,
                        confidence=confidence, census=True, n=int((mask & scored).sum()),
                        n_unscored=int((mask & ~scored).sum()))  # fmt: skip
        if lab.sum() < 2 or unl.sum() < 1:
            raise DataError(
                f"{int(lab.sum())} scored rows with a label and {int(unl.sum())} without: a prediction-powered "
                "estimate needs >= 2 and >= 1",
                file=file,
                column=label,
            )
        pop = (mask & scored) if w is not None else unl
        r = ppi_mean(
            y[lab],
            s[lab],
            s[pop],
            confidence=confidence,
            clusters_labelled=None if clusters is None else clusters[lab],
            clusters_unlabelled=None if clusters is None else clusters[pop],
            weights=None if w is None else w[lab],
        )
        r["n"] = int((mask & scored).sum())
        r["n_unscored"] = int((mask & ~scored).sum())
        k, n = int(y[lab].sum()), int(lab.sum())
        if k in (0, n):  # one class: a normal interval has no width; exact binomial bounds on the labels instead
            from scipy.stats import beta

            a = 1.0 - confidence
            low = 0.0 if k == 0 else float(beta.ppf(a / 2, k, n - k + 1))
            high = 1.0 if k == n else float(beta.ppf(1 - a / 2, k + 1, n - k))
            bounds: dict[str, Any] = {"estimate": k / n, "ci_low": low, "ci_high": high, "se": None}
            r.update(bounds, lam=0.0, classical=dict(bounds), effective_labels=None, effective_labels_capped=False,
                     one_class=True)  # fmt: skip
        return r

    out = one(np.ones(len(s), dtype=bool))
    out.update(score_column=score, label_column=label, positive=str(positive), clustered_by=None,
               design_weighted=w is not None)  # fmt: skip
    if clusters is not None:
        out["clustered_by"] = cluster
    if by is not None:
        values = table.column(by).to_pylist()
        keys = sorted({str(v) for v in values if v is not None})
        group_of = np.array([None if v is None else str(v) for v in values], dtype=object)
        out["by"] = {"column": by, "groups": {}}
        for k in keys:
            try:
                out["by"]["groups"][k] = one(np.asarray(group_of == k, dtype=bool))
            except DataError as exc:
                out["by"]["groups"][k] = {"error": exc.reason}
    return out
