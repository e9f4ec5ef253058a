"""The method interface, the registry, and the row checks every method shares."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional, Union

import numpy as np
import pyarrow as pa

from .._errors import OptionError
from .._fingerprint import COSMETIC
from .._options import file_path, model_name, option
from .._registry import Registry, unknown_name
from ..models import encoder_precision_option

if TYPE_CHECKING:
    from ..judges import RoleJudge

__all__ = ["RoleConfig", "MethodResult", "Method", "METHODS", "get_method", "text_column", "missing_references"]

# name -> "module:Class"; modules load only when the method is used.
METHODS = Registry(
    "method",
    {
        "cosine": "adherence.role._embedding:CosineMethod",
        "knn": "adherence.role._embedding:KnnMethod",
        "mahalanobis": "adherence.role._embedding:MahalanobisMethod",
        "pca_mahalanobis": "adherence.role._embedding:PcaMahalanobisMethod",
        "kl": "adherence.role._lexical:KlMethod",
        "bertscore": "adherence.role._bertscore:BertScoreMethod",
        "nli": "adherence.role._nli:NliMethod",
        "llm_judge": "adherence.role._judge:LlmJudgeMethod",
        "scope": "adherence.role._scope:ScopeMethod",
        "classifier": "adherence.role._classifier:ClassifierMethod",
    },
    base="adherence.role._base:Method",
)


@dataclass
class RoleConfig:
    """Options of the reference-based role-adherence methods.

    Attributes:
        method: one of ``METHODS``.
        encoder: sentence/token encoder (path, ``bundled:...`` or cached hub id).
        reference_pool: ``"per_turn"`` (each turn's ``references``, else its ground
            truth) or ``"dataset"`` (all ground truths of the scored set).
        alpha: Mahalanobis scale: a positive number or ``"median"`` (1 / median distance).
        lam: ridge added to the diagonal covariance.
        pca_components: PCA size cap (``min(cap, n_refs - 1)``).
        kl_vocab: vocabulary size of the KL method; ``kl_beta`` its scale.
        bertscore_layer: hidden layer for BERTScore (default: the last).
        bertscore_idf: idf-weight BERTScore with idf from the ground truths.
        bertscore_baseline: F1 baseline for rescaling, ``(F - b) / (1 - b)``.
        nli_model: local path of a sequence-classification NLI model.
        reference_file: a JSON list of reference texts used as the ``dataset`` pool
            instead of the scored table's own ground truths (the engine writes it so
            every shard of a job sees the whole job's references).
        judge: options of the ``llm_judge`` method (``adherence.judges.JudgeConfig``).
        threshold: turn/session decision threshold (None: the method's ``decision_threshold``: the classifier
            file's own, else 0.5 for every method whose score reads as a probability; ``scope``, a similarity whose best cut differs from one log
            to the next, has none and makes no decision unless given one); ``strict_mode`` makes a session
            score 1 only if every turn was scored and reaches it.
        session_mode: ``mean`` (mean turn score) or ``threshold_mean`` (mean of the
            thresholded turn decisions).
        calibration: a calibration file from ``adherence calibrate`` (its path; checked against the run and
            kept as ``Calibration.describe()`` plus its ``map``): each scored row also gets ``calibrated_score``,
            the mapped probability, and ``threshold`` is the calibration's (giving both is an error).
        calibration_any_judge: apply ``calibration`` to another judge's scores (by default a calibration
            fitted on one judge model, backend or prompt layout is refused for another).
        encoder_precision: ``"float32"``, ``"bf16"`` or ``"int8"`` (the CPU paths, ``Encoder(precision=...)``).
        device: where models run (default: CUDA when available).
        batch_size: texts per encoder batch (default: the encoder's, by device).
        progress: show progress bars.
    """

    method: str = option(
        "llm_judge",
        choices=METHODS,
        help="scoring method (`adherence score` needs one named, except that naming a judge -- --judge-model, "
        "--base-url, --backend -- means llm_judge; the Python API's default is llm_judge)",
    )
    encoder: Optional[str] = option(
        None, type=model_name, help="encoder: local path, bundled:all-MiniLM-L6-v2 (default) or a cached hub id"
    )
    reference_pool: str = option(
        "per_turn",
        flag="--references",
        choices=("per_turn", "dataset"),
        help="knn reference pool: each turn's references, or every ground truth of the set",
    )
    alpha: Union[float, str] = option("median", type=str, help="Mahalanobis scale: a number or 'median' (default)")
    lam: float = 0.01
    pca_components: int = 32
    kl_vocab: int = 500
    kl_beta: float = 1.0
    bertscore_layer: Optional[int] = option(None, type=int, help="hidden layer for bertscore (default: last)")
    bertscore_idf: bool = option(False, aliases=("--idf",), help="idf-weighted bertscore")
    bertscore_baseline: Optional[float] = option(
        None, flag="--baseline", type=float, help="bertscore F1 baseline for rescaling"
    )
    nli_model: Optional[str] = option(None, type=model_name, help="local path of an NLI model (method nli)")
    classifier: Optional[str] = option(
        None,
        type=file_path,
        metavar="CLF.json",
        help="method classifier: the classifier file from `adherence classifier fit` (checked when loaded)",
    )
    # the classifier file's content digest (set from the file): a refitted file at the same path rescored on resume
    classifier_digest: Optional[str] = None
    judge: Optional[Any] = None
    reference_file: Optional[str] = field(default=None, metadata=COSMETIC)  # its texts are the input's
    threshold: Optional[float] = None
    strict_mode: bool = option(
        False,
        flag="--strict",
        help="a session is 1 only if every turn was scored and reaches the threshold (an unscored or error turn "
        "makes it 0)",
    )
    session_mode: str = option(
        "mean",
        choices=("mean", "threshold_mean"),
        help="session score: mean turn score (default), or threshold_mean: the share of turns at or above the "
        "threshold (pygaussia's binary session score)",
    )
    # a calibration file's path (str or os.PathLike) as given; the dict it resolves to once the config is made
    calibration: Optional[Any] = None
    # a permission, not a score option
    calibration_any_judge: bool = option(
        False,
        help="apply a --calibration fitted on another judge's or prompt layout's scores (refused by default)",
        affects_scores=False,
    )
    encoder_precision: str = encoder_precision_option()
    device: Optional[str] = option(None, help="cuda, cpu, ... (default: cuda when available)", affects_scores=False)
    batch_size: Optional[int] = option(
        None,
        type=int,
        help="encoder texts per forward pass (default 64 on CPU, up to 4096 within 65536 padded tokens on a GPU)",
        affects_scores=False,
    )
    progress: bool = field(default=True, metadata=COSMETIC)

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise OptionError(_unknown(self.method))
        if self.reference_pool not in ("per_turn", "dataset"):
            raise OptionError(f"`reference_pool` must be 'per_turn' or 'dataset', got {self.reference_pool!r}")
        if isinstance(self.alpha, str):
            if self.alpha != "median":
                try:
                    self.alpha = float(self.alpha)
                except ValueError:
                    raise OptionError(f"`alpha` must be a positive number or 'median', got {self.alpha!r}") from None
        if not isinstance(self.alpha, str) and not self.alpha > 0:
            raise OptionError(f"`alpha` must be a positive number or 'median', got {self.alpha!r}")
        if self.session_mode not in ("mean", "threshold_mean"):
            raise OptionError(f"`session_mode` must be 'mean' or 'threshold_mean', got {self.session_mode!r}")
        if self.classifier is not None:
            import os

            from ._classifier_file import load_classifier

            if "://" not in self.classifier:
                self.classifier = os.path.abspath(self.classifier)  # workers on other nodes get an absolute path
            if self.method != "classifier":
                raise OptionError("--classifier goes with --method classifier")
            self.classifier_digest = load_classifier(self.classifier).digest
        elif self.method == "classifier":
            raise OptionError("--method classifier needs --classifier CLF.json (from `adherence classifier fit`)")
        if self.calibration is not None:
            from ._calibration import resolve_calibration

            self.threshold, self.calibration = resolve_calibration(self, get_method(self.method))
        if self.threshold is None:
            self.threshold = get_method(self.method).decision_threshold(self)
        if self.threshold is not None and not 0.0 <= self.threshold <= 1.0:
            raise OptionError(f"`threshold` must be in [0, 1], got {self.threshold}")
        if self.threshold is None and (self.strict_mode or self.session_mode == "threshold_mean"):
            raise OptionError(
                f"method {self.method!r} makes no decision without a threshold: --strict and --session-mode "
                "threshold_mean need --threshold (or --calibration from labelled turns)"
            )
        if self.lam < 0:
            raise OptionError(f"`lam` must be >= 0, got {self.lam}")
        if self.pca_components < 1 or self.kl_vocab < 1 or (self.batch_size is not None and self.batch_size < 1):
            raise OptionError("`pca_components`, `kl_vocab` and `batch_size` must be >= 1")
        if self.bertscore_baseline is not None and not self.bertscore_baseline < 1:
            raise OptionError(f"`bertscore_baseline` must be < 1, got {self.bertscore_baseline}")


@dataclass
class MethodResult:
    """Per-row output of a method: scores in [0, 1] (NaN where not scored) and row errors."""

    score: np.ndarray
    error: list  # None or a message per row
    extra: dict = field(default_factory=dict)  # column -> per-row values
    status: Optional[list] = None  # per-row ok/unscored/error when the method decides it


def _unknown(name: str) -> str:
    return unknown_name("method", name, METHODS)


def get_method(name: str) -> Method:
    """Instantiate the method registered under ``name`` (lazy import)."""
    return METHODS.create(name)


def missing_references(method: str, reference_pool: str, ground_truths: int, reference_rows: int) -> str:
    """Why ``method`` cannot score an input with these counts of reference texts ('' when it can)."""
    m = get_method(method)
    if not m.needs_reference_texts:
        return ""
    if method == "knn" and reference_pool == "per_turn" and reference_rows:
        return ""
    if ground_truths:
        return ""
    without = [name for name in METHODS if not get_method(name).needs_reference_texts]
    need = (
        "ground_truth_assistant (or references)"
        if method == "knn" and reference_pool == "per_turn"
        else "ground_truth_assistant"
    )
    return (
        f"no turn has a {need}: method {method!r} compares each turn with reference replies; give them as a "
        'column, as "reference" on each assistant message of a transcript, or with --ground-truth FILE '
        f"(conversation_id, turn_index, ground_truth_assistant), or use a method that needs none: {', '.join(without)}"
    )


def text_column(turns: pa.Table, name: str) -> list:
    """Column values as a list of str-or-None, or all None when the column is absent."""
    if name not in turns.column_names:
        return [None] * turns.num_rows
    return turns.column(name).to_pylist()


def _blank(v: Any) -> bool:
    return v is None or (isinstance(v, str) and not v.strip())


def dataset_references(turns: pa.Table, config: Optional[RoleConfig] = None) -> list[str]:
    """The ``dataset`` reference pool: ``config.reference_file`` when set, else the table's ground truths."""
    if config is not None and config.reference_file:
        return _load_references(config.reference_file)
    return [g for g in text_column(turns, "ground_truth_assistant") if not _blank(g)]


_REFERENCE_CACHE: dict = {}


def _load_references(path: str) -> list[str]:
    import json

    if path not in _REFERENCE_CACHE:
        if "://" in path:  # a work dir on object storage
            from ..data import read_json

            refs = read_json(path)
        else:
            with open(path, encoding="utf-8") as fh:
                refs = json.load(fh)
        _REFERENCE_CACHE.clear()
        _REFERENCE_CACHE[path] = refs
    return _REFERENCE_CACHE[path]


class Method(ABC):
    """A reference-based scoring method: ``score(turns, config, resources) -> MethodResult``."""

    name: str = ""
    # The decision threshold when none is given (None: the score ranks turns but decides nothing by itself)
    default_threshold: Optional[float] = 0.5
    needs_ground_truth: bool = True
    # Compares turns with reference replies (each turn's ground_truth_assistant, knn's references, or the set's
    # ground truths as a pool): an input without any cannot be scored at all.
    needs_reference_texts: bool = True
    # Scores through an LLM judge (``config.judge``): judge options, a judge's calibration check, judge stages
    uses_judge: bool = False

    def scale_depends_on_job(self, config: RoleConfig) -> bool:
        """Whether this config's scores are scaled by the whole job's turns: a threshold fitted on one job does not
        carry over to another, nor to a cascade's later stage, which scores only the turns left."""
        return False

    def decision_threshold(self, config: RoleConfig) -> Optional[float]:
        """The threshold a turn's score is decided at when the job gives none (``default_threshold``, unless the
        method's own artifact carries one: a classifier file's, chosen on out-of-fold scores)."""
        return self.default_threshold

    def encoder_model(self, config: RoleConfig) -> Optional[str]:
        """The encoder checkpoint this config's own artifact brings (a fine-tuned classifier's), used when the job
        names none; None: the job's encoder (the bundled one by default)."""
        return None

    def uses_dataset_references(self, config: RoleConfig) -> bool:
        """Whether scores depend on the whole scored set's ground truths (sharded runs share them)."""
        return False

    def prepare(self, config: RoleConfig, resources: Resources) -> None:
        """Load models and check job-level inputs before any row is scored.

        Errors here are configuration errors and stop the job, while problems with
        single rows become ``status=error`` rows later.
        """

    def row_errors(self, turns: pa.Table, config: RoleConfig) -> list:
        """Per-row input problems that make a turn unscorable (None where fine)."""
        assistant = text_column(turns, "assistant")
        truth = text_column(turns, "ground_truth_assistant")
        refs = text_column(turns, "references")
        out: list[Optional[str]] = []
        for a, g, r in zip(assistant, truth, refs):
            if _blank(a):
                out.append("empty assistant turn")
            elif self.needs_ground_truth and not self.has_reference(g, r, config):
                out.append(f"no ground_truth_assistant: method {self.name!r} compares the turn with its ground truth")
            else:
                out.append(None)
        return out

    def has_reference(self, truth: Optional[str], references: Any, config: RoleConfig) -> bool:
        """Whether a turn holds what this method compares it with (its ground truth, by default)."""
        return not _blank(truth)

    def per_worker_config(self, config: RoleConfig, n_workers: int) -> RoleConfig:
        """The config each of ``n_workers`` parallel workers runs, when a job-wide limit must be shared out."""
        return config

    def job_rescaler(self, config: RoleConfig, column: Callable[[str], np.ndarray]) -> Optional[Callable]:
        """How to rescale each shard's scores when their scale depends on the whole job (``column(name)`` reads a
        column across every shard's output), or None: scores are final as each shard wrote them."""
        return None

    @abstractmethod
    def score(self, turns: pa.Table, config: RoleConfig, resources: Resources) -> MethodResult:
        """Score every row of ``turns``; rows with an error keep NaN."""


class Resources:
    """Models shared across methods and calls in one job, each loaded once on first use."""

    def __init__(self, config: RoleConfig, *, encoder=None) -> None:
        self.config = config
        self._encoder = encoder
        self._judge: Optional[RoleJudge] = None

    @property
    def encoder(self):
        if self._encoder is None:
            from ..models import Encoder

            c = self.config
            self._encoder = Encoder(
                c.encoder or get_method(c.method).encoder_model(c),
                device=c.device,
                batch_size=c.batch_size,
                progress=c.progress,
                precision=c.encoder_precision,
            )
        return self._encoder

    @property
    def judge(self):
        if self._judge is None:
            from ..judges import JudgeConfig, RoleJudge

            judge = RoleJudge(self.config.judge or JudgeConfig())
            if self.config.calibration and not self.config.calibration_any_judge:
                from ._calibration import check_judge

                check_judge(self.config.calibration, judge.backend)
            self._judge = judge
        return self._judge

    def usage(self) -> dict:
        """Judge counters so far (calls, cache hits, prompt / forward / generated tokens); {} without a judge."""
        return dict(self._judge.stats) if self._judge is not None else {}

    def describe(self) -> dict:
        out = {"encoder": self._encoder.describe()} if self._encoder is not None else {}
        if self._judge is not None:
            out["judge"] = self._judge.backend.describe()
        return out
