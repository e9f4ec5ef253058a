"""The engine façade: plan, execute, resume, merge, summarise."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..data import detect_format, run_metadata, write_run_metadata
from ..role import RoleConfig, aggregate_sessions, get_method
from ._executors import get_executor
from ._plan import _write_json_atomic, plan_job

__all__ = ["Engine", "JobResult", "score"]


@dataclass
class JobResult:
    """What a job produced: paths (or the table for in-memory runs) and its summary."""

    output: Optional[Path]
    sessions_output: Optional[Path]
    summary: dict
    table: Optional[pa.Table] = None
    sessions: Optional[pa.Table] = None


def _config_hash(config: RoleConfig) -> str:
    d = dataclasses.asdict(config)
    for k in ("progress", "device", "batch_size", "reference_file"):
        d.pop(k, None)
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=repr).encode()).hexdigest()[:16]


class Engine:
    """Score a turns dataset of any size: sharded by conversation, streamed, resumable.

    Args:
        method: a role method (``llm_judge`` default, ``cosine``, ...); ``config`` may
            be given instead, and further keyword options go to :class:`RoleConfig`.
        executor: ``local`` (in-process) or ``ray``.
        num_workers: Ray actors (ignored by ``local``).
        gpus_per_worker: GPUs per Ray actor (1 = one actor per GPU).
        ray_address: an existing Ray cluster (default: a local one).
        shard_size: turns per shard (conversations are never split).
        work_dir: where shards, their outputs and the job manifest live
            (default: ``<output>.work``).
        resume: reuse finished shards of an earlier run of the same job.
        n_bootstrap, seed: session confidence intervals.

    Example::

        from adherence import Engine
        result = Engine(method="cosine").run("turns.parquet", "scores.parquet")
        result.summary["turns_per_s"]
    """

    def __init__(self, *, method: Optional[str] = None, config: Optional[RoleConfig] = None, executor: str = "local",
                 num_workers: int = 1, gpus_per_worker: float = 0.0, ray_address: Optional[str] = None,
                 shard_size: int = 100_000, work_dir: Optional[Union[str, os.PathLike]] = None, resume: bool = False,
                 progress: bool = True, n_bootstrap: int = 1000, seed: int = 42, max_retries: int = 2,
                 batch_size: int = 65_536, **method_options: Any) -> None:
        if config is None:
            config = RoleConfig(method=method or "llm_judge", **method_options)
        elif method_options or (method and method != config.method):
            config = dataclasses.replace(config, method=method or config.method, **method_options)
        if executor not in ("local", "ray"):
            raise ValueError(f"`executor` must be 'local' or 'ray', got {executor!r}")
        if shard_size < 1 or num_workers < 1:
            raise ValueError("`shard_size` and `num_workers` must be >= 1")
        self.config = config
        self.executor_name = executor
        self.executor_kwargs = {"num_workers": num_workers, "address": ray_address,
                                "gpus_per_worker": gpus_per_worker, "max_retries": max_retries} if executor == "ray" else {}
        self.shard_size, self.work_dir, self.resume = shard_size, work_dir, resume
        self.progress, self.n_bootstrap, self.seed, self.batch_size = progress, n_bootstrap, seed, batch_size
        self._executor = None

    # ------------------------------------------------------------------ public

    def run(self, source, output: Optional[Union[str, os.PathLike]] = None, *,
            sessions_output: Optional[Union[str, os.PathLike]] = None) -> JobResult:
        """Score ``source`` (a path or an Arrow table) into ``output`` (Parquet file or directory, JSONL, CSV).

        With no ``output`` the result is returned in memory (``JobResult.table``).
        """
        start = time.perf_counter()
        tmp_ctx = tempfile.TemporaryDirectory(prefix="adherence-") if output is None else None
        try:
            if output is None:
                out_path = Path(tmp_ctx.name) / "scores.parquet"
            else:
                out_path = Path(output)
            work = Path(self.work_dir) if self.work_dir else out_path.with_name(out_path.name + ".work")
            if not self.resume and work.exists():
                shutil.rmtree(work)
            work.mkdir(parents=True, exist_ok=True)
            if isinstance(source, (pa.Table, pa.RecordBatch)):
                table = source if isinstance(source, pa.Table) else pa.Table.from_batches([source])
                src_path = work / "input.parquet"
                if not src_path.exists():
                    pq.write_table(table, src_path)
                source = src_path
            method = get_method(self.config.method)
            config = dataclasses.replace(self.config, progress=False)
            needs_references = method.uses_dataset_references(self.config)
            if not needs_references and self.executor_name == "ray":
                # Workers start (and load their models) while the input is being planned.
                self._executor = get_executor(self.executor_name, **self.executor_kwargs)
                self._executor.start(config)
            plan = plan_job(source, work, shard_size=self.shard_size, batch_size=self.batch_size,
                            collect_references=needs_references)
            if plan.reference_file:
                config = dataclasses.replace(config, reference_file=plan.reference_file)
            self._check_job_manifest(work, plan)
            results = self._execute(plan, work, config)
            summary = self._finalize(plan, work, out_path, sessions_output, results, start, source)
            result = JobResult(out_path if output is not None else None, summary.pop("_sessions_path"), summary)
            if output is None:
                result.table = pq.read_table(out_path)
                result.sessions = pq.read_table(result.sessions_output)
                result.sessions_output = None
            return result
        finally:
            if tmp_ctx is not None:
                tmp_ctx.cleanup()
            if self._executor is not None:
                self._executor.close()
                self._executor = None

    # ------------------------------------------------------------------ steps

    def _check_job_manifest(self, work: Path, plan) -> None:
        manifest = work / "job.json"
        job = {"config": _config_hash(self.config), "fingerprint": plan.fingerprint, "shard_size": plan.shard_size}
        if manifest.exists():
            old = json.loads(manifest.read_text())
            if old != job:
                # Different job in the same place: its shard outputs must not be mixed with ours.
                shutil.rmtree(work / "out", ignore_errors=True)
        _write_json_atomic(manifest, job)

    def _execute(self, plan, work: Path, config: RoleConfig) -> dict:
        from tqdm.auto import tqdm

        out_dir = work / "out"
        out_dir.mkdir(exist_ok=True)
        for stale in out_dir.glob(".*.tmp"):
            stale.unlink()  # leftovers of a killed run
        results: dict[int, dict] = {}
        tasks = []
        for s in plan.shards:
            done = out_dir / f"shard-{s.shard_id:05d}.done.json"
            if done.exists() and (out_dir / f"shard-{s.shard_id:05d}.parquet").exists():
                results[s.shard_id] = dict(json.loads(done.read_text()), resumed=True)
            else:
                tasks.append({"shard_id": s.shard_id, "input": s.path,
                              "output": str(out_dir / f"shard-{s.shard_id:05d}.parquet")})
        done_rows = sum(r["rows"] for r in results.values())
        bar = tqdm(total=plan.total_rows, initial=done_rows, unit="turn", desc=f"scoring ({self.config.method})",
                   disable=not self.progress, dynamic_ncols=True)

        def on_result(res: dict) -> None:
            _write_json_atomic(out_dir / f"shard-{res['shard_id']:05d}.done.json", res)
            results[res["shard_id"]] = res
            bar.update(res["rows"])

        try:
            if tasks:
                if self._executor is None:
                    self._executor = get_executor(self.executor_name, **self.executor_kwargs)
                self._executor.run(tasks, config, on_result)
        finally:
            bar.close()
        return results

    def _rescaler(self, shard_files: list[Path]):
        """Methods whose scale depends on the whole job (Mahalanobis with alpha='median') are rescaled here."""
        c = self.config
        if c.method not in ("mahalanobis", "pca_mahalanobis") or c.alpha != "median":
            return None
        col = f"{c.method}_distance"
        d = np.concatenate([pq.read_table(f, columns=[col]).column(col).to_numpy(zero_copy_only=False)
                            for f in shard_files]).astype(np.float64)
        d = d[np.isfinite(d)]
        med = float(np.median(d)) if len(d) else 0.0
        alpha = 1.0 / med if med > 0 else 1.0

        def apply(t: pa.Table) -> pa.Table:
            dist = t.column(col).to_numpy(zero_copy_only=False).astype(np.float64)
            ok = np.array([s == "ok" for s in t.column("status").to_pylist()])
            score = np.exp(-alpha * dist)
            new_score = pa.array([float(v) if k else None for v, k in zip(score, ok)], pa.float64())
            pred = pa.array([int(v >= c.threshold) if k else None for v, k in zip(score, ok)], pa.int8())
            t = t.set_column(t.column_names.index("score"), "score", new_score)
            return t.set_column(t.column_names.index("prediction"), "prediction", pred)

        return apply

    def _finalize(self, plan, work: Path, out_path: Path, sessions_output, results: dict, start: float, source) -> dict:
        shard_files = [work / "out" / f"shard-{s.shard_id:05d}.parquet" for s in plan.shards]
        rescale = self._rescaler(shard_files)
        schemas = [pq.read_schema(f) for f in shard_files]
        schema = pa.unify_schemas(schemas, promote_options="permissive")
        schema = pa.schema([f for f in schema if f.name != "_row"])
        if sessions_output is None:
            suffix = out_path.suffix or ".parquet"
            sessions_output = out_path.with_name(f"{out_path.stem}.sessions{suffix}")
        sessions_output = Path(sessions_output)
        fmt = detect_format(out_path) if out_path.suffix else "directory"
        out_path.parent.mkdir(parents=True, exist_ok=True)
        writer = _TableSink(out_path, fmt, schema)
        session_tables = []
        try:
            for f in shard_files:
                t = pq.read_table(f)
                if rescale is not None:
                    t = rescale(t)
                t = t.drop_columns(["_row"]) if "_row" in t.column_names else t
                t = _conform_schema(t, schema)
                writer.write(t)
                session_tables.append(aggregate_sessions(t, threshold=self.config.threshold,
                                                         strict_mode=self.config.strict_mode,
                                                         n_bootstrap=self.n_bootstrap, seed=self.seed))
        finally:
            writer.close()
        from ..data import write_table

        sessions = pa.concat_tables(session_tables, promote_options="permissive")
        write_table(sessions, sessions_output)
        elapsed = time.perf_counter() - start
        totals = {k: sum(r[k] for r in results.values()) for k in ("rows", "ok", "error", "unscored")}
        models = next((r.get("models") for r in results.values() if r.get("models")), {})
        summary = {
            "method": self.config.method, "turns": totals["rows"], "ok": totals["ok"], "error": totals["error"],
            "unscored": totals["unscored"], "sessions": sessions.num_rows, "shards": len(plan.shards),
            "shards_resumed": sum(1 for r in results.values() if r.get("resumed")), "elapsed_s": elapsed,
            "turns_per_s": totals["rows"] / elapsed if elapsed > 0 else None, "executor": self.executor_name,
        }
        meta = run_metadata(config=dataclasses.asdict(self.config), seed=self.seed, inputs=[source], models=models)
        meta["engine"] = {"executor": self.executor_name, **{k: v for k, v in self.executor_kwargs.items() if v is not None},
                          "shard_size": self.shard_size, "shards": len(plan.shards), "work_dir": str(work)}
        meta["summary"] = summary
        write_run_metadata(out_path, meta)
        write_run_metadata(sessions_output, meta)
        summary["_sessions_path"] = sessions_output
        return summary


def _conform_schema(t: pa.Table, schema: pa.Schema) -> pa.Table:
    cols = []
    for f in schema:
        if f.name in t.column_names:
            cols.append(t.column(f.name).cast(f.type))
        else:
            cols.append(pa.nulls(t.num_rows, f.type))
    return pa.Table.from_arrays(cols, schema=schema)


class _TableSink:
    """Streams shard tables into one Parquet file, a Parquet directory, JSONL or CSV, atomically."""

    def __init__(self, path: Path, fmt: str, schema: pa.Schema) -> None:
        self.path, self.fmt, self.schema = path, fmt, schema
        self.tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        self.count = 0
        if fmt == "parquet":
            self.writer = pq.ParquetWriter(self.tmp, schema)
        elif fmt == "directory":
            self.tmp.mkdir(parents=True, exist_ok=True)
        elif fmt == "jsonl":
            self.fh = open(self.tmp, "w", encoding="utf-8")
        elif fmt == "csv":
            self.parts: list = []
        else:
            raise ValueError(f"cannot write scores as {fmt!r}; use .parquet, .jsonl, .csv or a directory")

    def write(self, t: pa.Table) -> None:
        if self.fmt == "parquet":
            self.writer.write_table(t)
        elif self.fmt == "directory":
            pq.write_table(t, self.tmp / f"part-{self.count:05d}.parquet")
        elif self.fmt == "jsonl":
            from ..data._io import _write_jsonl

            _write_jsonl(t, self.fh)
        else:
            self.parts.append(t)
        self.count += 1

    def close(self) -> None:
        if self.fmt == "parquet":
            self.writer.close()
        elif self.fmt == "jsonl":
            self.fh.close()
        elif self.fmt == "csv":
            from ..data import write_table

            write_table(pa.concat_tables(self.parts) if self.parts else self.schema.empty_table(), self.tmp, format="csv")
        if self.path.exists() and self.path.is_dir():
            shutil.rmtree(self.path)
        os.replace(self.tmp, self.path)


def score(source, output: Optional[Union[str, os.PathLike]] = None, **options: Any) -> Union[pa.Table, JobResult]:
    """Score a turns dataset with the engine; returns the scores table when ``output`` is None.

    Options are :class:`Engine`'s and :class:`RoleConfig`'s, e.g.
    ``score("turns.parquet", method="cosine", executor="ray", num_workers=2)``.
    """
    options.setdefault("progress", False)
    result = Engine(**options).run(source, output)
    return result.table if output is None else result
