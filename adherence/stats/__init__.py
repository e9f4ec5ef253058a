"""Statistics, each checked in tests against an independent reference.

``*_score`` is higher-is-better. An undefined value raises
``UndefinedMetricError`` (a ``ValueError``) with the reason, except where a
documented flag is returned instead (Fleiss' kappa / AC1 under a single category).
"""

from ._agreement import Agreement, agreement, category_counts, fleiss_kappa, gwet_ac1, percent_agreement
from ._baselines import balanced_weights, baseline_report, fit_logistic, text_baselines
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
    stratified_folds,
    stratified_group_folds,
)
from ._cascade import apply_cascade, fit_cascade, verdict_confidence
from ._checks import UndefinedMetricError
from ._classification import cohen_kappa, confusion_matrix, f1_per_class, macro_f1
from ._compare import cluster_bootstrap_diff, compare_paired, gate, mcnemar_exact
from ._evaluate import EVALUATION_METRICS, evaluate_scores, evaluate_table
from ._ppi import estimate_table, ppi_mean
from ._ranking import average_precision_score, average_ranks, roc_auc_score, roc_curve, separation
from ._retrieval import curve_similarity, mrr, normalized_auc, span_weights
from ._verification import brier_complement, c_at_1, f05u_score, pan_f1, verification_metrics

__all__ = [
    "Agreement",
    "CalibrationMap",
    "ConfidenceInterval",
    "EVALUATION_METRICS",
    "UndefinedMetricError",
    "agreement",
    "apply_cascade",
    "assess_calibration",
    "average_precision_score",
    "average_ranks",
    "balanced_accuracy",
    "balanced_weights",
    "baseline_report",
    "bootstrap_ci",
    "brier_complement",
    "brier_score_loss",
    "c_at_1",
    "category_counts",
    "cluster_bootstrap_diff",
    "cohen_kappa",
    "compare_paired",
    "confusion_matrix",
    "curve_similarity",
    "estimate_table",
    "evaluate_scores",
    "evaluate_table",
    "expected_calibration_error",
    "f05u_score",
    "f1_per_class",
    "fit_calibration",
    "fit_cascade",
    "fit_isotonic",
    "fit_logistic",
    "fit_platt",
    "fit_threshold",
    "fleiss_kappa",
    "gate",
    "gwet_ac1",
    "macro_f1",
    "mcnemar_exact",
    "mrr",
    "normalized_auc",
    "pan_f1",
    "percent_agreement",
    "ppi_mean",
    "reliability_bins",
    "roc_auc_score",
    "roc_curve",
    "separation",
    "span_weights",
    "stratified_folds",
    "stratified_group_folds",
    "text_baselines",
    "verdict_confidence",
    "verification_metrics",
]
