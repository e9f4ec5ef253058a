"""The fine-tuned learner of ``adherence classifier fit --learner fine-tuned``: the encoder itself learns the user's
labels before the classifier's head is fit over its features.

How (SetFit's recipe, Tunstall et al. 2022, trained by sentence-transformers' own trainer and loss): pairs of
labelled replies, each reply beside one of its own class (target cosine 1) and one of the other class (target 0),
``pairs_per_turn`` rounds of them, one epoch of ``CosineSimilarityLoss``; then the classifier's usual features
(``classifier_features``) over the tuned encoder and the usual ridge-logistic head (``fit_classifier``).

Nothing it learned from is graded as held out: the labelled turns are dealt into folds with conversations kept whole,
and for each fold an encoder is tuned and a head fit on the other folds only, which score that fold (the out-of-fold
scores the threshold is chosen on and the file records); the encoder and head kept are then tuned and fit on every
label. So a fit tunes ``folds + 1`` encoders. The fold encoders are not kept: a training turn met again is given its
recorded out-of-fold score, and a cross-fitted estimate (which needs every fold model over every turn) is not offered
for this learner's scores (``adherence estimate`` says so and estimates on the labels it did not see).

The tuned encoder travels beside the classifier file as one tar file (``CLF.json.encoder.tar``: the checkpoint,
tokenizer and pooling, float32) whose sha256 the classifier file records; scoring unpacks it once into the user's
cache (``models._onnx.cache_dir()/tuned/<digest>``) and runs it as any local checkpoint, through the encoder's
runtimes (float32 exact; bf16 / int8 fast paths).
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, NamedTuple, Optional, Union

import numpy as np

from .._errors import OptionError

__all__ = [
    "LEARNERS",
    "FineTuning",
    "TunedFit",
    "fine_tune_encoder",
    "fine_tuned_classifier",
    "fit_fine_tuned",
    "length_grouped_steps",
    "require_tuning",
    "training_pairs",
]

#: ``classifier fit --learner``: the head over the bundled encoder as it is, or over the encoder tuned on the labels
LEARNERS = ("frozen", "fine-tuned")
#: steps of pairs sorted together by length before they are shuffled (``length_grouped_steps``)
GROUP_STEPS = 8
#: what tuning imports (the ``finetune`` extra): the trainer, its datasets and accelerate, which the trainer needs
NEEDS = ("sentence_transformers", "datasets", "accelerate")


def require_tuning() -> None:
    """Each module the fine-tuned learner imports, or a one-line error naming the extra (checked before any work)."""
    from .._optional import require

    for module in NEEDS:
        require(module, "finetune", "classifier fit --learner fine-tuned")


@dataclass(frozen=True)
class FineTuning:
    """How the encoder is tuned (recorded in the classifier file).

    Attributes:
        pairs_per_turn: rounds of pairs; each round pairs every labelled reply with one of its class and one of the
            other class.
        epochs: passes over the pairs.
        batch_size: pairs per step.
        learning_rate: AdamW's peak rate (linear warm-up over the first tenth, then linear decay).
        max_length: tokens of a reply read while tuning (the tuned encoder keeps the base's limit when scoring).
    """

    pairs_per_turn: int = 2
    epochs: int = 1
    batch_size: int = 16
    learning_rate: float = 2e-5
    max_length: int = 128

    def __post_init__(self) -> None:
        for name in ("pairs_per_turn", "epochs", "batch_size", "max_length"):
            if int(getattr(self, name)) < 1:
                raise OptionError(f"fine-tuning's {name} must be >= 1, got {getattr(self, name)}")
        if not 0 < self.learning_rate < 1:
            raise OptionError(f"fine-tuning's learning_rate must be in (0, 1), got {self.learning_rate}")


def training_pairs(replies: list, y: np.ndarray, pairs_per_turn: int, seed: int) -> tuple:
    """``(first, second, target)``: each reply beside a random reply of its class (target 1.0) and one of the other
    class (0.0), ``pairs_per_turn`` times over."""
    pick = random.Random(seed)
    y = np.asarray(y)
    pos, neg = np.flatnonzero(y == 1).tolist(), np.flatnonzero(y == 0).tolist()
    if not pos or not neg:
        raise OptionError("fine-tuning needs labelled turns of both classes")
    s1: list = []
    s2: list = []
    target: list = []
    for _ in range(pairs_per_turn):
        for i in range(len(y)):
            same, other = (pos, neg) if y[i] == 1 else (neg, pos)
            for j, v in ((pick.choice(same), 1.0), (pick.choice(other), 0.0)):
                s1.append(replies[i])
                s2.append(replies[j])
                target.append(v)
    return s1, s2, target


def length_grouped_steps(lengths: np.ndarray, batch_size: int, seed: int, group: int = GROUP_STEPS) -> list:
    """One epoch's steps (lists of pair indices): the pairs shuffled, dealt into groups of ``group`` steps, each group
    sorted by ``lengths`` (a pair's longer text, in tokens) and cut into steps, and the steps shuffled. Each pair's
    loss is its own, so this draws steps as randomly as a plain shuffle for the loss while padding each step to
    lengths alike: on the bundled logs' replies (5 to 70 tokens) a quarter fewer tokens pass through the encoder."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(lengths))
    steps: list = []
    for start in range(0, len(order), batch_size * group):
        chunk = order[start : start + batch_size * group]
        chunk = chunk[np.argsort(np.asarray(lengths)[chunk], kind="stable")]
        steps.extend(chunk[i : i + batch_size].tolist() for i in range(0, len(chunk), batch_size))
    return [steps[i] for i in rng.permutation(len(steps))]


def fine_tune_encoder(
    base: str, replies: list, y: np.ndarray, *, tuning: FineTuning, seed: int, out_dir: os.PathLike,
    say: Optional[Callable[[str], None]] = None,
) -> Path:  # fmt: skip
    """Tune the sentence-transformers checkpoint at ``base`` on pairs of ``replies`` (``training_pairs``) and save
    it at ``out_dir`` (float32, with the base's token limit); returns ``out_dir``. ``say``: given, it hears the step
    reached every 10 s or so (the trainer's own bars and printed metrics are off)."""
    require_tuning()
    import torch
    import transformers
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )

    try:  # sentence-transformers >= 6 moved the losses
        from sentence_transformers.sentence_transformer.losses import CosineSimilarityLoss
    except ImportError:  # pragma: no cover - older releases
        from sentence_transformers.losses import CosineSimilarityLoss  # type: ignore[import-not-found]

    from sentence_transformers.base.sampler import DefaultBatchSampler
    from transformers import PrinterCallback, TrainerCallback

    from ..models import quiet_loading

    class Trainer(SentenceTransformerTrainer):
        def add_model_card_callback(self, default_args_dict) -> None:
            """No model card: its widget examples are computed from the data with a bar of their own."""

    class Steps(TrainerCallback):
        def __init__(self) -> None:
            self.last = time.monotonic()

        def on_step_end(self, args, state, control, **kwargs):
            if say is not None and time.monotonic() - self.last >= 10:
                self.last = time.monotonic()
                say(f"  step {state.global_step} of {state.max_steps}")

    class LengthGrouped(DefaultBatchSampler):
        """The trainer's batch sampler: ``length_grouped_steps``, a new deal each epoch."""

        def __iter__(self):
            yield from length_grouped_steps(tokens, self.batch_size, seed + self.epoch)

        def __len__(self) -> int:
            return -(-len(tokens) // self.batch_size)

    transformers.logging.set_verbosity_error()
    s1, s2, target = training_pairs(replies, y, tuning.pairs_per_turn, seed)
    torch.manual_seed(seed)
    with quiet_loading():
        model = SentenceTransformer(str(base), device="cpu")
    limit = model.max_seq_length
    model.max_seq_length = min(int(tuning.max_length), int(limit or tuning.max_length))
    texts = sorted(set(s1) | set(s2))
    count = {t: min(len(ids), model.max_seq_length) for t, ids in zip(texts, model.tokenizer(texts)["input_ids"])}
    # the loss is symmetric in a pair: its longer text goes first, so each step's first column pads to its key
    s1, s2 = map(list, zip(*((a, b) if count[a] >= count[b] else (b, a) for a, b in zip(s1, s2))))
    tokens = np.array([count[a] for a in s1])
    with tempfile.TemporaryDirectory(prefix="adherence-finetune-") as work:
        args = SentenceTransformerTrainingArguments(
            output_dir=work, report_to=[], save_strategy="no", logging_strategy="no", disable_tqdm=True,
            learning_rate=tuning.learning_rate, warmup_steps=0.1, num_train_epochs=tuning.epochs,
            per_device_train_batch_size=tuning.batch_size, seed=seed, data_seed=seed, use_cpu=True,
            batch_sampler=LengthGrouped,
        )  # fmt: skip
        trainer = Trainer(
            model=model,
            args=args,
            train_dataset=Dataset.from_dict({"sentence1": s1, "sentence2": s2, "score": target}),
            loss=CosineSimilarityLoss(model),
            callbacks=[Steps()],
        )
        trainer.remove_callback(PrinterCallback)  # it prints the run's metrics as a dict
        trainer.train()
    model.max_seq_length = limit
    out = Path(out_dir)
    with quiet_loading():
        model.save(str(out), safe_serialization=True)
    return out


def fit_fine_tuned(
    base: str,
    roles: list,
    users: list,
    replies: list,
    y: np.ndarray,
    *,
    groups,
    folds: int,
    seed: int,
    l2: float,
    tuning: FineTuning,
    workdir: Union[str, os.PathLike],
    target_recall: Optional[float] = None,
    max_false_flags: Optional[float] = None,
    say: Callable[[str], None] = lambda s: print(s, file=sys.stderr),
    progress: bool = False,
) -> tuple:
    """Tune ``folds`` encoders and heads on all folds but one (each scoring its held-out fold), then the kept encoder
    and head on every label; the decision threshold and the cross-validated AUC come from the held-out scores.

    Returns ``(fit, encoder_dir, seconds)``: ``fit`` as ``fit_classifier`` returns it for the kept head, with ``cv``
    (``oof``, ``fold``, ``auc``), ``folds`` (each fold's head, over its own fold encoder's features) and ``decision``
    replaced by the held-out ones; ``encoder_dir`` the kept encoder under ``workdir``."""
    from ..models import Encoder
    from ..stats import roc_auc_score
    from ._classifier import (
        classifier_features,
        classifier_folds,
        decision_threshold,
        fit_classifier,
        model_probability,
    )

    y = np.asarray(y, dtype=np.int8)
    groups = np.asarray([str(g) for g in groups])
    fold, grouped = classifier_folds(y, groups, folds, seed)
    inner = max(2, min(folds, 5))
    oof = np.empty(len(y))
    heads = []
    started = time.perf_counter()

    def tuned(rows: np.ndarray, name: str, step: int) -> tuple:
        t0 = time.perf_counter()
        say(
            f"fine-tuning the encoder {step} of {folds + 1} ({name}: {len(rows)} labelled turns, "
            f"{2 * tuning.pairs_per_turn * len(rows)} pairs) ..."
        )
        path = fine_tune_encoder(
            base, [replies[i] for i in rows], y[rows], tuning=tuning, seed=seed + step,
            out_dir=Path(workdir) / name, say=say if progress else None,
        )  # fmt: skip
        enc = Encoder(str(path), device="cpu", runtime="torch", progress=False, cache_bytes=0)
        x = classifier_features(enc, roles, users, replies)
        say(f"  done in {time.perf_counter() - t0:.0f} s ({time.perf_counter() - started:.0f} s so far)")
        return path, x

    for k in range(folds):
        train = np.flatnonzero(fold != k)
        path, x = tuned(train, f"fold-{k}", k + 1)
        head = fit_classifier(
            x[train], y[train], groups=groups[train], l2=l2, folds=min(inner, _most_folds(y[train])), seed=seed
        )
        oof[fold == k] = model_probability(head, x[fold == k])
        heads.append({key: head[key] for key in ("mean", "scale", "coef", "intercept")})
        shutil.rmtree(path, ignore_errors=True)  # a fold encoder is not kept (see the module docs)
    path, x = tuned(np.arange(len(y)), "encoder", folds + 1)
    fit = fit_classifier(x, y, groups=groups, l2=l2, folds=folds, seed=seed)
    auc = float(roc_auc_score(y, oof))
    fit["folds"] = heads
    fit["cv"] = {
        "folds": folds,
        "seed": seed,
        "grouped": grouped,
        "auc": auc,
        "oof": oof.tolist(),
        "fold": fold.tolist(),
        "by_shrink": {},
        "head_only_auc": fit["cv"]["auc"],
    }
    fit["decision"] = decision_threshold(y, oof, target_recall=target_recall, max_false_flags=max_false_flags)
    return fit, path, time.perf_counter() - started


class TunedFit(NamedTuple):
    """What ``fine_tuned_classifier`` returns: the fit, the tuned encoder (loaded; its checkpoint is gone once the fit
    returns), that checkpoint's ``encoder_digest`` (computed while it was on disk), the file's ``learner`` record and
    the tuned encoder's tar."""

    fit: dict
    encoder: Any
    digest: str
    learner: dict
    packed: bytes


def fine_tuned_classifier(encoder, roles: list, users: list, replies: list, y: np.ndarray, **fit) -> TunedFit:
    """``fit_fine_tuned`` from a loaded base ``encoder`` as ``classifier fit`` runs it."""
    from ..models import Encoder
    from ._classifier_file import encoder_digest, pack_encoder

    tuning = fit.pop("tuning")
    with tempfile.TemporaryDirectory(prefix="adherence-classifier-") as work:
        result, tuned_dir, seconds = fit_fine_tuned(
            str(encoder.resolved.path), roles, users, replies, y, tuning=tuning, workdir=work, **fit
        )
        base = {"name": encoder.describe().get("name"), "digest": encoder_digest(encoder)}
        tuned = Encoder(str(tuned_dir), device="cpu", runtime="torch", progress=False)
        digest = encoder_digest(tuned)
        packed = pack_encoder(tuned_dir)
    learner = describe_tuning(tuning, seconds, base)
    learner["encoder_file_digest"] = "sha256:" + hashlib.sha256(packed).hexdigest()
    return TunedFit(result, tuned, digest, learner, packed)


def _most_folds(y: np.ndarray) -> int:
    """The most folds a head's inner check can have on these labels (each class in every fold)."""
    return max(2, min(int(y.sum()), int(len(y) - y.sum())))


def describe_tuning(tuning: FineTuning, seconds: float, base: dict) -> dict:
    """The classifier file's ``learner`` record of a fine-tuned fit (the encoder file is added by the writer)."""
    import sentence_transformers

    return {
        "name": "fine-tuned",
        "tuning": asdict(tuning),
        "library": f"sentence-transformers {sentence_transformers.__version__}",
        "base_encoder": base,
        "fit_seconds": round(float(seconds), 1),
    }
