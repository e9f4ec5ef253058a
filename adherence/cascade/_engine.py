"""``adherence score --cascade``: a judge cascade run as resumable sharded passes of the engine.

Stage 1 scores every turn. The turns it does not accept (its confidence below the fitted threshold, or no score)
go to stage 2 as a second engine pass over the conversations that hold them: every turn of those conversations
is in the pass, so a judge's prompt has the same history as in a full run, but only the undecided turns are
scored (the others are context, ``score_turn`` false: no judge call). And so on; after the last stage a turn
no stage accepted is ``status=abstained``.

Each pass is an ``Engine`` job (its shards, checkpoints, executor, progress and ``--resume``) with its work under
``<work dir>/cascade/``; the merged output is published through the job's own commit, so the outputs, their
metadata and the rules about what may be replaced are those of every other job.
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import Any, Optional

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .._atomic import atomic_path
from .._errors import EngineError, OptionError
from ..data import metadata_path, run_metadata, stage_score
from ..engine import (
    Engine,
    EngineOptions,
    Job,
    JobArea,
    TableSink,
    output_format,
    reserved_columns,
    say,
    spill,
    store_of,
)
from ..role import RoleConfig, aggregate_sessions, get_method
from ..stats import apply_cascade, verdict_confidence

__all__ = ["CascadeEngine", "stage_name"]


def stage_name(config: RoleConfig) -> str:
    """``llm_judge (model, layout user)`` / ``cosine``: a stage in a line."""
    if not get_method(config.method).uses_judge or config.judge is None:
        return config.method
    j = config.judge
    model = j.model or "the bundled judge"
    return f"llm_judge ({os.path.basename(str(model).rstrip('/')) or model}, {j.backend}, layout {j.layout})"


class CascadeEngine(Job):
    """Score turns through a fitted cascade (``adherence cascade fit``): stage 1 on every turn, each later stage on
    the turns the earlier ones left, each as an engine pass.

    Args:
        cascade: the cascade file's content (``load_cascade``).
        configs: each stage's scoring options (``stage_configs``).
        options: how the passes run (executor, shard size, checkpoints, ``resume``, ``work_dir`` ...).
        cascade_path: where the file was read (recorded in the metadata with its digest).
    """

    def __init__(
        self,
        cascade: dict,
        configs: list,
        *,
        options: Optional[EngineOptions] = None,
        job: Optional[dict] = None,
        cascade_path: Optional[str] = None,
    ) -> None:
        if len(configs) != len(cascade["stages"]):
            raise OptionError(f"{len(configs)} stage configs for a cascade of {len(cascade['stages'])} stages")
        # the first stage's engine checks the job's options (and the device) as every engine does
        self._first = Engine(config=configs[0], options=options)
        self.options, self.job = self._first.options, job
        self.cascade, self.configs, self.cascade_path = cascade, list(configs), cascade_path

    def _before(self) -> None:
        self._first._check_device()

    def _body(self, source, area: JobArea, start: float) -> dict:
        work = area.work
        if area.remote_work is not None:
            raise OptionError(
                "--cascade keeps its stage passes in a local work directory: give --work-dir PATH on this machine "
                "(the outputs may still go to object storage)"
            )
        if not isinstance(source, (str, os.PathLike)):
            src = work / "input.parquet"
            if not src.exists():
                spill(source, src)
            source = src
        root = work / "cascade"
        root.mkdir(exist_ok=True)
        stages = self.cascade["stages"]
        n_stages = len(stages)
        first: Optional[pa.Table] = None
        keys: Optional[np.ndarray] = None
        arrays: list = []
        per_stage: list[dict] = []
        scores: list = []
        statuses: list = []
        errors: list = []
        models: dict = {}
        pending: Optional[np.ndarray] = None
        stage_input: Any = source
        for k, (config, st) in enumerate(zip(self.configs, stages), start=1):
            out_k = root / f"stage{k}.parquet"
            opts = dataclasses.replace(self.options, work_dir=str(root / f"stage{k}"), keep_work_dir=True)
            if k > 1:  # the pass reads the flat turns this job wrote, not the user's transcripts
                opts = dataclasses.replace(opts, input_format="auto", role=None, bad_rows=None)
            what = "every turn" if k == 1 else f"the {int(pending.sum()):,} turns left"  # type: ignore[union-attr]
            say(f"cascade stage {k}/{n_stages}: {stage_name(config)} on {what}")
            result = Engine(config=config, options=opts, intermediate=True).run(stage_input, out_k)
            s = result.summary
            if s.get("failed_shards"):
                raise EngineError(
                    f"cascade stage {k}: {len(s['failed_shards'])} shard(s) failed ({s.get('failure', '')}); "
                    "nothing was published; --resume scores them again"
                )
            table = pq.read_table(out_k)
            meta = store_of(out_k).read_json(metadata_path(out_k)) or {}
            models.update({f"stage{k}:{m}": v for m, v in (meta.get("models") or {}).items()})
            if first is None:
                first = table
                keys = _keys(table)
                pending = _scored_rows(table)
                index = np.arange(table.num_rows)
            else:
                assert keys is not None
                index = _align(keys, _keys(table), k)
            n = first.num_rows
            score = np.full(n, np.nan)
            status = np.full(n, None, dtype=object)
            error = np.full(n, None, dtype=object)
            reached = np.zeros(n, dtype=bool)
            got = table.column("status").to_pylist()
            scored_here = np.array([g != "skipped" for g in got], dtype=bool)
            rows = index[scored_here]
            reached[rows] = True
            score[rows] = (
                table.column("score").cast(pa.float64()).fill_null(np.nan).to_numpy(zero_copy_only=False)[scored_here]
            )
            status[rows] = np.asarray(got, dtype=object)[scored_here]
            error[rows] = np.asarray(table.column("error").to_pylist(), dtype=object)[scored_here]
            pred = None
            if "prediction" in table.column_names:
                p = table.column("prediction").cast(pa.float64()).fill_null(np.nan).to_numpy(zero_copy_only=False)
                pred = np.full(n, np.nan)
                pred[rows] = p[scored_here]
            verdict, confidence = verdict_confidence(score, float(st.get("score_threshold", config.threshold)), pred)
            verdict[~reached], confidence[~reached] = np.nan, np.nan
            arrays.append((verdict, confidence))
            scores.append(score)
            statuses.append(status)
            errors.append(error)
            _, decided = apply_cascade(arrays, [s.get("threshold") for s in stages[:k]])
            decided_now = int((decided == k).sum())
            pending = pending & (decided == 0)
            per_stage.append(
                {
                    "stage": k,
                    "method": config.method,
                    "judge": stage_name(config) if get_method(config.method).uses_judge else None,
                    "threshold": st.get("threshold"),
                    "turns": int(reached.sum()),
                    "rows": s["turns"],
                    "decided": decided_now,
                    "elapsed_s": s["elapsed_s"],
                    "turns_scored": s.get("turns_scored"),
                    "turns_reused": s.get("turns_reused"),
                    "judge_usage": s.get("judge_usage") or {},
                }
            )
            if k == n_stages or not pending.any():
                break
            stage_input = root / f"stage{k + 1}-input.parquet"
            _write_pass_input(first, pending, stage_input, self.configs[0])
        assert first is not None and keys is not None
        return self._publish_cascade(first, arrays, scores, statuses, errors, per_stage, models, source, area, start)

    def _publish_cascade(
        self, first, arrays, scores, statuses, errors, per_stage, models, source, area: JobArea, start
    ) -> dict:
        stages = self.cascade["stages"]
        n = first.num_rows
        verdict, decided = apply_cascade(arrays, [s.get("threshold") for s in stages[: len(arrays)]])
        context = ~_scored_rows(first)
        status = np.where(decided > 0, "ok", "abstained").astype(object)
        # What the last stage to reach each turn made of it: an undecided turn it could not score is an error (with
        # that stage's message), not an abstention.
        last_status = np.full(n, None, dtype=object)
        last_error = np.full(n, None, dtype=object)
        for k, (st, er) in enumerate(zip(statuses, errors), start=1):
            r = np.array([v is not None for v in st], dtype=bool)
            last_status[r] = st[r]
            last_error[r] = [f"stage {k}: {e}" for e in er[r]]
        bad = (decided == 0) & (last_status == "error")
        status[bad] = "error"
        error = np.full(n, None, dtype=object)
        error[bad] = last_error[bad]
        status[context] = "skipped"
        base = _input_columns(first, self.configs[0])
        ok = status == "ok"
        cols = {
            "method": pa.array(["cascade"] * n, pa.string()),
            "score": pa.array(np.where(ok, verdict, np.nan), pa.float64(), mask=~ok),
            "prediction": pa.array(np.where(ok, verdict, 0).astype(np.int8), pa.int8(), mask=~ok),
            "status": pa.array(list(status), pa.string()),
            "error": pa.array(list(error), pa.string()),
            "decided_by": pa.array(decided.astype(np.int32), pa.int32(), mask=decided == 0),
        }
        for k, s in enumerate(scores, start=1):
            cols[stage_score(k)] = pa.array(s, pa.float64(), mask=~np.isfinite(s))
        for k in range(len(scores) + 1, len(stages) + 1):  # stages no turn reached
            cols[stage_score(k)] = pa.nulls(n, pa.float64())
        table = base
        for name, arr in cols.items():
            if name in table.column_names:
                table = table.drop_columns([name])
            table = table.append_column(name, arr)
        sessions = aggregate_sessions(
            table, threshold=0.5, n_bootstrap=self.options.n_bootstrap, seed=self.options.seed
        )
        id_type = first.schema.field("conversation_id").type
        if id_type != pa.string():
            sessions = sessions.set_column(0, "conversation_id", sessions.column("conversation_id").cast(id_type))
        summary = self._cascade_summary(status, decided, per_stage, start)
        summary["sessions"] = sessions.num_rows
        publisher = area.publisher()
        try:
            for t, final, path in (
                (table, area.commit.output, area.out_path),
                (sessions, area.commit.sessions, area.sessions_path),
            ):
                sink = TableSink(publisher.temporary(final), output_format(path), t.schema)
                publisher.add(sink.path, final)
                sink.write(t)
                sink.close()
            meta = run_metadata(
                config={"method": "cascade", "cascade": self._recorded_cascade()},
                seed=self.options.seed,
                inputs=[source],
                models=models,
                hash_inputs=False,
            )
            area.publish(
                publisher, meta, summary, n, engine=self.options.engine_record(area.names["work"]), job=self.job
            )
        finally:
            publisher.discard()
        return summary

    def _recorded_cascade(self) -> dict:
        c = self.cascade
        digest = None
        if self.cascade_path and os.path.exists(self.cascade_path):
            from ..data import file_digest

            digest = file_digest(self.cascade_path, "sha256")
        return {
            "path": self.cascade_path,
            "digest": digest,
            "alpha": c.get("alpha"),
            "delta": c.get("delta"),
            "labels_from": c.get("labels_from"),
            "guarantee": c.get("guarantee"),
            "fitted_on": c.get("n"),
            "stages": [
                {
                    "stage": i,
                    "method": cfg.method,
                    "name": stage_name(cfg),
                    "threshold": st.get("threshold"),
                    "score_threshold": st.get("score_threshold"),
                }
                for i, (cfg, st) in enumerate(zip(self.configs, c["stages"]), start=1)
            ],
        }

    def _cascade_summary(self, status, decided, per_stage: list, start: float) -> dict:
        n_scored = int((status != "skipped").sum())
        elapsed = time.perf_counter() - start
        summary: dict[str, Any] = {
            "method": "cascade",
            "turns": len(status),
            "ok": int((status == "ok").sum()),
            "error": int((status == "error").sum()),
            "unscored": 0,
            "abstained": int((status == "abstained").sum()),
            "skipped": int((status == "skipped").sum()),
            "sessions": None,
            "shards": None,
            "shards_resumed": 0,
            "failed_shards": [],
            "elapsed_s": elapsed,
            "turns_per_s": n_scored / elapsed if elapsed > 0 else None,
            "executor": self.options.executor,
            "stages": per_stage,
            "guarantee": self.cascade.get("guarantee"),
        }
        for st in per_stage:
            st["share_decided"] = st["decided"] / max(1, n_scored)
        last = per_stage[-1]
        n_stages = len(self.cascade["stages"])
        if len(per_stage) == n_stages and last["turns"]:
            # the last stage's measured cost per turn, times every turn: what scoring all with it would cost
            per_turn = last["elapsed_s"] / last["turns"]
            cost = {
                "last_stage": n_stages,
                "estimated_s": per_turn * n_scored,
                "cascade_s": sum(st["elapsed_s"] for st in per_stage),
                "escalated_to_last": last["turns"],
                "escalated_share": last["turns"] / max(1, n_scored),
            }
            usage = last["judge_usage"]
            for key in ("calls", "prompt_tokens", "forward_tokens"):
                if key in usage:
                    cost[f"estimated_{key}"] = round(usage[key] / last["turns"] * n_scored)
                    cost[f"cascade_{key}"] = sum(int((st["judge_usage"] or {}).get(key, 0)) for st in per_stage)
            cost["time_share"] = cost["cascade_s"] / cost["estimated_s"] if cost["estimated_s"] > 0 else None
            summary["cost_vs_last_stage"] = cost
        return summary


def _keys(table: pa.Table) -> np.ndarray:
    cid = table.column("conversation_id").cast(pa.string()).to_pylist()
    ti = table.column("turn_index").to_pylist()
    return np.array([f"{c}\x00{t}" for c, t in zip(cid, ti)], dtype=object)


def _align(keys: np.ndarray, other: np.ndarray, stage: int) -> np.ndarray:
    """Where each row of a later pass sits among the first pass's rows."""
    where = {k: i for i, k in enumerate(keys)}
    try:
        return np.array([where[k] for k in other], dtype=np.int64)
    except KeyError as exc:  # pragma: no cover - the pass input is made from the first pass's rows
        raise EngineError(f"cascade stage {stage} returned a turn the first pass did not have ({exc})") from None


def _scored_rows(table: pa.Table) -> np.ndarray:
    """Rows the cascade decides: all but the input's own context rows (``score_turn`` false)."""
    return np.asarray(table.column("status").to_pylist(), dtype=object) != "skipped"


def _input_columns(scored: pa.Table, config: RoleConfig) -> pa.Table:
    """A pass's output without what its scoring added: the turns as they were read."""
    return scored.drop_columns(reserved_columns(config.method, scored.column_names, config))


def _write_pass_input(first: pa.Table, pending: np.ndarray, path: Path, config: RoleConfig) -> None:
    """The next pass's turns: every turn of the conversations holding an undecided one (history for the judge),
    with ``score_turn`` true only on the undecided turns."""
    cid = np.asarray(first.column("conversation_id").cast(pa.string()).to_pylist(), dtype=object)
    wanted = set(cid[pending])
    keep = np.array([c in wanted for c in cid], dtype=bool)
    t = _input_columns(first, config).filter(pa.array(keep))
    if "score_turn" in t.column_names:
        t = t.drop_columns(["score_turn"])
    t = t.append_column("score_turn", pa.array(pending[keep], pa.bool_()))
    with atomic_path(path) as tmp:
        pq.write_table(t, tmp)
