"""Verdict stability and reasoning stability of repeated judge runs.

Verdict stability, per question: a subjects (artifacts) x raters (runs) matrix
of Yes/No answers -> percent agreement, Gwet's AC1, Fleiss' kappa (imputed 1.0
and flagged when undefined). Score volatility, per artifact: S_i(run) = yes /
answered, and its standard deviation over runs. Reasoning stability, per
question and artifact: the k justifications are fingerprinted (numeric: the
primary integer; quote: the quoted substrings; assertion: the words without
stop words and punctuation), embedded with a sentence encoder and clustered by
DBSCAN on cosine distance (eps 0.05, min_samples 1, so a lone point is its own
cluster); R_stab is the dominant cluster's share, over (question, artifact)
pairs with at least two justifications. Results are stratified by
judge x generator and macro-averaged over strata.
"""

from __future__ import annotations

import re
import string
from typing import Any, Optional, Sequence

import numpy as np
import pyarrow as pa

from .._errors import OptionError
from ..stats import UndefinedMetricError, agreement

__all__ = ["fingerprint", "choose_strategy", "dbscan_cosine", "dominant_share", "stability_tables", "STRATEGIES"]

STRATEGIES = ("numeric", "quote", "assertion")
_INT = re.compile(r"(?<![\d.])-?\d+(?![\d.]*\d)")
_QUOTE = re.compile(r"\"([^\"]+)\"|“([^”]+)”|'([^']{2,})'")
_STOP = frozenset(
    "a an the and or but if of to in on at by for with from as is are was were be been being it its this that these "
    "those there here which who whom what when where why how all any both each few more most other some such no nor "
    "not only own same so than too very can will just do does did has have had having i me my we our you your he him "
    "his she her they them their output".split()
)


def fingerprint(justification: Optional[str], strategy: str) -> Optional[str]:
    """The part of a justification that should not change between stable runs."""
    if justification is None:
        return None
    if strategy == "numeric":
        m = _INT.search(justification)
        return m.group(0) if m else justification.strip().casefold()
    if strategy == "quote":
        quotes = sorted({next(g for g in m.groups() if g).strip() for m in _QUOTE.finditer(justification)})
        return " | ".join(quotes) if quotes else justification.strip().casefold()
    if strategy == "assertion":
        words = (
            justification.casefold().translate(str.maketrans(string.punctuation, " " * len(string.punctuation))).split()
        )
        return " ".join(w for w in words if w not in _STOP)
    raise OptionError(f"unknown fingerprint strategy {strategy!r}; available: {', '.join(STRATEGIES)}")


def choose_strategy(justifications: Sequence[Optional[str]], share: float = 0.6) -> str:
    """numeric when most justifications carry an integer, else quote when most quote, else assertion."""
    texts = [j for j in justifications if j]
    if not texts:
        return "assertion"
    if np.mean([bool(_INT.search(t)) for t in texts]) >= share:
        return "numeric"
    if np.mean([bool(_QUOTE.search(t)) for t in texts]) >= share:
        return "quote"
    return "assertion"


def dbscan_cosine(embeddings: np.ndarray, eps: float = 0.05) -> np.ndarray:
    """DBSCAN labels with cosine distance and min_samples=1: connected components of the eps-graph."""
    x = np.asarray(embeddings, dtype=np.float64)
    n = len(x)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    xn = np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)
    adj = (1.0 - xn @ xn.T) <= eps + 1e-12
    labels = np.full(n, -1, dtype=np.int64)
    current = 0
    for start in range(n):
        if labels[start] >= 0:
            continue
        stack = [start]
        labels[start] = current
        while stack:
            i = stack.pop()
            for j in np.flatnonzero(adj[i] & (labels < 0)):
                labels[j] = current
                stack.append(int(j))
        current += 1
    return labels


def dominant_share(labels: np.ndarray) -> float:
    """Share of points in the largest cluster."""
    if len(labels) == 0:
        return float("nan")
    return float(np.bincount(labels).max() / len(labels))


def _matrix(rows: list, artifacts: list, runs: list) -> np.ndarray:
    m = np.full((len(artifacts), len(runs)), None, dtype=object)
    a_idx = {a: i for i, a in enumerate(artifacts)}
    r_idx = {r: j for j, r in enumerate(runs)}
    for r in rows:
        if r["run"] in r_idx:
            m[a_idx[r["artifact"]], r_idx[r["run"]]] = r["answer"]
    return m


def stability_tables(
    judgments: pa.Table,
    encoder,
    *,
    ks: Optional[Sequence[int]] = None,
    eps: float = 0.05,
    strategy: Optional[dict] = None,
) -> dict:
    """Per-question verdict and reasoning stability for each k (first k runs) and pooled, and per-artifact volatility.

    Stability is the judge's: it is computed for judge-answered questions only, per judge x
    generator stratum and macro-averaged. Code-answered questions are deterministic (the same
    answer every run by construction) and get their answer counts and yes-rate, no stability
    statistic. Returns a JSON-ready dict with ``questions`` (question_id -> source, answers,
    unscored, yes_rate, and for judge questions {k: metrics} and unscored per judge),
    ``pooled`` ({k: means over judge questions}), ``artifacts`` (per judge, generator and
    artifact: S_i over code + judge answers per run, mean and std), ``judges`` and ``strata``.
    """
    rows = judgments.to_pylist()
    all_runs = sorted({r["run"] for r in rows})
    ks = sorted(set(ks or [len(all_runs)]))
    if max(ks) > len(all_runs):
        raise OptionError(f"k = {max(ks)} exceeds the {len(all_runs)} runs in the judgments")
    judge_rows = [r for r in rows if r["source"] == "judge"]
    judges = sorted({r["judge"] for r in judge_rows})
    strata = sorted({(r["judge"], r["generator"]) for r in judge_rows})
    questions = list(dict.fromkeys(r["question_id"] for r in rows))
    source = {r["question_id"]: r["source"] for r in rows}
    strategy = dict(strategy or {})
    by: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in judge_rows:
        by.setdefault((r["judge"], r["generator"], r["question_id"]), []).append(
            {"artifact": r["artifact_id"], "run": r["run"], "answer": r["answer"], "justification": r["justification"]}
        )
    judged_q = [q for q in questions if source[q] == "judge"]
    # Fingerprint strategy per judge-answered question, from all its justifications unless overridden.
    for q in judged_q:
        if q not in strategy:
            strategy[q] = choose_strategy([r["justification"] for r in judge_rows if r["question_id"] == q])
    # Embed every distinct fingerprint once.
    fps: dict[str, None] = {}
    for (_, _, q), items in by.items():
        for it in items:
            it["fp"] = fingerprint(it["justification"], strategy[q])
            if it["fp"] is not None:
                fps.setdefault(it["fp"], None)
    texts = list(fps)
    emb = encoder.encode(texts).cpu().numpy() if texts else np.zeros((0, 1))
    vec = {t: emb[i] for i, t in enumerate(texts)}

    result_q: dict = {}
    for q in questions:
        answers = [r["answer"] for r in rows if r["question_id"] == q]
        given = [a for a in answers if a is not None]
        result_q[q] = {
            "source": source[q],
            "answers": len(answers),
            "unscored": len(answers) - len(given),
            "yes_rate": (sum(a == "Yes" for a in given) / len(given)) if given else None,
        }
        if source[q] == "code":
            # Deterministic code: the same answer on every run by construction, so no stability statistic.
            result_q[q]["strategy"] = None
            continue
        result_q[q]["strategy"] = strategy[q]
        result_q[q]["unscored_by_judge"] = {
            j: sum(1 for r in judge_rows if r["question_id"] == q and r["judge"] == j and r["answer"] is None)
            for j in judges
        }
        for k in ks:
            runs = all_runs[:k]
            per_stratum = []
            for j, g in strata:
                items = [it for it in by.get((j, g, q), []) if it["run"] in runs]
                if not items:
                    continue
                artifacts = sorted({it["artifact"] for it in items})
                m = _matrix(items, artifacts, runs)
                entry: dict[str, Any] = {}
                try:
                    a = agreement(m)
                    entry.update(
                        percent_agreement=a.percent_agreement,
                        gwet_ac1=a.gwet_ac1,
                        fleiss_kappa=a.fleiss_kappa,
                        fleiss_imputed=a.fleiss_imputed,
                    )
                except UndefinedMetricError:
                    entry.update(percent_agreement=None, gwet_ac1=None, fleiss_kappa=None, fleiss_imputed=None)
                shares = []
                for art in artifacts:
                    pts = [vec[it["fp"]] for it in items if it["artifact"] == art and it["fp"] is not None]
                    if len(pts) >= 2:  # one justification is trivially "stable": it says nothing
                        shares.append(dominant_share(dbscan_cosine(np.stack(pts), eps)))
                entry["r_stab"] = float(np.mean(shares)) if shares else None
                per_stratum.append(entry)
            result_q[q][f"k={k}"] = _macro(per_stratum)
    pooled = {}
    for k in ks:  # the judge's stability: judge-answered questions only
        pooled[f"k={k}"] = _macro([result_q[q][f"k={k}"] for q in judged_q])
    artifacts_out = []
    generators = sorted({r["generator"] for r in rows})
    for j in judges or [None]:  # an artifact's score: its code answers and this judge's answers
        for g in generators:
            mine = [r for r in rows if r["generator"] == g and (r["source"] == "code" or r["judge"] == j)]
            for art in sorted({r["artifact_id"] for r in mine}):
                s = []
                for run in all_runs:
                    answers = [
                        r["answer"]
                        for r in mine
                        if r["artifact_id"] == art and r["run"] == run and r["answer"] is not None
                    ]
                    s.append(sum(a == "Yes" for a in answers) / len(answers) if answers else None)
                vals = np.array([v for v in s if v is not None], dtype=float)
                artifacts_out.append(
                    {
                        "judge": j or "code",
                        "generator": g,
                        "artifact_id": art,
                        "s_per_run": s,
                        "mean": float(vals.mean()) if len(vals) else None,
                        "std": float(vals.std(ddof=1)) if len(vals) > 1 else None,
                    }
                )
    return {
        "ks": ks,
        "strata": [list(s) for s in strata],
        "judges": judges,
        "questions": result_q,
        "pooled": pooled,
        "artifacts": artifacts_out,
        "eps": eps,
    }


def _macro(entries: list) -> dict:
    keys = ("percent_agreement", "gwet_ac1", "fleiss_kappa", "r_stab")
    out = {}
    for key in keys:
        vals = [e[key] for e in entries if e.get(key) is not None]
        out[key] = float(np.mean(vals)) if vals else None
    out["fleiss_imputed"] = any(e.get("fleiss_imputed") for e in entries)
    out["n"] = len(entries)
    return out
