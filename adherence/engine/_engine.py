"""The engine façade: plan, execute, resume, merge, summarise."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional, Union

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .._atomic import atomic_path, write_json_atomic
from .._errors import EngineError, OptionError
from .._fingerprint import score_fingerprint, score_hash
from ..data import DataError, metadata_path, run_metadata
from ..data._errors import skipped_summary
from ..data._io import _as_table, _check_file
from ..data._metadata import redact_secrets
from ..data._storage import Remote, as_target, write_json
from ..data._validate import conform_schema as _conform_schema
from ..role import RoleConfig, aggregate_sessions, get_method
from ..role._base import missing_references
from ..role._judge import tensor_parallel_config
from ._commit import Commit, WorkDir, check_quarantine, check_replaceable, meta_of, quarantine_of, store_of
from ._executors import Executor, LocalExecutor, RayExecutor, check_reachable, get_executor
from ._messages import ShardResult, ShardTask
from ._options import EngineOptions
from ._plan import content_digest, job_fingerprint, plan_job, same_input
from ._progress import JobProgress
from ._safety import (
    STAGING_PREFIX,
    check_outputs,
    output_columns,
    output_format,
    remove_dead_staging,
    remove_dead_temporaries,
    reserved_columns,
)

__all__ = ["Engine", "JobResult", "score"]


@dataclass
class JobResult:
    """What a job produced: paths (or the table for in-memory runs) and its summary."""

    output: Union[Path, str, None]  # a str is an object-storage URI
    sessions_output: Union[Path, str, None]
    summary: dict
    table: Optional[pa.Table] = None
    sessions: Optional[pa.Table] = None


class Engine:
    """Score a turns dataset of any size: sharded by conversation, streamed, resumable.

    Keyword options are ``EngineOptions``'s (how the job runs: ``executor``, ``num_workers``,
    ``gpus_per_worker``, ``ray_address``, ``tensor_parallel``, ``stall_timeout``, ``shard_size``,
    ``work_dir``, ``resume``, ``keep_work_dir``, ``input_format``, ``role``, ``bad_rows``,
    ``ground_truth``, ``n_bootstrap``, ``seed``, ``progress``, ``max_retries``, ``read_batch_rows``) and
    ``RoleConfig``'s (how turns are scored: ``method``, ``threshold``, ``encoder``, ``batch_size``, ...); or
    give ``options`` and ``config`` whole. Each option has one meaning wherever it is given.

    Args:
        method: a role method (``llm_judge`` default, ``cosine``, ...).
        config: the scoring options, instead of ``method`` and its keyword options.
        options: the engine's options, instead of their keyword arguments.
        job: the caller's resolved options (e.g. the command line's), kept in the run metadata.
        intermediate: a pass of a larger job (a cascade's stage): a signal after its outputs are committed does
            not find the command done.

    Example::

        from adherence import Engine
        result = Engine(method="cosine", shard_size=50_000).run("turns.parquet", "scores.parquet")
        result.summary["turns_per_s"]
    """

    def __init__(
        self,
        *,
        method: Optional[str] = None,
        config: Optional[RoleConfig] = None,
        options: Optional[EngineOptions] = None,
        job: Optional[dict] = None,
        intermediate: bool = False,
        **kwargs: Any,
    ) -> None:
        engine_fields = {f.name for f in dataclasses.fields(EngineOptions)}
        engine_kw = {k: kwargs.pop(k) for k in list(kwargs) if k in engine_fields}
        if engine_kw.get("work_dir") is not None:
            engine_kw["work_dir"] = os.fspath(engine_kw["work_dir"])
        options = EngineOptions(**engine_kw) if options is None else dataclasses.replace(options, **engine_kw)
        if config is None:
            config = RoleConfig(method=method or "llm_judge", **kwargs)
        elif kwargs or (method and method != config.method):
            config = dataclasses.replace(config, method=method or config.method, **kwargs)
        self.job = job  # the caller's resolved options (e.g. the CLI's, with its --config file), kept in the metadata
        if options.tensor_parallel > 1:
            config = tensor_parallel_config(config, options.tensor_parallel, options.executor)
        from ..data import TranscriptOptions

        TranscriptOptions(options.input_format)  # validates the choice now, not after planning
        if options.ground_truth is not None:
            _check_file(options.ground_truth)  # missing or unreadable: one line now, not after the models load
            options = dataclasses.replace(options, ground_truth=str(Path(options.ground_truth).resolve()))
        self.config, self.options = config, options
        self._executor: Optional[Executor] = None
        self._names: dict = {}
        self._remote_work: Optional[Remote] = None
        self._replace_quarantine = False  # an earlier run's bad-rows file is there (and ours): replaced on publish
        # a pass of a larger job (a cascade's stage): its outputs are that job's work, not the command's outputs
        self.intermediate = intermediate

    @property
    def executor_kwargs(self) -> dict:
        """The Ray executor's options (none for the local one)."""
        o = self.options
        if o.executor != "ray":
            return {}
        kw = {
            "num_workers": o.num_workers,
            "address": o.ray_address,
            "gpus_per_worker": o.gpus_per_worker,
            "max_retries": o.max_retries,
            "stall_timeout": o.stall_timeout,
        }
        if o.tensor_parallel > 1:
            kw["tensor_parallel"] = o.tensor_parallel
        return kw

    # ------------------------------------------------------------------ public

    def run(
        self,
        source,
        output: Optional[Union[str, os.PathLike]] = None,
        *,
        sessions_output: Optional[Union[str, os.PathLike]] = None,
    ) -> JobResult:
        """Score ``source`` (a path or an Arrow table) into ``output`` (Parquet file or directory, JSONL, CSV).

        With no ``output`` the result is returned in memory (``JobResult.table``).

        Nothing the job did not create is deleted or overwritten: every output path is checked
        before any work (``check_outputs``), and the output, the sessions file and their
        metadata are published together, only once complete and verified (every input row
        exactly once). A failure or an interrupt leaves earlier files untouched.
        """
        start = time.perf_counter()
        tmp_ctx = None
        target: Union[str, os.PathLike] = Path() if output is None else output
        if output is None:
            tmp_ctx = tempfile.TemporaryDirectory(prefix="adherence-")
            target = Path(tmp_ctx.name) / "scores.parquet"
        staging: Optional[Path] = None
        try:
            # Absolute from here on (Ray workers run in other directories and on other nodes), or URIs.
            out_t = as_target(target)
            sessions_t = _beside(out_t, "sessions") if sessions_output is None else as_target(sessions_output)
            work_t = as_target(self.options.work_dir) if self.options.work_dir else _beside(out_t, "work")
            remote = {
                k: Remote(t)
                for k, t in (("output", out_t), ("sessions", sessions_t), ("work", work_t))
                if isinstance(t, str)
            }
            if remote:
                # Object storage: bookkeeping and the temporaries to upload are staged locally on the driver (named
                # by its pid, so a later job removes what a killed one left).
                remove_dead_staging()
                staging = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{os.getpid()}-"))
            out_path, sessions_path, work = (
                _local_side(t, staging, sub)
                for t, sub in ((out_t, "publish"), (sessions_t, "publish"), (work_t, "work"))
            )
            # Where the outputs are committed: the local paths, or the objects.
            finals = {"output": remote.get("output", out_path), "sessions": remote.get("sessions", sessions_path)}
            self._names = {"turns": str(out_t), "sessions": str(sessions_t), "work": str(work_t)}
            self._remote_work = remote.get("work")
            self._check_device()
            if isinstance(source, (str, os.PathLike)):
                _check_file(source)  # a missing file, a FIFO, an unreadable or empty input: one line, before anything
            check_outputs(source, out_path, sessions_path, work)
            _check_remote_targets(remote, out_t, sessions_t, work_t)
            out_path.parent.mkdir(parents=True, exist_ok=True)
            sessions_path.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.ExitStack() as stack:
                # The sessions file is an output too: a job writing it as its turn output must wait.
                locks = tuple(
                    stack.enter_context(store_of(t).lock(t.with_name(f".{t.name}.lock"), f"the {what}", subject=str(t)))
                    for t, what in ((finals["output"], "output"), (finals["sessions"], "sessions output"))
                )
                # A job killed while publishing left its temporaries here; they are ours to remove now.
                remove_dead_temporaries(
                    [t for f in finals.values() if isinstance(f, Path) for t in (f, metadata_path(f))]
                )
                # What the targets are now, checked: publish replaces them only if they are still that.
                targets = [t for f in finals.values() for t in (f, meta_of(f))]
                if self.options.bad_rows != "fail":  # a row left out is kept there: none vanishes unrecorded
                    check_quarantine(finals["output"])
                    q = quarantine_of(finals["output"])
                    targets.append(q)
                    # an earlier run's (checked ours) is replaced even when this run leaves nothing out
                    self._replace_quarantine = store_of(q).kind(q) != "missing"
                self._commit = Commit(
                    finals["output"],
                    finals["sessions"],
                    {t: store_of(t).identity(t) for t in targets},
                    locks,
                    staging,
                    final=not self.intermediate,
                )
                remote_work = (
                    stack.enter_context(WorkDir(remote["work"], resume=self.options.resume))
                    if "work" in remote
                    else None
                )
                workdir = stack.enter_context(WorkDir(work, resume=self.options.resume))
                if remote_work is not None:
                    self._commit.locks += (remote_work.lock,)
                    if self.options.resume:
                        remote_work.pull(work)
                summary = self._run_locked(source, out_path, sessions_path, work, start)
                if not self.options.keep_work_dir and not summary["failed_shards"]:
                    workdir.remove()  # kept after a failed shard: --resume rescores only that shard
                    if remote_work is not None:
                        remote_work.remove()
            result = JobResult(out_t if output is not None else None, sessions_t, summary)
            if output is None:
                result.table = pq.read_table(out_path)
                result.sessions = pq.read_table(sessions_path)
                result.sessions_output = None
            return result
        finally:
            if tmp_ctx is not None:
                tmp_ctx.cleanup()
            if staging is not None:
                shutil.rmtree(staging, ignore_errors=True)
            if self._executor is not None:
                self._executor.close()
                self._executor = None

    # ------------------------------------------------------------------ steps

    def _check_device(self) -> None:
        """``device="cuda"`` on a machine where CUDA sees no GPU stops before any work (in-process runs;
        a Ray worker checks its own GPU)."""
        devices = [
            self.config.device,
            ((self.config.judge.backend_options or {}).get("device") if self.config.judge is not None else None),
        ]
        if self.options.executor != "local" or not any(str(d or "").startswith("cuda") for d in devices):
            return
        import torch

        if not torch.cuda.is_available():
            raise OptionError(
                f"--device cuda, but CUDA sees no GPU on this machine (torch {torch.__version__}); "
                "use --device cpu, or --executor ray --gpus-per-worker 1 on a cluster with GPUs"
            )

    def _run_locked(self, source, out_path: Path, sessions_path: Path, work: Path, start: float) -> dict:
        if not isinstance(source, (str, os.PathLike)):
            src_path = work / "input.parquet"
            if not src_path.exists():
                _spill(source, src_path)
            source = src_path
        from ..data import TranscriptOptions

        transcripts = TranscriptOptions(self.options.input_format, self.options.role, self.options.bad_rows)
        fingerprint = None  # without --resume the plan hashes the input while workers start
        if self.options.resume:
            fingerprint = job_fingerprint(source, transcripts, self.options.ground_truth)
            done = self._published_already(fingerprint, start)
            if done is not None:
                return done
        method = get_method(self.config.method)
        # The job's progress is the only bar: models' and judges' own bars would overwrite it (and in a log each
        # is a line of carriage returns).
        config = dataclasses.replace(self.config, progress=False)
        if config.judge is not None and (config.judge.backend_options or {}).get("progress"):
            opts = dict(config.judge.backend_options or {}, progress=False)
            config = dataclasses.replace(config, judge=dataclasses.replace(config.judge, backend_options=opts))
        needs_references = method.uses_dataset_references(self.config)
        workers = 1
        if self.options.executor == "ray":
            executor = self._executor = get_executor(self.options)
            if isinstance(executor, RayExecutor):
                check_reachable(executor.ray, str(self._remote_work) if self._remote_work else work)
                workers = executor.num_workers
            if not needs_references and not method.needs_reference_texts:
                # Workers start (and load their models) while the input is being planned (a method that needs
                # reference texts waits for the plan to show there are some).
                executor.start(config)
        plan = plan_job(
            source,
            work,
            shard_size=self.options.shard_size,
            min_shards=workers,
            batch_size=self.options.read_batch_rows,
            collect_references=needs_references,
            check_columns=self._check_columns(source),
            transcripts=transcripts,
            ground_truth=self.options.ground_truth,
            fingerprint=fingerprint,
        )
        if plan.ground_truths is not None:
            missing = missing_references(
                self.config.method, self.config.reference_pool, plan.ground_truths, plan.reference_rows or 0
            )
            if missing:
                raise DataError(missing, file=str(source) if isinstance(source, (str, os.PathLike)) else "<table>")
        if plan.ground_truth_unmatched:
            warnings.warn(
                f"{self.options.ground_truth}: {plan.ground_truth_unmatched} reference row(s) match no turn of the "
                "input (keys are conversation_id and 0-based turn_index)",
                stacklevel=2,
            )
        rw = self._remote_work
        if self._check_job_manifest(work, plan) and rw is not None:
            (rw / "out").delete_tree()  # another job's shard outputs: never mixed with ours
            (rw / "checkpoints").delete_tree()
        if rw is not None:
            (rw / "job.json").upload(work / "job.json")
            if plan.reference_file:
                (rw / "references.json").upload(Path(plan.reference_file))
        if plan.reference_file:
            config = dataclasses.replace(
                config, reference_file=str(rw / "references.json") if rw is not None else plan.reference_file
            )
        results = self._execute(plan, work, config)
        return self._finalize(plan, work, out_path, sessions_path, results, start, source)

    def _check_columns(self, source):
        name = str(source) if isinstance(source, (str, os.PathLike)) else "<table>"

        def check(columns: list) -> None:
            clash = reserved_columns(self.config.method, columns, self.config)
            if clash:
                reserved = ", ".join(output_columns(self.config.method, self.config))
                raise DataError(
                    f"input column {clash[0]!r} would be replaced by the scores (reserved: {reserved}); "
                    "rename or drop it",
                    file=name,
                    column=clash[0],
                )

        return check

    def _job_manifest(self, fingerprint: dict, shard_size: Optional[int]) -> dict:
        """What decides a job's scores: the options' hash and the options themselves (for saying what changed),
        the input's fingerprint, and the shard size (checkpoints are per shard)."""
        options = json.loads(json.dumps(score_fingerprint(self.config), sort_keys=True, default=repr))
        if isinstance(options.get("calibration"), dict):  # named by its digests, not copied knot by knot
            options["calibration"].pop("map", None)
        return {
            "config": score_hash(self.config),
            "fingerprint": fingerprint,
            "shard_size": shard_size,
            "options": options,
        }

    def _published_already(self, fingerprint: dict, start: float) -> Optional[dict]:
        """For ``--resume``: when the output is already published by a job with these score options from this
        input (its metadata says so and both outputs are there whole), the summary of a run that scored nothing;
        a line says so. When an output of ours is there but differs, a line says why the job scores again."""
        final = self._commit.output
        store = store_of(final)
        meta = store.read_json(meta_of(final))
        engine = (meta.get("engine") or {}) if isinstance(meta, dict) else {}
        recorded = engine.get("score")
        if not isinstance(meta, dict) or not isinstance(recorded, dict) or meta.get("published") is False:
            return None  # nothing of ours published there: an ordinary resume
        name = self._names["turns"]
        job = self._job_manifest(fingerprint, None)
        old = dict(recorded, fingerprint=engine.get("input_fingerprint"), shard_size=None)
        if old.get("config") != job["config"] or not same_input(old["fingerprint"], fingerprint):
            warnings.warn(f"--resume: {name} is published but is scored again: {_why_not_reused(old, job)}",
                          stacklevel=4)  # fmt: skip
            return None
        recorded_summary = meta.get("summary")
        summary: dict = recorded_summary if isinstance(recorded_summary, dict) else {}
        if summary.get("failed_shards"):
            return None  # published with shards that failed as a whole: those are scored again from the work dir
        rows = (meta.get("outputs") or {}).get("rows")
        try:
            whole = all(store.kind(t) == "file" for t in (final, self._commit.sessions)) and (
                not isinstance(final, Path)
                or output_format(final) != "parquet"
                or pq.read_metadata(final).num_rows == rows
            )
        except (OSError, pa.ArrowException):
            whole = False
        if not whole:
            warnings.warn(f"--resume: {name} is published from this input with these options, but it or its "
                          "sessions file is missing or no longer whole; it is scored again", stacklevel=4)  # fmt: skip
            return None
        _say(f"--resume: {name} is already published from this input with these options: nothing scored "
             "(drop --resume, or give another -o, to score again)")  # fmt: skip
        turns = summary.get("turns", rows)
        return dict(summary, elapsed_s=time.perf_counter() - start, turns_scored=0, turns_reused=turns,
                    turns_per_s=None, failed_shards=[], shards_resumed=summary.get("shards", 0),
                    already_published=True)  # fmt: skip

    def _check_job_manifest(self, work: Path, plan) -> bool:
        """Write the job's manifest; True when an earlier, different job's shard outputs were cleared (with
        ``--resume``, a warning says on one line why its work could not be reused)."""
        manifest = work / "job.json"
        cleared = False
        job = self._job_manifest(plan.fingerprint, plan.shard_size)
        if manifest.exists():
            try:
                old = json.loads(manifest.read_text())
            except ValueError:
                old = None
            if (
                not isinstance(old, dict)
                or old.get("config") != job["config"]
                or old.get("shard_size") != job["shard_size"]
                or not same_input(old.get("fingerprint"), job["fingerprint"])
            ):
                # Different job in the same place: its shard outputs must not be mixed with ours.
                shutil.rmtree(work / "out", ignore_errors=True)
                shutil.rmtree(work / "checkpoints", ignore_errors=True)
                cleared = True
                if self.options.resume:
                    warnings.warn(
                        f"--resume: the earlier work in {work} is not reused: {_why_not_reused(old, job)}",
                        stacklevel=3,
                    )
        write_json_atomic(manifest, job)
        return cleared

    @staticmethod
    def _finished(done: Path, output: Path) -> Optional[ShardResult]:
        """A shard's earlier result, if its output is complete, not failed, and hashes to what was recorded."""
        if not (done.exists() and output.exists()):
            return None
        try:
            res = ShardResult.from_json(json.loads(done.read_text()))
        except ValueError:
            return None
        if res is None or res.failed or content_digest(output) != res.digest:
            return None
        return dataclasses.replace(res, resumed=True)

    def _execute(self, plan, work: Path, config: RoleConfig) -> dict:
        out_dir = work / "out"
        out_dir.mkdir(exist_ok=True)
        for stale in out_dir.glob(".*.tmp"):
            stale.unlink()  # leftovers of a killed run
        rw = self._remote_work
        every = self.options.checkpoint_every
        checkpoints = (rw if rw is not None else work) / "checkpoints"
        if every > 0 and isinstance(checkpoints, Path):
            checkpoints.mkdir(exist_ok=True)
        results: dict[int, ShardResult] = {}
        tasks: list[ShardTask] = []
        for s in plan.shards:
            output = out_dir / f"shard-{s.shard_id:05d}.parquet"
            earlier = self._finished(out_dir / f"shard-{s.shard_id:05d}.done.json", output)
            if earlier is not None:
                results[s.shard_id] = earlier
                continue
            where = str(checkpoints) if every > 0 else None
            if rw is not None:  # the workers read and write on object storage; this run's shard goes up first
                (rw / "shards" / Path(s.path).name).upload(Path(s.path))
                tasks.append(
                    ShardTask(
                        s.shard_id,
                        str(rw / "shards" / Path(s.path).name),
                        str(rw / "out" / output.name),
                        where,
                        every,
                    )
                )
            else:
                tasks.append(ShardTask(s.shard_id, s.path, str(output), where, every))
        if tasks and self._executor is None:
            self._executor = get_executor(self.options)
        show = self.options.progress
        if tasks and isinstance(self._executor, LocalExecutor) and show:
            # Models load before the job's progress starts, on a line of their own.
            t0 = time.perf_counter()
            _say(f"loading models ({self.config.method}) ...")
            self._executor.start(config)
            _say(f"models ready in {time.perf_counter() - t0:.1f} s")
        progress = JobProgress(
            f"scoring ({self.config.method})",
            total=plan.total_rows,
            shards=len(plan.shards),
            reused_rows=sum(r.rows for r in results.values()),
            reused_shards=len(results),
            enabled=show,
            every=self.options.progress_every,
        )

        def on_result(res: ShardResult) -> None:
            name = f"shard-{res.shard_id:05d}"
            if rw is not None:
                # Fetched and checked against the digest the worker computed before it counts as done.
                (rw / "out" / f"{name}.parquet").download(out_dir / f"{name}.parquet")
                if content_digest(out_dir / f"{name}.parquet") != res.digest:
                    raise EngineError(
                        f"shard output {rw / 'out' / name}.parquet changed after its worker wrote it; "
                        "nothing was published (rerun with --resume)"
                    )
                write_json(rw / "out" / f"{name}.done.json", res.to_json())
            write_json_atomic(out_dir / f"{name}.done.json", res.to_json())
            results[res.shard_id] = res
            progress.shard_done(res.shard_id, res.rows, res.reused)

        try:
            if tasks:
                assert self._executor is not None
                self._executor.run(tasks, config, on_result, progress.within)
        finally:
            progress.close()
        return results

    def _rescaler(self, shard_files: list[Path]):
        """The method's rescaling of every shard, when its scores' scale depends on the whole job (else None)."""

        def column(name: str) -> np.ndarray:
            return np.concatenate(
                [pq.read_table(f, columns=[name]).column(name).to_numpy(zero_copy_only=False) for f in shard_files]
            )

        return get_method(self.config.method).job_rescaler(self.config, column)

    @staticmethod
    def _verify_rows(shard_files: list[Path], total: int) -> None:
        """Every input row exactly once across the shard outputs, or an ``EngineError`` (nothing is published)."""
        seen = np.zeros(total, dtype=bool)
        count = 0
        for f in shard_files:
            try:
                rows = pq.read_table(f, columns=["_row"]).column("_row").to_numpy()
            except (OSError, pa.ArrowInvalid, KeyError) as exc:
                raise EngineError(
                    f"shard output {f} is unreadable ({exc}); rerun with --resume to score it again"
                ) from None
            if len(rows) and (
                rows.min() < 0 or rows.max() >= total or seen[rows].any() or len(np.unique(rows)) != len(rows)
            ):
                raise EngineError(f"shard output {f} holds rows outside its shard or twice; nothing was published")
            seen[rows] = True
            count += len(rows)
        if count != total or not seen.all():
            raise EngineError(
                f"the shard outputs hold {count} of the {total} input rows; nothing was published (rerun with --resume)"
            )

    def _finalize(
        self, plan, work: Path, out_path: Path, sessions_path: Path, results: dict, start: float, source
    ) -> dict:
        shard_files = [work / "out" / f"shard-{s.shard_id:05d}.parquet" for s in plan.shards]
        self._verify_rows(shard_files, plan.total_rows)
        rescale = self._rescaler(shard_files)
        schema = pa.unify_schemas([pq.read_schema(f) for f in shard_files], promote_options="permissive")
        schema = pa.schema([f for f in schema if f.name != "_row"])
        # Conversation ids are text inside the job; an input that wrote them as integers gets integers back.
        id_type = pa.type_for_alias(plan.conversation_id_type) if plan.conversation_id_type else None
        out_schema = schema
        if id_type is not None:
            out_schema = schema.set(schema.get_field_index("conversation_id"), pa.field("conversation_id", id_type))
        publisher = self._commit.publisher()
        out_final, sessions_final = self._commit.output, self._commit.sessions
        try:
            sink = _TableSink(publisher.temporary(out_final), output_format(out_path), out_schema)
            publisher.add(sink.path, out_final)
            sessions_sink = None
            n_sessions = 0
            for f in shard_files:
                t = pq.read_table(f)
                if rescale is not None:
                    t = rescale(t)
                t = _conform_schema(t.drop_columns(["_row"]), schema)
                sink.write(_conform_schema(t, out_schema) if id_type is not None else t)
                sessions = aggregate_sessions(
                    t,
                    threshold=self.config.threshold,
                    strict_mode=self.config.strict_mode,
                    session_mode=self.config.session_mode,
                    n_bootstrap=self.options.n_bootstrap,
                    seed=self.options.seed,
                )
                if id_type is not None:
                    sessions = sessions.set_column(
                        0, "conversation_id", sessions.column("conversation_id").cast(id_type)
                    )
                if sessions_sink is None:
                    sessions_sink = _TableSink(
                        publisher.temporary(sessions_final), output_format(sessions_path), sessions.schema
                    )
                    publisher.add(sessions_sink.path, sessions_final)
                sessions_sink.write(sessions)
                n_sessions += sessions.num_rows
            sink.close()
            if sessions_sink is None:
                raise EngineError("the plan has no shards, so no sessions were written; nothing was published")
            sessions_sink.close()
            written = sink.count_rows()
            if written != plan.total_rows:
                raise EngineError(
                    f"the output holds {written} rows, the input {plan.total_rows}; nothing was published"
                )
            elapsed = time.perf_counter() - start
            totals = {
                k: sum(getattr(r, k) for r in results.values()) for k in ("rows", "ok", "error", "unscored", "skipped")
            }
            # finished by an earlier run: whole shards, and the checkpoints of shards it left half done
            reused = sum(r.rows if r.resumed else r.reused for r in results.values())
            models: dict = next((r.models for r in results.values() if r.models), {})
            failed = sorted(r.shard_id for r in results.values() if r.failed)
            summary = {
                "method": self.config.method,
                "turns": totals["rows"],
                "ok": totals["ok"],
                "error": totals["error"],
                "unscored": totals["unscored"],
                "skipped": totals["skipped"],
                "sessions": n_sessions,
                "shards": len(plan.shards),
                "shards_resumed": sum(1 for r in results.values() if r.resumed),
                "failed_shards": failed,
                "elapsed_s": elapsed,
                "turns_scored": totals["rows"] - reused,
                "turns_reused": reused,
                # this run's work only: rows an earlier run scored cost it nothing
                "turns_per_s": (totals["rows"] - reused) / elapsed if elapsed > 0 else None,
                "executor": self.options.executor,
            }
            stats = getattr(self._executor, "stats", None)
            if stats:
                summary["retried_shards"] = stats["retried_shards"]
                summary["workers_lost"] = stats["workers_lost"]
                summary["workers"] = sorted(stats["workers"].values(), key=lambda w: (w.get("host"), w.get("pid")))
            # this run's work only: resumed shards were paid for earlier
            fresh = [r for r in results.values() if not r.resumed]
            usage = _summed(r.judge_usage for r in fresh)
            if usage:
                summary["judge_usage"] = usage
            phases = _summed(r.phases for r in fresh)  # the workers' CPU seconds reading, scoring, writing
            if phases:
                summary["shard_phases_s"] = phases
            if plan.skipped:
                summary["skipped_records"] = skipped_summary(plan.skipped)
            if self.options.bad_rows == "skip" or plan.quarantined or self._replace_quarantine:
                # every row left out, with its file, line and reason (with --bad-rows skip, written even when there
                # is none; by default, for transcripts, whenever one was left out)
                q = quarantine_of(out_final)
                publisher.add_text(q, Path(plan.quarantine).read_text(encoding="utf-8") if plan.quarantine else "")
                summary["bad_rows"] = {"count": plan.quarantined, "file": str(q)}
            if failed:
                summary["failure"] = next(r.failed for r in results.values() if r.failed)
            # The plan hashed the input already (resume by content): record that digest, do not hash it again.
            meta = run_metadata(
                config=_recorded_config(self.config),
                seed=self.options.seed,
                inputs=[source],
                models=models,
                hash_inputs=False,
            )
            meta["inputs"][0]["digest"] = plan.fingerprint["content"]
            if "ground_truth" in plan.fingerprint:
                gt = plan.fingerprint["ground_truth"]
                meta["inputs"].append({"path": gt["path"], "role": "ground_truth", "digest": gt["content"]})
            self._publish_metadata(
                publisher,
                meta,
                summary,
                written,
                shards=len(plan.shards),
                input_fingerprint=plan.fingerprint,
                score={
                    k: v for k, v in self._job_manifest(plan.fingerprint, None).items() if k in ("config", "options")
                },
            )
        finally:
            publisher.discard()
        return summary

    def _publish_metadata(self, publisher, meta: dict, summary: dict, rows: int, **engine: Any) -> None:
        """Complete the run metadata (how the job ran, its summary, the caller's options, the outputs), write it
        beside both outputs with secrets redacted, and publish everything the publisher holds."""
        meta["engine"] = {
            "executor": self.options.executor,
            **{k: v for k, v in self.executor_kwargs.items() if v is not None},
            "shard_size": self.options.shard_size,
            "work_dir": self._names["work"],
            **engine,
        }
        meta["summary"] = summary
        if self.job:
            meta["job"] = self.job
        meta["outputs"] = {"turns": self._names["turns"], "sessions": self._names["sessions"], "rows": rows}
        meta = redact_secrets(meta)  # an API key given as a flag or option never reaches disk
        text = json.dumps(meta, indent=2, ensure_ascii=False, default=repr) + "\n"
        for final in (self._commit.output, self._commit.sessions):
            publisher.add_text(meta_of(final), text)
        publisher.publish()


def _summed(dicts: Iterable[dict]) -> dict:
    """Key-wise sums of per-shard counters (judge calls and tokens, seconds per phase)."""
    out: dict = {}
    for d in dicts:
        for k, v in d.items():
            out[k] = out.get(k, 0) + v
    return out


def _recorded_config(config: RoleConfig) -> dict:
    """The job's options as its metadata records them: an applied calibration by its path, file digest,
    threshold and kind of map, not the map's knots (a large isotonic file would be copied into every
    metadata file)."""
    d = dataclasses.asdict(config)
    cal = d.get("calibration")
    if isinstance(cal, dict) and isinstance(cal.get("map"), dict):
        d["calibration"] = dict(cal, map=cal["map"].get("method"))
    return d


def _flat(d: Any, prefix: str = "") -> dict:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def _why_not_reused(old: Any, job: dict) -> str:
    """What differs between an earlier job's manifest and this job's, in a few words."""
    if not isinstance(old, dict):
        return "its manifest (job.json) is unreadable"
    if not same_input(old.get("fingerprint"), job["fingerprint"]):
        return "the input's content changed"
    if old.get("shard_size") != job["shard_size"]:
        return f"the shard size changed ({old.get('shard_size')} -> {job['shard_size']})"
    if "options" not in old:
        return "it was made by an older version, which recorded no options"
    a, b = _flat(old["options"]), _flat(job["options"])
    changed = [f"{k} {a.get(k)!r} -> {b.get(k)!r}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    more = f" and {len(changed) - 4} more" if len(changed) > 4 else ""
    return "options that decide scores changed (" + ", ".join(changed[:4]) + more + ")"


def _local_side(target: Union[Path, str], staging: Optional[Path], sub: str) -> Path:
    """A local target as it is; an object-storage one as its copy staged under ``staging/sub``."""
    if isinstance(target, Path):
        return target
    if staging is None:
        raise EngineError(f"{target} is on object storage but no staging directory was made for it")
    return staging / sub / Remote(target).name


def _beside(target: Union[Path, str], what: str) -> Union[Path, str]:
    """``scores.parquet`` -> ``scores.sessions.parquet`` (``what="sessions"``) or ``scores.parquet.work``."""
    if isinstance(target, Path):
        if what == "work":
            return target.with_name(target.name + ".work")
        return target.with_name(f"{target.stem}.sessions{target.suffix or '.parquet'}")
    obj = Remote(target)
    if what == "work":
        return str(obj.with_name(obj.name + ".work"))
    stem, dot, suffix = obj.name.rpartition(".")
    return str(obj.with_name(f"{stem}.sessions.{suffix}" if dot else f"{obj.name}.sessions.parquet"))


def _check_remote_targets(remote: dict, out_t, sessions_t, work_t) -> None:
    """Object-storage outputs: one file each, distinct, outside the work dir, and never another's."""
    if str(out_t) == str(sessions_t):
        raise DataError(
            "the sessions output is the same path as the turn output; give --sessions-output another path",
            file=str(sessions_t),
        )
    base = str(work_t).split("?", 1)[0].rstrip("/") + "/"
    for key, t in (("output", out_t), ("sessions", sessions_t)):
        if isinstance(t, str) and isinstance(work_t, str) and t.split("?", 1)[0].startswith(base):
            raise DataError(
                f"the {key} output lies inside the work directory {work_t}, which is cleared after the "
                "job; choose another path",
                file=t,
            )
        if key in remote:
            what = f"the {key} output" if key == "sessions" else "the output"
            if output_format(Path(remote[key].name)) == "directory":
                raise DataError(
                    f"{what} on object storage must be one file (.parquet, .jsonl or .csv), not a directory", file=t
                )
            check_replaceable(remote[key], what)


def _say(text: str) -> None:
    """A line on standard error (dropped when nobody reads it any more)."""
    try:
        print(text, file=sys.stderr, flush=True)
    except (BrokenPipeError, ValueError, OSError):
        pass


def _spill(source, path: Path) -> None:
    """Write an in-memory source to ``path`` (Parquet, atomically): an Arrow table or batch, a
    RecordBatchReader (streamed), a pandas DataFrame, or a Hugging Face ``datasets.Dataset``."""
    with atomic_path(path) as tmp:
        if isinstance(source, pa.RecordBatchReader):
            with pq.ParquetWriter(tmp, source.schema) as w:
                for batch in source:
                    w.write_batch(batch)
        else:
            pq.write_table(_as_table(source), tmp)


class _TableSink:
    """Streams tables into one Parquet file, a Parquet directory, JSONL or CSV at ``path`` (a temporary)."""

    def __init__(self, path: Path, fmt: str, schema: pa.Schema) -> None:
        self.path, self.fmt, self.schema = path, fmt, schema
        self.count = 0
        if fmt == "parquet":
            self.writer = pq.ParquetWriter(path, schema)
        elif fmt == "directory":
            path.mkdir(parents=True)
        elif fmt == "jsonl":
            self.fh = open(path, "w", encoding="utf-8")
        elif fmt == "csv":
            import pyarrow.csv as pacsv

            from ..data._io import _csv_ready

            self._csv_ready = _csv_ready
            self.csv_schema = _csv_ready(schema.empty_table()).schema
            self.writer = pacsv.CSVWriter(str(path), self.csv_schema)
        else:  # pragma: no cover - output_format guards this
            raise OptionError(f"cannot write scores as {fmt!r}")

    def write(self, t: pa.Table) -> None:
        if self.fmt == "parquet":
            self.writer.write_table(t)
        elif self.fmt == "directory":
            pq.write_table(t, self.path / f"part-{self.count:05d}.parquet")
        elif self.fmt == "jsonl":
            from ..data._io import _write_jsonl

            _write_jsonl(t, self.fh)
        else:
            self.writer.write_table(self._csv_ready(t).cast(self.csv_schema))
        self.count += 1

    def close(self) -> None:
        if self.fmt in ("parquet", "csv"):
            self.writer.close()
        elif self.fmt == "jsonl":
            self.fh.flush()
            os.fsync(self.fh.fileno())
            self.fh.close()

    def count_rows(self) -> int:
        """Rows in the written file, read back from it (not from what was handed to ``write``)."""
        if self.fmt == "parquet":
            return pq.ParquetFile(self.path).metadata.num_rows
        if self.fmt == "directory":
            return sum(pq.ParquetFile(p).metadata.num_rows for p in self.path.glob("part-*.parquet"))
        if self.fmt == "jsonl":
            n = 0
            with open(self.path, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 22), b""):
                    n += chunk.count(b"\n")
            return n
        import pyarrow.csv as pacsv

        from ..data._io import CSV_PARSE

        first = self.csv_schema.names[0]
        reader = pacsv.open_csv(
            self.path,
            parse_options=CSV_PARSE,
            convert_options=pacsv.ConvertOptions(include_columns=[first], column_types={first: pa.string()}),
        )
        return sum(b.num_rows for b in reader)


def score(source, output: Optional[Union[str, os.PathLike]] = None, **options: Any) -> Union[pa.Table, JobResult]:
    """Score a turns dataset with the engine; returns the scores table when ``output`` is None.

    Options are ``Engine``'s and ``RoleConfig``'s, e.g.
    ``score("turns.parquet", method="cosine", executor="ray", num_workers=2)``.
    """
    options.setdefault("progress", False)
    result = Engine(**options).run(source, output)
    return result.table if output is None else result
