"""The engine façade: ``Engine`` composes the parts of a scoring job.

``run_job`` (``_area``) resolves, checks and takes the job's targets and work directory; the plan (``_plan``) shards
the input; the scheduler (``_schedule``) runs the shards; the merger (``_merge``) checks and writes them as the
outputs with a typed summary; ``JobArea.publish`` commits them with their metadata. What may be reused on
``--resume`` is ``_resume``'s. The cascade (``adherence.cascade``) composes the same frame with its own body.
"""

from __future__ import annotations

import dataclasses
import os
import time
import warnings
from pathlib import Path
from typing import Any, Optional, Union

import pyarrow as pa

from .._errors import OptionError
from ..data import DataError, check_file, run_metadata, skipped_summary
from ..role import RoleConfig, get_method, missing_references, tensor_parallel_config
from ._area import Job, JobArea, JobResult
from ._commit import bad_rows_header, quarantine_of
from ._merge import JobSummary, merge_shards, summarise
from ._options import EngineOptions
from ._plan import job_fingerprint, plan_job
from ._resume import check_job_manifest, job_manifest, published_already
from ._safety import output_columns, reserved_columns
from ._schedule import Scheduler
from ._sink import spill

__all__ = ["Engine", "JobResult", "score"]


class Engine(Job):
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
            check_file(options.ground_truth)  # missing or unreadable: one line now, not after the models load
            options = dataclasses.replace(options, ground_truth=str(Path(options.ground_truth).resolve()))
        self.config, self.options = config, options
        self._scheduler: Optional[Scheduler] = None
        # a pass of a larger job (a cascade's stage): its outputs are that job's work, not the command's outputs
        self.intermediate = intermediate

    @property
    def executor_kwargs(self) -> dict:
        """The Ray executor's options (none for the local one)."""
        return self.options.executor_kwargs()

    def _before(self) -> None:
        self._check_device()
        self._scheduler = Scheduler(self.options)

    def _after(self) -> None:
        if self._scheduler is not None:
            self._scheduler.close()
            self._scheduler = None

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

    def _check_bad_share(self, plan, source, area: JobArea) -> None:
        """Refuse (exit 2) a job whose input lost more than ``max_bad_rows`` of its records as unreadable: the
        records left out are written to ``<output>.bad-rows.jsonl`` first, so the one line names where they are."""
        limit = self.options.max_bad_rows
        if not plan.quarantined or plan.quarantined <= limit * max(plan.records, 1):
            return
        from ..data import DataError
        from ._commit import store_of

        q = quarantine_of(area.commit.output)  # checked at start-up: missing, or this output's earlier one
        rows = Path(plan.quarantine).read_text(encoding="utf-8") if plan.quarantine else ""
        tmp = area.work / "bad-rows.published.jsonl"
        tmp.write_text(bad_rows_header(area.commit.output) + rows, encoding="utf-8")
        store_of(q).put(tmp, q)
        share = plan.quarantined / max(plan.records, 1)
        raise DataError(
            f"{plan.quarantined} of {plan.records} records ({share:.0%}) could not be read, over --max-bad-rows "
            f"{limit:g}: nothing was scored; they are listed with their line and reason in {q} (fix them, or allow "
            "more with --max-bad-rows)",
            file=str(source),
        )

    def _body(self, source, area: JobArea, start: float) -> dict:
        """The job's body: plan, schedule, merge, publish (inside its work area)."""
        work = area.work
        if not isinstance(source, (str, os.PathLike)):
            src_path = work / "input.parquet"
            if not src_path.exists():
                spill(source, src_path)
            source = src_path
        from ..data import TranscriptOptions

        o = self.options
        transcripts = TranscriptOptions(o.input_format, o.role, o.bad_rows, columns=o.column_map)
        fingerprint = None  # without --resume the plan hashes the input while workers start
        if self.options.resume:
            fingerprint = job_fingerprint(source, transcripts, self.options.ground_truth)
            done = published_already(self.config, area, fingerprint, start)
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
        scheduler = self._scheduler
        assert scheduler is not None
        rw = area.remote_work
        # Ray workers start (and load their models) while the input is being planned (a method that needs
        # reference texts waits for the plan to show there are some).
        workers = scheduler.start_early(
            config, work, rw, load=not needs_references and not method.needs_reference_texts
        )
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
        self._check_bad_share(plan, source, area)
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
                stacklevel=3,
            )
        if check_job_manifest(self.config, work, plan, self.options.resume) and rw is not None:
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
        results = scheduler.run(plan, work, rw, config)
        return dict(self._finalize(plan, area, results, start, source))

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

    def _finalize(self, plan, area: JobArea, results: dict, start: float, source) -> JobSummary:
        """Merge the shards into the outputs and publish them with their metadata; the job's summary."""
        publisher = area.publisher()
        out_final = area.commit.output
        try:
            merged = merge_shards(
                plan,
                area.work,
                publisher,
                (out_final, area.commit.sessions),
                (area.out_path, area.sessions_path),
                self.config,
                self.options,
            )
            scheduler = self._scheduler
            summary = summarise(
                self.config.method,
                plan,
                results,
                merged,
                time.perf_counter() - start,
                self.options.executor,
                scheduler.stats if scheduler is not None else None,
            )
            if plan.skipped:
                summary["skipped_records"] = skipped_summary(plan.skipped)
            if self.options.bad_rows == "skip" or plan.quarantined or area.replace_quarantine:
                # every row left out, with its file, line and reason (with --bad-rows skip, written even when there
                # is none; by default, for transcripts, whenever one was left out)
                q = quarantine_of(out_final)
                rows = Path(plan.quarantine).read_text(encoding="utf-8") if plan.quarantine else ""
                publisher.add_text(q, bad_rows_header(out_final) + rows)  # the header owns the file by content
                summary["bad_rows"] = {"count": plan.quarantined, "file": str(q)}
            # The plan hashed the input already (resume by content): record that digest, do not hash it again.
            models: dict = next((r.models for r in results.values() if r.models), {})
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
            manifest = job_manifest(self.config, plan.fingerprint, None)
            area.publish(
                publisher,
                meta,
                dict(summary),
                merged.rows,
                engine=self.options.engine_record(
                    area.names["work"],
                    shards=len(plan.shards),
                    input_fingerprint=plan.fingerprint,
                    score={k: manifest[k] for k in ("config", "options")},
                ),
                job=self.job,
            )
        finally:
            publisher.discard()
        return summary


def _recorded_config(config: RoleConfig) -> dict:
    """The job's options as its metadata records them: an applied calibration by its path, file digest,
    threshold and kind of map, not the map's knots (a large isotonic file would be copied into every
    metadata file)."""
    d = dataclasses.asdict(config)
    cal = d.get("calibration")
    if isinstance(cal, dict) and isinstance(cal.get("map"), dict):
        d["calibration"] = dict(cal, map=cal["map"].get("method"))
    return d


def score(source, output: Optional[Union[str, os.PathLike]] = None, **options: Any) -> Union[pa.Table, JobResult]:
    """Score a turns dataset with the engine; returns the scores table when ``output`` is None.

    Options are ``Engine``'s and ``RoleConfig``'s, e.g.
    ``score("turns.parquet", method="cosine", executor="ray", num_workers=2)``.
    """
    options.setdefault("progress", False)
    result = Engine(**options).run(source, output)
    return result.table if output is None else result
