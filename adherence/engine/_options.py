"""The engine's options, declared once: the ``adherence score`` flags of its ``engine`` group, the keyword
arguments of ``Engine``, job-file keys and the run metadata all come from these fields."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from .._errors import OptionError
from .._options import file_path, option
from .._registry import Registry, unknown_name

__all__ = ["EXECUTORS", "EngineOptions"]

_URI = "a local path or an s3:// / gs:// / hdfs:// URI"


#: where shards run: name -> the ``Executor`` class (``get_executor`` builds it from the job's ``EngineOptions``)
EXECUTORS = Registry(
    "executor",
    {"local": "adherence.engine._executors:LocalExecutor", "ray": "adherence.engine._executors:RayExecutor"},
    base="adherence.engine._executors:Executor",
)


@dataclass
class EngineOptions:
    """How a job runs: where shards go, how many, how it resumes, how its input is read. Most of these change no
    score (a resumed job may change them and keep its finished shards); each says where it is declared
    (``affects_scores``): the reference file (``ground_truth``) decides scores, the shard size is checked apart
    with the input, and the bootstrap's resamples and seed decide only the sessions' intervals.

    Example:
        >>> EngineOptions(shard_size=50_000).executor
        'local'
    """

    executor: str = option("local", choices=EXECUTORS, help="where shards run (default local)", affects_scores=False)
    ray_address: Optional[str] = option(
        None, help="an existing Ray cluster (default: start a local one)", affects_scores=False
    )
    num_workers: Optional[int] = option(
        None,
        type=int,
        help="Ray actors (default: one per --gpus-per-worker GPUs of the cluster, else 1; more CPU workers than "
        "the cluster's CPUs run as fewer, with a warning)",
        affects_scores=False,
    )
    gpus_per_worker: float = option(
        0.0,
        help="GPUs per Ray actor (1: one actor per GPU); each proves CUDA sees its GPU before a shard",
        affects_scores=False,
    )
    tensor_parallel: int = option(
        1,
        flag="--judge-tensor-parallel",
        metavar="N",
        help="vllm backend: each judge replica over N GPUs (tensor parallel); with --executor ray one placement "
        "group of N GPUs on one node per replica, each GPU checked before the first shard",
        affects_scores=False,
    )
    stall_timeout: float = option(
        300.0,
        metavar="S",
        help="seconds without progress before giving up: a Ray worker unheard (node lost, no room elsewhere) -- "
        "its shard moves to the others, none left: exit 1 naming the missing resources; every endpoint of an "
        "openai judge down and none answering: exit 1; the work dir is kept for --resume",
        affects_scores=False,
    )
    shard_size: int = option(100_000, help="turns per shard; conversations never split", affects_scores=False)
    checkpoint_every: float = option(
        60.0,
        metavar="S",
        help="seconds of scoring between checkpoints within a shard (default 60): an interrupt or a lost worker "
        "costs about this much work, not a shard; 0: only whole shards are kept",
        affects_scores=False,
    )
    resume: bool = option(
        False, help="reuse the finished shards and checkpoints of an interrupted run", affects_scores=False
    )
    work_dir: Optional[str] = option(
        None,
        type=file_path,
        help=f"shards and checkpoints (default: OUTPUT.work; removed after success); {_URI} every worker can reach",
        affects_scores=False,
    )
    keep_work_dir: bool = option(False, help="keep the work directory after success", affects_scores=False)
    input_format: str = option(
        "auto",
        choices=("auto", "turns", "openai", "sharegpt", "otel", "openinference", "langfuse", "langsmith"),
        help="auto (default): flat turns, OpenAI {messages} / ShareGPT {conversations} transcripts, or traces "
        "(OTLP JSON with GenAI or OpenInference spans, Phoenix span rows, Langfuse observations, LangSmith runs) "
        "detected from the first record",
        affects_scores=False,
    )
    bad_rows: Optional[str] = option(
        None,
        choices=("fail", "skip"),
        help="a row that cannot be read (a line that is not JSON, a CSV row with the wrong number of fields, a "
        "value of the wrong type, a malformed transcript): fail stops the job with one line naming file, line "
        "and column; skip leaves it out, counts it and writes it with its file, line and reason to "
        "OUTPUT.bad-rows.jsonl (default: fail for flat turn rows, skip with a warning for transcripts)",
        affects_scores=False,
    )
    columns: Optional[str] = option(
        None,
        metavar="NAME=COLUMN,...",
        help="the input's own names for the columns adherence reads, for a flat table named otherwise: e.g. "
        "conversation_id=chat_id,user=question,assistant=answer (names: conversation_id, turn_index, role, user, "
        "assistant, ground_truth_assistant, label, weight)",
        affects_scores=False,
    )
    max_bad_rows: float = option(
        0.05,
        help="the share of the input's records (rows, or transcripts) that may be left out as unreadable before "
        "the job fails with exit 2, naming the file that holds them (default 0.05; 1: any share)",
        affects_scores=False,
    )
    ground_truth: Optional[str] = option(
        None,
        type=file_path,
        metavar="FILE",
        help="reference replies for the reference methods (cosine, knn, bertscore, nli, kl, mahalanobis): "
        ".jsonl/.csv/.parquet with conversation_id, turn_index (0-based) and ground_truth_assistant (or "
        "references, a list, for knn); fills turns that have none",
    )
    n_bootstrap: int = option(1000, aliases=("--bootstrap",), help="bootstrap resamples for session CIs (0: none)")
    seed: int = option(42, help="seed of the session bootstrap (default 42)")
    #: the role definition of transcripts without a system message (the command line's --role / --role-file)
    role: Optional[str] = None
    progress: bool = True
    progress_every: float = option(
        30.0,
        metavar="S",
        help="seconds between progress lines when standard error is not a terminal (a scheduler's log)",
        affects_scores=False,
    )
    #: Ray: tries of a shard whose worker died, after the first
    max_retries: int = 2
    #: rows per batch read while planning (memory, not scores)
    read_batch_rows: int = 65_536

    @property
    def column_map(self) -> dict:
        """``columns`` read: ``{the contract's column: the input's own}`` (``data._transcripts.parse_columns``)."""
        from ..data import TURNS, parse_columns

        return parse_columns(self.columns, tuple(c.name for c in TURNS.columns))

    def __post_init__(self) -> None:
        if self.executor not in EXECUTORS:
            raise OptionError(unknown_name("executor", self.executor, EXECUTORS))
        if self.shard_size < 1 or (self.num_workers is not None and self.num_workers < 1):
            raise OptionError("`shard_size` and `num_workers` must be >= 1")
        if self.stall_timeout <= 0:
            raise OptionError(f"`stall_timeout` must be > 0 seconds, got {self.stall_timeout}")
        if self.tensor_parallel < 1:
            raise OptionError(f"`tensor_parallel` must be >= 1, got {self.tensor_parallel}")
        if self.read_batch_rows < 1:
            raise OptionError(f"`read_batch_rows` must be >= 1, got {self.read_batch_rows}")
        self.column_map  # noqa: B018 - a bad --columns pair: one line, before any work
        if not 0 <= self.max_bad_rows <= 1:
            raise OptionError(f"`max_bad_rows` is a share of the records in [0, 1], got {self.max_bad_rows}")
        if self.checkpoint_every < 0 or self.progress_every <= 0:
            raise OptionError("`checkpoint_every` must be >= 0 and `progress_every` > 0 seconds")
        if self.n_bootstrap < 0:
            raise OptionError(f"`n_bootstrap` must be >= 0, got {self.n_bootstrap}")

    def executor_kwargs(self) -> dict:
        """The Ray executor's options (none for the local one)."""
        if self.executor != "ray":
            return {}
        kw = {
            "num_workers": self.num_workers,
            "address": self.ray_address,
            "gpus_per_worker": self.gpus_per_worker,
            "max_retries": self.max_retries,
            "stall_timeout": self.stall_timeout,
        }
        if self.tensor_parallel > 1:
            kw["tensor_parallel"] = self.tensor_parallel
        return kw

    def engine_record(self, work_dir: str, **extra: Any) -> dict:
        """How a job ran, as its metadata's ``engine`` section records it (``extra``: what the job adds)."""
        return {
            "executor": self.executor,
            **{k: v for k, v in self.executor_kwargs().items() if v is not None},
            "shard_size": self.shard_size,
            "work_dir": work_dir,
            **extra,
        }
