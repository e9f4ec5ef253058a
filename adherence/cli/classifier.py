"""``adherence classifier fit INPUT --labels LABELS -o CLF.json``: a regularised logistic model over the bundled
encoder's features, trained on the user's labels with both classes weighed equally, measured out of fold (whole
conversations held out) beside the trivial baselines, with a decision threshold chosen on those out-of-fold scores."""

from __future__ import annotations

import argparse
import sys

from .._errors import OptionError
from .._options import add_arguments, file_path, model_name
from ..role import LEARNERS, FineTuning, encoder_file_of, fine_tuned_classifier, require_tuning
from ._labelled import LabelledOptions
from .main import Command


def format_fit(doc: dict, n: int, n_pos: int) -> str:
    """The out-of-fold AUC beside the trivial baselines', and what the decision threshold will do on new turns."""
    cv = doc["cv"]
    b = cv.get("baselines") or {}
    how = (
        "conversations kept whole"
        if cv.get("grouped")
        else "turns dealt into folds: too few conversations hold a violation to keep them whole"
    )
    tuned = (doc.get("learner") or {}).get("name") == "fine-tuned"
    if tuned:
        how += f"; each fold scored by an encoder tuned without it, {doc['learner']['fit_seconds']:.0f} s in all"
    lines = [
        f"classifier{' (encoder fine-tuned on the labels)' if tuned else ''} on {n} labelled turns ({n_pos} adherent, "
        f"{n - n_pos} violation): {cv['folds']}-fold out-of-fold AUC {cv['auc']:.4f} ({how})",
    ]
    if b:
        aucs = "  ".join(f"{k.replace('_', ' ')} {v:.4f}" for k, v in b["auc"].items())
        lines += [
            f"trivial baselines on the same turns (AUC): {aucs}",
            f"  {cv['folds']}-fold logistic on the baselines alone {b['cv_auc_baselines']:.4f}; the classifier's gain "
            f"over it {cv['auc'] - b['cv_auc_baselines']:+.4f}",
        ]
    d = doc["decision"]
    r = d["out_of_fold"]
    goal = {
        "balanced_accuracy": "best balanced accuracy",
        "violation_recall": f"catch >= {d.get('target_recall') or 0:.0%} of violations",
        "false_flag_cap": f"flag <= {d.get('max_false_flags') or 0:.0%} of adherent turns",
    }[d["objective"]]
    lines.append(
        f"decision: a turn with P(adherent) < {d['threshold']:.4f} is flagged ({goal}, chosen out of fold); on new "
        f"turns like these expect {r['violations_caught']:.0%} of violations caught and {r['adherent_flagged']:.0%} "
        f"of adherent turns flagged (balanced accuracy {r['balanced_accuracy']:.3f})"
    )
    for name, rates in (d.get("baselines_at_same_catch") or {}).items():
        lines.append(
            f"  {name.replace('_', ' ')} cut to catch as many would flag {rates['adherent_flagged']:.0%} of adherent turns"
        )
    return "\n".join(lines)


def baselines_at_same_catch(y, oof, threshold: float, baselines: dict) -> dict:
    """Each trivial baseline (turned its better way) cut to catch at least the classifier's share of violations
    out of fold: the share of adherent turns it would flag there."""
    import numpy as np

    from ..role import decision_rates
    from ..stats import roc_auc_score

    y = np.asarray(y, dtype=np.int8)
    caught = decision_rates(y, oof, threshold)["violations_caught"]
    out = {}
    for name, v in baselines.items():
        v = np.asarray(v, dtype=np.float64)
        s = v if roc_auc_score(y, v) >= 0.5 else -v
        viol = np.sort(s[y == 0])
        need = int(np.ceil(caught * len(viol) - 1e-9))
        if need == 0:
            continue
        cut = float(np.nextafter(viol[need - 1], np.inf))  # flag s < cut: the `need` lowest-scored violations
        out[name] = decision_rates(y, s, cut)
    return out


class ClassifierCommand(Command):
    name = "classifier"
    writes = {"fit": "the classifier file"}

    def add_args(self, p: argparse.ArgumentParser) -> None:
        sub = p.add_subparsers(dest="step", metavar="STEP", required=True)
        f = sub.add_parser("fit", help="train on labelled turns; prints its out-of-fold AUC beside the baselines")
        f.add_argument("input", type=file_path, help="the turns: a log, traces, or a score output of them")
        add_arguments(
            f, LabelledOptions, ["labels", "positive", "label_map"]
        )  # declared once, as evaluate, calibrate, estimate
        f.add_argument("-o", "--output", type=file_path, required=True, metavar="CLF.json", help="the classifier file")
        f.add_argument("--role", dest="role_text", metavar="TEXT", help="the role of every turn (logs without one)")
        f.add_argument("--encoder", type=model_name, help="encoder (default: the bundled all-MiniLM-L6-v2)")
        f.add_argument("--l2", type=float, default=1.0, help="ridge penalty on the standardised coefficients")
        f.add_argument(
            "--learner",
            choices=LEARNERS,
            default="frozen",
            help="frozen: a head over the encoder as it is (seconds); fine-tuned: the encoder tuned on the labels "
            "first (sentence-transformers' trainer; folds + 1 tunings, minutes; kept beside the file as "
            "CLF.json.encoder.tar): higher AUC on logs with on-topic violations (docs/labels.md)",
        )
        f.add_argument(
            "--pairs-per-turn",
            type=int,
            default=FineTuning.pairs_per_turn,
            metavar="N",
            help=f"--learner fine-tuned: rounds of training pairs, two per labelled reply each (default "
            f"{FineTuning.pairs_per_turn})",
        )
        f.add_argument(
            "--folds",
            type=int,
            help="folds of the out-of-fold check (default 5; 3 with --learner fine-tuned, where each fold tunes an "
            "encoder)",
        )
        f.add_argument("--seed", type=int, default=42, help="seed of the folds (default 42)")
        f.add_argument(
            "--target-recall",
            type=float,
            metavar="R",
            help="decision threshold that catches at least this share of violations out of fold, with the fewest "
            "false flags there (default: the threshold of best balanced accuracy)",
        )
        f.add_argument(
            "--max-false-flags",
            type=float,
            metavar="F",
            help="decision threshold that flags at most this share of adherent turns out of fold (e.g. 0.15), "
            "catching the most violations there (instead of --target-recall)",
        )

    def run(self, args: argparse.Namespace) -> int:
        import math

        import numpy as np

        from ..data import DataError, file_digest, read_turns
        from ..engine import check_writable, open_scores
        from ..models import Encoder
        from ..role import (
            check_objective,
            classifier_document,
            classifier_features,
            fit_classifier,
            model_digest,
            training_record,
        )
        from ..stats import baseline_report, text_baselines
        from ._common import write_result
        from ._labelled import map_labels, read_metadata, resolve_columns

        if not (args.l2 > 0 and math.isfinite(args.l2)):
            raise OptionError(f"--l2 must be a finite number > 0, got {args.l2}")
        tuned = args.learner == "fine-tuned"
        if args.folds is None:
            args.folds = 3 if tuned else 5
        if args.folds < 2:
            raise OptionError(f"--folds must be >= 2, got {args.folds}")
        check_objective(args.target_recall, args.max_false_flags)
        check_writable(args.output, what=self.output_what("fit"), inputs=[args.input, args.labels])  # before any work
        tuning = None
        if tuned:
            tuning = FineTuning(pairs_per_turn=args.pairs_per_turn)
            require_tuning()
            check_writable(encoder_file_of(str(args.output)), what=self.output_what("fit"),
                           inputs=[args.input, args.labels])  # fmt: skip
        elif args.pairs_per_turn != FineTuning.pairs_per_turn:
            raise OptionError("--pairs-per-turn goes with --learner fine-tuned")
        src = str(args.input)
        # a score output of ours through the one reader; a log (transcripts, traces, a turns table) through the turns'
        table = open_scores(args.input, score_columns=()).table if read_metadata(args.input) else read_turns(args.input)
        if args.role_text:
            import pyarrow as pa

            if "role" in table.column_names:
                table = table.drop_columns(["role"])
            table = table.append_column("role", pa.array([args.role_text] * table.num_rows, pa.string()))
        join = None
        if args.labels:
            from ..data import join_labels, read_labels

            table, join = join_labels(table, read_labels(args.labels), file=src)
            for line in join.lines():
                print(line, file=sys.stderr)
        table = map_labels(table, None, args.label_map)
        _, label, positive, _ = resolve_columns(table, None, "assistant", None, args.positive, "none", file=src)
        labels = table.column(label).to_pylist()
        rows = [i for i, v in enumerate(labels) if v is not None]
        a, r, u = (table.column(c).to_pylist() if c in table.column_names else [None] * table.num_rows
                   for c in ("assistant", "role", "user"))  # fmt: skip
        rows = [i for i in rows if a[i] and str(a[i]).strip()]
        if not rows:
            raise DataError("no labelled turn with a reply to train on", file=src, column=label)
        missing = [i for i in rows if not (r[i] and str(r[i]).strip())]
        if missing:
            raise DataError(
                "the classifier reads each turn's role (the system prompt); this turn has none: give --role",
                file=src,
                row=missing[0] + 1,
                column="role",
            )
        y = np.array([int(str(labels[i]) == str(positive)) for i in rows], dtype=np.int8)
        ra, rr, ru = [a[i] for i in rows], [r[i] for i in rows], [u[i] for i in rows]
        from ..models import language_note

        said = language_note(ra, what="labelled replies")
        if said:
            print(f"WARNING: {said}", file=sys.stderr)
        enc = Encoder(args.encoder, progress=not args.no_progress)
        cids = [str(c) for c in table.column("conversation_id").to_pylist()]
        tidx = table.column("turn_index").to_pylist()
        objective = {"target_recall": args.target_recall, "max_false_flags": args.max_false_flags}
        learner: dict = {"name": "frozen"}
        packed = digest = None
        if tuning is not None:
            fit, enc, digest, learner, packed = fine_tuned_classifier(
                enc, rr, ru, ra, y, groups=[cids[i] for i in rows], folds=args.folds, seed=args.seed, l2=args.l2,
                tuning=tuning, progress=not args.no_progress, **objective,
            )  # fmt: skip
            x_dim = enc.dim
        else:
            x = classifier_features(enc, rr, ru, ra)
            fit = fit_classifier(
                x, y, groups=[cids[i] for i in rows], l2=args.l2, folds=args.folds, seed=args.seed, **objective
            )
            x_dim = x.shape[1] - 5
        trivial = text_baselines({"assistant": ra, "role": rr, "user": ru})
        oof = np.asarray(fit["cv"]["oof"])
        base = baseline_report(y, oof, trivial, folds=args.folds, seed=args.seed)
        fit["decision"]["baselines_at_same_catch"] = baselines_at_same_catch(
            y, oof, fit["decision"]["threshold"], trivial
        )
        source = {
            "input": src,
            "labels": None if join is None else join.describe(),
            "labels_digest": file_digest(args.labels, "sha256") if args.labels else None,
            "label_column": label,
            "positive": str(positive),
            "n": len(rows),
            "n_positive": int(y.sum()),
        }
        training = training_record([cids[i] for i in rows], [tidx[i] for i in rows], ra)
        tar = encoder_file_of(str(args.output))
        if packed is not None:
            from pathlib import Path

            learner["encoder_file"] = Path(tar).name
        doc = classifier_document(
            fit, encoder=enc, dim=x_dim, source=source, baselines=base, training=training, learner=learner,
            digest=digest,
        )  # fmt: skip
        if packed is not None:
            doc["encoder"]["name"] = f"{learner['base_encoder']['name']}, fine-tuned"
            doc["digest"] = model_digest(doc)
            write_result(tar, packed, inputs=[args.input, args.labels], what=self.output_what("fit"))
        write_result(args.output, doc, inputs=[args.input, args.labels], what=self.output_what("fit"))
        print(format_fit(doc, len(rows), int(y.sum())))
        if base is not None and (not base["beats_baselines"] or fit["cv"]["auc"] <= base["cv_auc_baselines"]):
            print(
                f"WARNING: the classifier does not beat the trivial baselines on these labels: {base.get('note') or ''}"
                " -- its scores add nothing that reply length and word overlap do not already say; label more turns, "
                "or check the labels",
                file=sys.stderr,
            )
        return 0
