"""Statistics, each checked in tests against an independent reference.

``*_score`` is higher-is-better. An undefined value raises
``UndefinedMetricError`` (a ``ValueError``) with the reason, except where a
documented flag is returned instead (Fleiss' kappa / AC1 under a single category).
"""

from ._agreement import Agreement, agreement, category_counts, fleiss_kappa, gwet_ac1, percent_agreement
from ._bootstrap import ConfidenceInterval, bootstrap_ci
from ._calibration import (
    CalibrationMap,
    assess_calibration,
    balanced_accuracy,
    brier_score_loss,
    expected_calibration_error,
    fit_calibration,
    fit_isotonic,
    fit_platt,
    fit_threshold,
    reliability_bins,
)
from ._checks import UndefinedMetricError
from ._classification import cohen_kappa, confusion_matrix, f1_per_class, macro_f1
from ._evaluate import evaluate_scores, evaluate_table
from ._ppi import estimate_table, ppi_mean
from ._ranking import average_precision_score, average_ranks, roc_auc_score, roc_curve, separation
from ._retrieval import curve_similarity, mrr, normalized_auc, span_weights
from ._verification import brier_complement, c_at_1, f05u_score, pan_f1, verification_metrics

__all__ = [
    "Agreement",
    "CalibrationMap",
    "assess_calibration",
    "ConfidenceInterval",
    "UndefinedMetricError",
    "agreement",
    "average_precision_score",
    "average_ranks",
    "balanced_accuracy",
    "bootstrap_ci",
    "brier_score_loss",
    "brier_complement",
    "c_at_1",
    "category_counts",
    "cohen_kappa",
    "confusion_matrix",
    "curve_similarity",
    "evaluate_scores",
    "estimate_table",
    "evaluate_table",
    "expected_calibration_error",
    "f05u_score",
    "f1_per_class",
    "fit_calibration",
    "fit_isotonic",
    "fit_platt",
    "fit_threshold",
    "fleiss_kappa",
    "gwet_ac1",
    "macro_f1",
    "mrr",
    "normalized_auc",
    "ppi_mean",
    "pan_f1",
    "percent_agreement",
    "reliability_bins",
    "roc_auc_score",
    "roc_curve",
    "separation",
    "span_weights",
    "verification_metrics",
]
