"""The ``adherence evaluate --html`` page: ROC curve and score distributions per label."""

from __future__ import annotations

import html
import os
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import numpy as np

from ..stats import EVALUATION_METRICS, UndefinedMetricError, roc_curve
from ._html import figure_svg, page, pyplot, table_html

__all__ = ["calibration_sections", "evaluation_html", "write_evaluation_html"]


def _roc_svg(y: np.ndarray, s: np.ndarray, auc) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(4.6, 4.2))
    try:
        fpr, tpr, _ = roc_curve(y, s)
        ax.plot(fpr, tpr, color="#1f5fa8", lw=2, label=f"AUC = {auc:.3f}" if auc is not None else None)
    except UndefinedMetricError as exc:
        ax.text(0.5, 0.5, str(exc), ha="center", va="center", wrap=True, fontsize=8)
    ax.plot([0, 1], [0, 1], ls="--", color="#999", lw=1)
    ax.set_xlabel("false positive rate")
    ax.set_ylabel("true positive rate")
    ax.set_title("ROC curve")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.01)
    if auc is not None:
        ax.legend(loc="lower right")
    return figure_svg(fig)


def _hist_svg(y: np.ndarray, s: np.ndarray, positive: str) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.2, 4.2))
    lo, hi = float(np.min(s)), float(np.max(s))
    bins = np.linspace(lo, hi if hi > lo else lo + 1e-9, 21)
    from matplotlib.colors import to_rgb
    from matplotlib.patches import Patch

    drawn = []
    for value, name, color in ((1, positive, "#2a9d55"), (0, f"not {positive}", "#c0392b")):
        vs = s[y == value]
        if len(vs):
            ax.hist(vs, bins=bins, alpha=0.55, color=color, label=f"{name} (n={len(vs)})")
            drawn.append(color)
    handles, _ = ax.get_legend_handles_labels()
    if len(drawn) == 2:  # where both classes fall in a bin the two fills blend: name that colour too
        white = (1.0, 1.0, 1.0)
        first = [0.55 * c + 0.45 * w for c, w in zip(to_rgb(drawn[0]), white)]
        r, g, b = (0.55 * c + 0.45 * f for c, f in zip(to_rgb(drawn[1]), first))
        both = (r, g, b)
        handles.append(Patch(color=both, label="both classes (overlap)"))
    ax.set_xlabel("score")
    ax.set_ylabel("turns")
    ax.set_title("Score distribution by class")
    ax.legend(handles=handles)
    return figure_svg(fig)


def _by_label_svg(labels: np.ndarray, s: np.ndarray, positive: str) -> str:
    plt = pyplot()
    values = sorted(set(labels.tolist()), key=lambda v: (v != positive, v))
    fig, ax = plt.subplots(figsize=(max(5.0, 1.3 * len(values) + 2), 4.2))
    data = [s[labels == v] for v in values]
    ax.boxplot(data, showfliers=False)
    ax.set_xticks(range(1, len(values) + 1), labels=values)
    rng = np.random.default_rng(0)
    for i, vs in enumerate(data, start=1):
        ax.scatter(
            i + rng.uniform(-0.12, 0.12, len(vs)),
            vs,
            s=10,
            alpha=0.6,
            color="#1f5fa8" if values[i - 1] == positive else "#c0392b",
        )
    ax.set_ylabel("score")
    ax.set_title("Score by label")
    plt.setp(ax.get_xticklabels(), rotation=20, ha="right")
    return figure_svg(fig)


def _reliability_svg(cal: dict) -> str:
    """Reliability diagram: observed adherent share against mean predicted probability per bin, before and after."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(4.8, 4.4))
    ax.plot([0, 1], [0, 1], ls="--", color="#999", lw=1, label="perfectly calibrated")
    for key, name, color, marker in (
        ("before", "raw score", "#c0392b", "s"),
        ("after", cal.get("after_label", "calibrated"), "#1f5fa8", "o"),
    ):
        rel = (cal.get(key) or {}).get("reliability")
        if not rel:
            continue
        pts = [(mp, fp, c) for mp, fp, c in zip(rel["mean_probability"], rel["fraction_positive"], rel["count"]) if c]
        ece = cal[key].get("ece")
        ax.plot(
            [p[0] for p in pts],
            [p[1] for p in pts],
            color=color,
            marker=marker,
            lw=1.5,
            label=f"{name} (ECE {ece:.3f})" if ece is not None else name,
        )
        for mp, fp, c in pts:
            ax.annotate(str(c), (mp, fp), textcoords="offset points", xytext=(4, -10), fontsize=7, color=color)
    ax.set_xlim(0, 1)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("mean predicted probability (bin)")
    ax.set_ylabel("observed adherent share")
    ax.set_title("Reliability diagram (numbers: turns per bin)")
    ax.legend(loc="upper left", fontsize=8)
    return figure_svg(fig)


def _threshold_svg(y: np.ndarray, s: np.ndarray, positive: str, threshold: float, default: float) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.2, 4.4))
    lo, hi = float(min(np.min(s), threshold, default)), float(max(np.max(s), threshold, default))
    bins = np.linspace(lo, hi if hi > lo else lo + 1e-9, 31)
    for value, name, color in ((1, positive, "#2a9d55"), (0, f"not {positive}", "#c0392b")):
        vs = s[y == value]
        if len(vs):
            ax.hist(vs, bins=bins, alpha=0.55, color=color, label=f"{name} (n={len(vs)})")
    ax.axvline(default, color="#777", ls=":", lw=1.5, label=f"uncalibrated threshold {default:g}")
    ax.axvline(threshold, color="#1f5fa8", lw=2, label=f"calibrated threshold {threshold:.4g}")
    ax.set_xlabel("raw score")
    ax.set_ylabel("turns")
    ax.set_title("Where the threshold falls")
    ax.legend(fontsize=8)
    return figure_svg(fig)


def _ci_text(v, ci) -> str:
    if v is None:
        return "—"
    if ci and ci[0] is not None:
        return f"{v:.4f} [{ci[0]:.4f}, {ci[1]:.4f}]"
    return f"{v:.4f}"


def calibration_sections(
    cal: dict, y: Optional[np.ndarray] = None, s: Optional[np.ndarray] = None, *, positive: str = "positive"
) -> list:
    """HTML sections of a calibration (``fit_calibration`` output, or an applied one from ``evaluate
    --calibration``): threshold with its interval, before/after table, reliability diagram."""
    level = int(round(100 * cal.get("ci_level", 0.95)))
    before, after = cal.get("before") or {}, cal.get("after") or {}
    after_label = cal.get("after_label", "after")
    rows = []
    for key, name in (
        ("balanced_accuracy", "balanced accuracy"),
        ("ece", f"ECE ({cal.get('n_bins', 10)} bins)"),
        ("brier", "Brier score"),
        ("predicted_positive_share", f"share predicted {positive}"),
    ):
        rows.append(
            [name, _ci_text(before.get(key), before.get(f"{key}_ci")), _ci_text(after.get(key), after.get(f"{key}_ci"))]
        )
    thr = cal["threshold"]
    rule, target = cal.get("rule", ""), cal.get("target")
    about = [
        ["threshold on the raw score", _ci_text(thr, cal.get("threshold_ci"))],
        ["rule", rule if target is None else f"{rule} (target {target})"],
        ["probability map", (cal.get("map") or {}).get("method")],
        ["calibrated probability at the threshold", cal.get("threshold_probability")],
    ]
    if cal.get("auc") is not None:
        about.append(["AUC of the raw score", cal.get("auc")])
    out = [
        "<h2>Calibration</h2>",
        f"<p class='meta'>{level}% percentile bootstrap intervals in brackets. Before: the raw score at threshold "
        f"{before.get('threshold', 0.5):g}, read as a probability.</p>",
        table_html(["", "value"], about),
        table_html(["measure", f"before (score >= {before.get('threshold', 0.5):g})", after_label], rows),
    ]
    if cal.get("note"):
        out.append(f'<p class="warn">{html.escape(str(cal["note"]))}</p>')
    figs = [_reliability_svg(dict(cal, after_label=after_label))]
    if y is not None and s is not None:
        figs.append(
            _threshold_svg(
                np.asarray(y), np.asarray(s, dtype=np.float64), positive, thr, float(before.get("threshold", 0.5))
            )
        )
    out.append("<div class='figs'>" + "".join(figs) + "</div>")
    return out


def _provenance(meta: dict) -> tuple[list, bool]:
    """Rows describing how the scores were made (from the scoring run's metadata) and whether the judge
    was the bundled smoke-test one."""
    cfg = meta.get("config") or {}
    models = meta.get("models") or {}
    rows = [["method", cfg.get("method")]]
    judge = models.get("judge") or {}
    smoke = False
    if judge:
        how = ", ".join(str(judge[k]) for k in ("backend", "device", "dtype") if judge.get(k))
        rows.append(["judge", f"{judge.get('model')} ({how})"])
        smoke = "bundled:SmolLM2" in str(judge.get("model"))
        jc = cfg.get("judge") or {}
        rows.append(["judge mode", f"{jc.get('output_mode')}, {jc.get('granularity')} granularity"])
    enc = models.get("encoder") or {}
    if enc:
        rows.append(["encoder", enc.get("name") or enc.get("path")])
    rows.append(["threshold", cfg.get("threshold")])
    if cfg.get("strict_mode") or cfg.get("session_mode", "mean") != "mean":
        rows.append(["sessions", f"{cfg.get('session_mode', 'mean')}{', strict' if cfg.get('strict_mode') else ''}"])
    inputs = meta.get("inputs") or []
    if inputs:
        rows.append(["scored input", inputs[0].get("path")])
    summary = meta.get("summary") or {}
    if summary:
        rows.append(
            [
                "scoring run",
                f"{summary.get('turns')} turns: ok {summary.get('ok')}, error {summary.get('error')}, "
                f"unscored {summary.get('unscored')}",
            ]
        )
    rows.append(["adherence", (meta.get("versions") or {}).get("adherence") or meta.get("package_version")])
    return [r for r in rows if r[1] is not None], smoke


def _confusion_html(conf: dict, positive: str) -> str:
    head = ["", f"predicted {positive}", f"predicted not {positive}"]
    return table_html(
        head, [[f"true {positive}", conf["tp"], conf["fn"]], [f"true not {positive}", conf["fp"], conf["tn"]]]
    )


def evaluation_html(
    result: dict,
    labels: Sequence,
    scores: Sequence,
    *,
    title: str = "adherence evaluate",
    meta: Optional[dict] = None,
    calibration: Optional[dict] = None,
) -> str:
    """Render an evaluation (``evaluate_table`` output) with its kept rows' labels and scores.

    ``meta``: the scoring run's metadata (``<scores>.meta.json``), shown as where the scores came from.
    ``calibration``: a calibration's before/after (``fit_calibration`` or ``evaluate --calibration``), shown
    with its reliability diagram.
    """
    names = np.asarray(labels, dtype=object)
    s = np.asarray(scores, dtype=np.float64)
    positive = result["positive"]
    y = (names == positive).astype(np.int8)
    ci = result.get("ci", {})
    rows = []
    for m in EVALUATION_METRICS:
        if m in result:
            low, high = ci.get(m) or [None, None]
            rows.append([m, result[m], low, high, result["undefined"].get(m, "")])
    counts = [
        ["rows", result["n_rows"]],
        ["evaluated", result["n"]],
        [f"positive ({positive})", result["n_positive"]],
        ["negative", result["n_negative"]],
        ["unscored (no score)", result["n_unscored"]],
        ["unlabeled", result["n_unlabeled"]],
    ]
    level = int(round(100 * result.get("ci_level", 0.95)))
    sections = []
    fitted = (calibration or {}).get("file")  # this page is `adherence calibrate`'s, and this is its file
    if meta:
        about, smoke = _provenance(meta)
        if smoke:
            threshold_advice = (
                "apply the threshold fitted here with <code>--calibration</code>"
                if fitted
                else "fit a threshold on labelled turns with <code>adherence calibrate</code>"
            )
            sections.append(
                '<p class="warn">These scores come from the bundled SmolLM2-135M-Instruct, a smoke-test '
                "judge that shows the pipeline works but cannot judge: its P(yes) stays between about "
                "0.1 and 0.55 on every turn (AUC 0.45 and 0.70 on the bundled examples), so at the "
                "default threshold 0.5 nearly every turn reads as a violation. Score with "
                f"<code>--judge-model</code> for real results, {threshold_advice}, or, where reference "
                "replies exist, use <code>--method cosine</code> or <code>bertscore</code>.</p>"
            )
        sections += ["<h2>Where the scores come from</h2>", table_html(["what", "value"], about)]
    else:
        sections.append('<p class="meta">No run metadata beside the input: method and models unknown.</p>')
    sections += [
        "<h2>Summary</h2>",
        table_html(["count", "value"], counts),
        table_html(["metric", "value", f"{level}% CI low", f"{level}% CI high", "undefined because"], rows),
    ]
    if result.get("note"):
        sections.append(f'<p class="warn">{html.escape(str(result["note"]))}</p>')
    sections += _baseline_sections(result.get("baselines"))
    if calibration:
        sections += calibration_sections(calibration, y, s, positive=positive)
    if result.get("confusion"):
        sections += [
            f"<h2>Confusion matrix ({html.escape(str(result.get('prediction_column')))})</h2>",
            _confusion_html(result["confusion"], positive),
        ]
    figs = [_roc_svg(y, s, result.get("auc")), _hist_svg(y, s, positive)]
    if len(set(names.tolist())) > 2:
        figs.append(_by_label_svg(names, s, positive))
    sections.append("<h2>Figures</h2><div class='figs'>" + "".join(figs) + "</div>")
    by = result.get("by_label", {})
    sections.append("<h2>Scores per label</h2>")
    sections.append(
        table_html(
            ["label", "n", "mean", "median", "std"],
            [[k, v["n"], v["mean"], v["median"], v["std"]] for k, v in by.items()],
        )
    )
    sections += _what_next(result, fitted, (calibration or {}).get("apply_command"))
    sub = (
        f"input {result.get('input')}: score column {result['score_column']!r} against label column "
        f"{result['label_column']!r}, positive = {positive!r}"
    )
    return page(title, sections, sub)


def _baseline_sections(b: Optional[dict]) -> list:
    """The score beside trivial baselines on the same rows (reply length, word overlap), and what it adds."""
    if not b:
        return []
    rows = [["the score", b["score_auc"]]] + [[k.replace("_", " "), v] for k, v in b["auc"].items()]
    out = [
        "<h2>Beside trivial baselines</h2>",
        "<p>The same labelled rows ranked by what needs no model: the reply's length in words, and the share of "
        "its words found in the role and in the user message. A logistic model on the baselines alone, and on "
        f"the baselines with the score ({b['folds']}-fold cross-validated), says what the score adds to them.</p>",
        table_html(["ranked by", "AUC"], rows),
        table_html(
            ["model", "cross-validated AUC"],
            [["baselines alone", b["cv_auc_baselines"]], ["baselines + the score", b["cv_auc_with_score"]]],
        ),
    ]
    if b.get("note"):
        out.insert(1, f'<p class="warn">{html.escape(b["note"])}</p>')
    return out


def _what_next(result: dict, fitted: Optional[str], apply_command: Optional[str] = None) -> list:
    """The commands that apply, check or drill into what the page shows, each as it runs (the labels file the
    page was made with included); what needs a file this page cannot name is said in words."""
    import shlex

    scores = html.escape(shlex.quote(str(result.get("input") or "SCORES")))
    labels_file = (result.get("labels") or {}).get("file")
    with_labels = f" --labels {html.escape(shlex.quote(str(labels_file)))}" if labels_file else ""
    if fitted:
        cal = html.escape(shlex.quote(str(fitted)))
        apply = (
            f"<code>{html.escape(apply_command)}</code>"
            if apply_command
            else f"score with the same method or judge and <code>--calibration {cal}</code>"
        )
        steps = [
            f"Apply it when scoring: {apply} &mdash; its threshold decides <code>prediction</code>, and "
            "<code>calibrated_score</code> holds the mapped probability.",
            "Check it on labelled turns it was not fitted on: evaluate their scores with "
            f"<code>--calibration {cal}</code> (on these turns it would be measured on its own training labels).",
        ]
    else:
        steps = [
            f"Fit a decision threshold and a probability map on these labels: <code>adherence calibrate {scores}"
            f"{with_labels} -o calibration.json --html calibration.html</code>.",
            f"The metrics as JSON: <code>adherence evaluate {scores}{with_labels} --json</code>; the scores table "
            "holds each turn's <code>status</code>, <code>error</code> and <code>reason</code>.",
        ]
    return ["<h2>What next</h2>", "<ul>" + "".join(f"<li>{s}</li>" for s in steps) + "</ul>"]


def write_evaluation_html(path: Union[str, os.PathLike], *args: Any, **kwargs: Any) -> Path:
    """``evaluation_html(*args, **kwargs)`` written through the one owner-checked writer (never onto the
    ``inputs`` keyword's paths); returns the path."""
    from ..engine import write_owned

    inputs = kwargs.pop("inputs", ())
    write_owned(path, evaluation_html(*args, **kwargs), what="the HTML page", inputs=inputs)
    return Path(path)
