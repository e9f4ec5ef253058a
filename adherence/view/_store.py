"""The viewer's queries: score outputs of any size, left where they are (Parquet scanned by DuckDB, never loaded
into Python objects), answered with bounded results."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from .._errors import OptionError
from .._optional import require
from ..data import STAGE_SCORE

__all__ = ["Filters", "ScoreStore", "query_value"]


def _duckdb_type(t) -> str:
    """The DuckDB type the viewer reads an Arrow contract type as."""
    import pyarrow as pa

    if pa.types.is_floating(t):
        return "DOUBLE"
    if pa.types.is_integer(t):
        return "BIGINT"
    if pa.types.is_boolean(t):
        return "BOOLEAN"
    return "VARCHAR"


def _viewer_columns() -> dict:
    """The columns the viewer reads (absent ones are NULL) with their types, from the data contracts: the turn's key
    and texts (``TURNS``), and what a score output adds (``TURN_SCORES``: the score and its decision, a calibration's
    ``calibrated_score``, a cascade's ``decided_by``)."""
    from ..data import TURN_SCORES, TURNS

    turns = ("conversation_id", "turn_index", "role", "user", "assistant", "label")
    scores = ("method", "score", "prediction", "status", "error", "reason", "calibrated_score", "decided_by")
    cols = {c: _duckdb_type(TURNS.column(c).type) for c in turns}
    cols.update({c: _duckdb_type(TURN_SCORES.column(c).type) for c in scores})
    return cols


VIEW_COLUMNS = _viewer_columns()


def _stage_number(column: str) -> int:
    m = STAGE_SCORE.fullmatch(column)
    return int(m.group(1)) if m else 0


_SORTS = {
    "worst": "mean_score ASC NULLS LAST, violations DESC, conversation_id",
    "violations": "violations DESC, mean_score ASC NULLS LAST, conversation_id",
    "problems": "problems DESC, mean_score ASC NULLS LAST, conversation_id",
    "id": "conversation_id, source",
}
_MAX_LIMIT = 500


def query_value(query: dict, name: str, kind: Any = None) -> Any:
    """One URL query parameter (``{name: [value]}``): None when absent or empty, else the value, converted by
    ``kind`` when given (a malformed number is an ``OptionError`` naming it)."""
    v = (query.get(name) or [None])[0]
    if v in (None, ""):
        return None
    if kind is None:
        return v
    try:
        return kind(v)
    except ValueError:
        raise OptionError(f"{name} must be {'an integer' if kind is int else 'a number'}, got {v!r}") from None


@dataclass
class Filters:
    """What the list and the distributions are restricted to (every value is a bound query parameter)."""

    status: Optional[str] = None
    label: Optional[str] = None
    prediction: Optional[int] = None
    method: Optional[str] = None
    min_score: Optional[float] = None
    max_score: Optional[float] = None
    role: Optional[str] = None
    q: Optional[str] = None
    source: Optional[int] = None

    @classmethod
    def from_query(cls, query: dict) -> Filters:
        """From URL query parameters (``{name: [value]}``); a malformed number is an ``OptionError``."""

        def one(name: str) -> Optional[str]:
            return query_value(query, name)

        def num(name: str, kind: Any) -> Any:
            return query_value(query, name, kind)

        return cls(
            status=one("status"),
            label=one("label"),
            prediction=num("prediction", int),
            method=one("method"),
            min_score=num("min", float),
            max_score=num("max", float),
            role=one("role"),
            q=one("q"),
            source=num("source", int),
        )

    def where(self) -> tuple[str, list]:
        parts: list[str] = []
        params: list = []
        for col, v in (("status", self.status), ("label", self.label), ("method", self.method),
                       ("role", self.role), ("prediction", self.prediction), ("source", self.source)):  # fmt: skip
            if v is not None:
                parts.append(f"{col} = ?")
                params.append(v)
        if self.min_score is not None:
            parts.append("score >= ?")
            params.append(self.min_score)
        if self.max_score is not None:
            parts.append("score <= ?")
            params.append(self.max_score)
        if self.q:  # the words as typed: % and _ match themselves
            like = "%" + self.q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            parts.append("(user ILIKE ? ESCAPE '\\' OR assistant ILIKE ? ESCAPE '\\')")
            params += [like, like]
        return (" WHERE " + " AND ".join(parts)) if parts else "", params


@dataclass
class _Source:
    path: str
    rows: int
    columns: list = field(default_factory=list)


class ScoreStore:
    """One or more score outputs (a Parquet file or directory, JSONL, CSV, or an object-storage URI), queried as
    one table ``turns`` with a ``source`` column (the output's position).

    Parquet stays on disk and is scanned per query (DuckDB reads only the columns and row groups it needs); JSONL
    and CSV outputs, which cannot be scanned that way, are read into Arrow once.
    """

    def __init__(
        self,
        paths: list,
        *,
        allow_unpublished: bool = False,
        labels: Optional[str] = None,
        columns: Optional[dict] = None,
    ) -> None:
        duckdb = require("duckdb", "view")
        #: the outputs' own names of the columns the viewer reads (``{"conversation_id": "chat_id", ...}``)
        self.columns = dict(columns or {})
        from ..engine import inspect_output

        if not paths:
            raise OptionError("give at least one score output")
        #: outputs whose metadata says they were never published (opened only with allow_unpublished)
        self.unpublished = [str(p) for p in paths if not inspect_output(p, allow_unpublished=allow_unpublished)[2]]
        self.con = duckdb.connect(":memory:")
        self.con.execute(f"SET threads TO {max(1, min(4, os.cpu_count() or 1))}").fetchall()
        self._lock = threading.Lock()
        self.sources: list[_Source] = []
        found = []
        back = {v: k for k, v in self.columns.items()}  # an output's column -> the viewer's name
        cid, ti, mc = (self.columns.get(k, k) for k in ("conversation_id", "turn_index", "method"))  # the outputs'
        for i, p in enumerate(paths):
            name = f"src{i}"
            schema = self._register(str(p), name)
            cols = [back.get(c, c) for c in schema.names]  # the viewer's names
            for c in ("conversation_id", "turn_index", "score"):
                if c not in cols:
                    from ..data import DataError

                    raise DataError(
                        f"not a score output: no {c} column (name the table's own with --columns {c}=COLUMN)",
                        file=str(p),
                        column=c,
                    )
            from ..engine import check_score_types

            check_score_types(schema, str(p))
            try:
                key = ", ".join('"' + c + '"' for c in (cid, ti, *([mc] if "method" in cols else [])))
                rows, keys = self.con.execute(f"SELECT count(*), count(DISTINCT ({key})) FROM {name}").fetchall()[0]
            except duckdb.Error as exc:
                from ..data import DataError
                from ..engine import first_line

                raise DataError(f"cannot read it as a score output ({first_line(exc)})", file=str(p)) from None
            if keys != rows:
                from ..data import DataError

                raise DataError(f"{rows - keys} turn(s) appear more than once: a score output has one row per turn",
                                file=str(p))  # fmt: skip
            self.sources.append(_Source(str(p), int(rows), cols))
            found += [c for c in cols if STAGE_SCORE.fullmatch(c)]
        # a cascade's per-stage scores, NULL where an output has none
        self.stage_columns = sorted(set(found), key=_stage_number)
        wanted = {**VIEW_COLUMNS, **{c: "DOUBLE" for c in self.stage_columns}}
        #: the labels file laid over the outputs' turns (``labels``), and the label value that means adherent
        self.labels: Optional[dict] = None
        if labels is not None:
            self.labels = self._register_labels(labels)
        selects = []
        for i, src in enumerate(self.sources):
            exprs = [
                (
                    f'CAST("{self.columns.get(c, c)}" AS {t}) AS "{c}"'
                    if c in src.columns
                    else f'CAST(NULL AS {t}) AS "{c}"'
                )
                for c, t in wanted.items()
            ]
            if self.labels is not None:  # the file's label where it has one for the turn, else the output's own
                lc = self.columns.get("label", "label")
                own = f'CAST("{lc}" AS VARCHAR)' if "label" in src.columns else "CAST(NULL AS VARCHAR)"
                exprs[list(wanted).index("label")] = (
                    f"coalesce((SELECT l.label FROM given_labels l WHERE l.conversation_id = "
                    f'CAST(src{i}."{cid}" AS VARCHAR) AND l.turn_index = CAST(src{i}."{ti}" AS BIGINT)), '
                    f'{own}) AS "label"'
                )
            selects.append(f"SELECT {i} AS source, {', '.join(exprs)} FROM src{i}")
        self.con.execute("CREATE VIEW turns AS " + " UNION ALL ".join(selects)).fetchall()
        self.rows = sum(s.rows for s in self.sources)

    def _register_labels(self, path: str) -> dict:
        """The labels file (``adherence.data.read_labels``: JSONL or CSV, one label per turn) as the table
        ``given_labels``; ``{"file", "n", "positive"}`` (positive: the value that means adherent, when the file's
        values name one)."""
        import pyarrow as pa

        from ..data import adherent_values, read_labels

        given, _, _ = read_labels(path).resolved()  # one label per turn (a disputed turn has none)
        keys = list(given)
        table = pa.table({
            "conversation_id": pa.array([str(c) for c, _ in keys], pa.string()),
            "turn_index": pa.array([int(t) for _, t in keys], pa.int64()),
            "label": pa.array([str(given[k]) for k in keys], pa.string()),
        })  # fmt: skip
        self.con.register("given_labels", table)
        values = sorted(set(table.column("label").to_pylist()))
        hits = adherent_values(values)
        return {"file": str(path), "n": len(keys), "positive": hits[0] if len(hits) == 1 else None}

    def _register(self, path: str, name: str):
        """Make ``name`` a view (Parquet) or a table (other formats) of the output at ``path``; its Arrow schema."""
        from ..data import DataError

        lower = path.lower().split("?", 1)[0]
        is_remote = "://" in path and not path.startswith("file://")
        if is_remote:
            import pyarrow.dataset as ds

            from ..data import Remote

            r = Remote(path)
            dataset = ds.dataset(r.path, filesystem=r.fs, format="parquet")
            self.con.register(name, dataset)
        elif lower.endswith((".jsonl", ".json", ".csv")):
            from ..data import read_table

            self.con.register(name, read_table(path))
        else:
            p = Path(path)
            if not p.exists():
                raise DataError("no such score output", file=path)
            files = [str(p)] if p.is_file() else sorted(str(f) for f in p.glob("*.parquet"))
            if not files:
                raise DataError("a directory output with no Parquet parts", file=path)
            duckdb = require("duckdb", "view")
            try:
                self.con.read_parquet(files, union_by_name=True).create_view(name)
            except duckdb.Error as exc:
                from ..engine import first_line

                raise DataError(f"cannot read it as a score output ({first_line(exc)})", file=path) from None
        # a relation's Arrow table (not a DB-API result's, which DuckDB warns copies the rows); DuckDB 2 names it
        # to_arrow_table, 1.x arrow
        rel = self.con.sql(f"SELECT * FROM {name} LIMIT 0")
        schema = (getattr(rel, "to_arrow_table", None) or rel.arrow)().schema
        from ..engine import check_key_types

        check_key_types(schema.empty_table(), path)  # the key and decision columns' types, as the one reader checks
        return schema

    def _query(self, sql: str, params: Optional[list] = None) -> list[dict]:
        with self._lock:  # one DuckDB connection; the HTTP server's threads take turns
            cur = self.con.execute(sql, params or [])
            names = [d[0] for d in cur.description]
            return [dict(zip(names, row)) for row in cur.fetchall()]

    # ------------------------------------------------------------------ answers

    def summary(self) -> dict:
        """Sizes, and the values the filters offer (statuses, labels, methods; roles by frequency, at most 200)."""

        def values(col: str, limit: int = 200) -> list:
            rows = self._query(
                f'SELECT "{col}" AS v, count(*) AS n FROM turns WHERE "{col}" IS NOT NULL GROUP BY 1 ORDER BY n DESC, v LIMIT {limit}'
            )
            return [[r["v"], r["n"]] for r in rows]

        head = self._query(
            "SELECT count(*) AS turns, count(DISTINCT (source, conversation_id)) AS conversations, "
            "min(score) AS min_score, max(score) AS max_score FROM turns"
        )[0]
        return {
            "sources": [{"path": s.path, "rows": s.rows} for s in self.sources],
            "labels_file": self.labels,
            **head,
            "statuses": values("status"),
            "labels": values("label"),
            "methods": values("method"),
            "roles": values("role"),
            "stage_columns": self.stage_columns,
        }

    def conversations(self, f: Filters, *, sort: str = "worst", offset: int = 0, limit: int = 50) -> dict:
        """Conversations with a turn that matches, ranked (worst first by default), with their numbers over the
        matching turns; ``total`` is how many match."""
        if sort not in _SORTS:
            raise OptionError(f"sort must be one of {', '.join(_SORTS)}, got {sort!r}")
        limit = max(1, min(int(limit), _MAX_LIMIT))
        offset = max(0, int(offset))
        where, params = f.where()
        grouped = (
            "SELECT source, conversation_id, count(*) AS turns, avg(score) AS mean_score, "
            "avg(CASE WHEN prediction = 0 THEN 1.0 WHEN prediction = 1 THEN 0.0 END) AS violations, "
            "count(*) FILTER (WHERE status IN ('error', 'unscored')) AS problems, "
            "count(*) FILTER (WHERE status = 'abstained') AS abstained, "
            "min(score) AS min_score, any_value(role) AS role, any_value(method) AS method"
            f"{self._agreement_sql()} FROM turns{where} GROUP BY source, conversation_id"
        )
        rows = self._query(
            f"SELECT *, count(*) OVER () AS total FROM ({grouped}) ORDER BY {_SORTS[sort]} LIMIT {limit} OFFSET {offset}",
            params,
        )
        total = rows[0]["total"] if rows else self._query(f"SELECT count(*) AS n FROM ({grouped})", params)[0]["n"]
        for r in rows:
            r.pop("total", None)
            if r["role"] and len(r["role"]) > 160:
                r["role"] = r["role"][:157] + "..."
        return {"total": int(total), "offset": offset, "limit": limit, "sort": sort, "rows": rows}

    def _agreement_sql(self) -> str:
        """With a labels file whose values name the adherent one: each conversation's labelled turns and the share
        whose prediction agrees with the label."""
        positive = (self.labels or {}).get("positive")
        if positive is None:
            return ""
        p = positive.replace("'", "''")
        return (
            ", count(label) AS labelled, "
            f"avg(CASE WHEN label IS NULL OR prediction IS NULL THEN NULL WHEN (label = '{p}') = (prediction = 1) "
            "THEN 1.0 ELSE 0.0 END) AS agreement"
        )

    def conversation(self, source: int, conversation_id: str) -> dict:
        """Every turn of one conversation, in order (any method it was scored with)."""
        cols = ", ".join(f'"{c}"' for c in [*VIEW_COLUMNS, *self.stage_columns])
        turns = self._query(
            f"SELECT {cols} FROM turns WHERE source = ? AND conversation_id = ? ORDER BY method, turn_index",
            [int(source), str(conversation_id)],
        )
        if not turns:
            raise KeyError(conversation_id)
        return {
            "source": int(source),
            "conversation_id": str(conversation_id),
            "role": turns[0]["role"],
            "turns": turns,
        }

    def distributions(self, f: Filters, *, bins: int = 20) -> dict:
        """Score histogram per label, violation share by role and by turn index, over the matching turns."""
        where, params = f.where()
        rng = self._query(f"SELECT min(score) AS lo, max(score) AS hi FROM turns{where}", params)[0]
        lo, hi = rng["lo"], rng["hi"]
        hist: dict = {}
        if lo is not None:
            width = (hi - lo) / bins if hi > lo else 1.0
            rows = self._query(
                f"SELECT coalesce(label, '(no label)') AS label, least({bins - 1}, CAST(floor((score - ?) / ?) AS INTEGER)) AS b, "
                f"count(*) AS n FROM turns{where}{' AND' if where else ' WHERE'} score IS NOT NULL GROUP BY 1, 2",
                [lo, width, *params],
            )
            for r in rows:
                hist.setdefault(r["label"], [0] * bins)[int(r["b"])] = int(r["n"])
        by_role = self._query(
            "SELECT role, count(*) AS turns, avg(CASE WHEN prediction = 0 THEN 1.0 WHEN prediction = 1 THEN 0.0 END) "
            f"AS violations FROM turns{where} GROUP BY role ORDER BY turns DESC LIMIT 20",
            params,
        )
        for r in by_role:
            if r["role"] and len(r["role"]) > 80:
                r["role"] = r["role"][:77] + "..."
        by_turn = self._query(
            "SELECT turn_index, count(*) AS turns, avg(CASE WHEN prediction = 0 THEN 1.0 WHEN prediction = 1 THEN 0.0 "
            f"END) AS violations FROM turns{where} GROUP BY turn_index ORDER BY turn_index LIMIT 100",
            params,
        )
        return {"bins": {"lo": lo, "hi": hi, "n": bins}, "histogram": hist, "by_role": by_role, "by_turn": by_turn}
