"""Cast a table to a contract and locate every problem by row and column."""

from __future__ import annotations

import json
import math
from typing import Any, Optional, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ._contracts import Contract
from ._errors import DataError

TableLike = Union[pa.Table, pa.RecordBatch]

__all__ = ["conform", "KeyTracker", "cast_column", "cast_values", "conform_schema"]


def conform_schema(t: pa.Table, schema: pa.Schema) -> pa.Table:
    """``t`` with exactly ``schema``'s columns, in order: present ones cast, missing ones null."""
    cols = []
    for f in schema:
        if f.name in t.column_names:
            cols.append(t.column(f.name).cast(f.type))
        else:
            cols.append(pa.nulls(t.num_rows, f.type))
    return pa.Table.from_arrays(cols, schema=schema)


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _type_name(t: pa.DataType) -> str:
    if pa.types.is_list(t):
        return f"a list of {_type_name(t.value_type)}"
    return {
        "string": "a string",
        "int32": "an integer (int32)",
        "int8": "an integer (int8)",
        "double": "a number (float64)",
        "bool": "a boolean",
    }.get(str(t), str(t))


def _parse_list_value(value: Any) -> Optional[list]:
    """A list column read from CSV arrives as text: accept a JSON array."""
    if value is None or isinstance(value, list):
        return value
    if isinstance(value, str):
        text = value.strip()
        if text == "":
            return None
        parsed = json.loads(text)
        if isinstance(parsed, list):
            return parsed
    raise ValueError("not a list")


def _cast_one(value: Any, target: pa.DataType) -> Any:
    """Cast a single Python value, raising ValueError with a short reason on failure."""
    if value is None:
        return None
    if isinstance(value, float) and math.isnan(value) and pa.types.is_integer(target):
        raise ValueError("NaN is not an integer")
    if pa.types.is_list(target):
        value = _parse_list_value(value)
        if value is None:
            return None
        bad = [v for v in value if v is not None and not isinstance(v, str)]
        if bad and pa.types.is_string(target.value_type):
            raise ValueError(f"list item {_short(bad[0])} is not a string")
        return value
    try:
        arr = pa.array([value])
        return arr.cast(target, safe=True)[0].as_py()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, OverflowError) as exc:
        raise ValueError(str(exc).split("\n")[0]) from None


def cast_column(
    arr: Union[pa.Array, pa.ChunkedArray],
    target: pa.DataType,
    *,
    column: str,
    file: Optional[str] = None,
    row_offset: int = 0,
) -> pa.Array:
    """Cast ``arr`` to ``target``; on failure name the first bad row (1-based, + ``row_offset``)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks else pa.array([], type=arr.type)
    if arr.type.equals(target):
        return arr
    if not (pa.types.is_list(target) and pa.types.is_string(arr.type)):
        # Integer-valued strings should not become ints silently elsewhere, but numbers and
        # booleans read as text (e.g. an id column inferred as int64) are fine as strings.
        try:
            return arr.cast(target, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            pass
    return cast_values(arr.to_pylist(), target, column=column, file=file, row_offset=row_offset)


def cast_values(values: list, target: pa.DataType, *, column: str, file: Optional[str], row_offset: int) -> pa.Array:
    """Python values one by one into ``target``; the first that does not fit is a ``DataError`` naming its row
    (1-based, + ``row_offset``) and column."""
    out = []
    for i, value in enumerate(values):
        try:
            out.append(_cast_one(value, target))
        except (ValueError, json.JSONDecodeError) as exc:
            raise DataError(
                f"expected {_type_name(target)}, got {_short(value)} ({exc})",
                file=file,
                row=row_offset + i + 1,
                column=column,
            ) from None
    try:
        return pa.array(out, type=target)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:  # pragma: no cover - defensive
        raise DataError(f"cannot build {_type_name(target)}: {exc}", file=file, column=column) from None


def _first_index(mask: pa.Array) -> int:
    idx = pc.index(mask, True).as_py()
    return int(idx)


def conform(
    table: TableLike,
    contract: Contract,
    *,
    file: Optional[str] = None,
    row_offset: int = 0,
) -> pa.Table:
    """Validate ``table`` against ``contract`` and return it cast to the contract's types.

    Contract columns come first in contract order, then extra columns untouched.

    Raises:
        DataError: a required column is missing, a value cannot be cast, a
            non-nullable value is null, or a value is outside a closed vocabulary.
    """
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    names = table.column_names
    missing = [c for c in contract.required if c not in names]
    if missing:
        listed = ", ".join(repr(m) for m in missing)
        raise DataError(
            f"missing required column(s) {listed} for {contract.name}; found: "
            f"{', '.join(names) if names else 'no columns'}"
            + (
                " (a table named otherwise: give its names with --columns NAME=COLUMN,...)"
                if contract.name == "turns" and names
                else ""
            ),
            file=file,
            column=missing[0],
        )
    arrays, fields = [], []
    for col in contract.columns:
        if col.name not in names:
            continue
        arr = cast_column(table.column(col.name), col.type, column=col.name, file=file, row_offset=row_offset)
        if not col.nullable and arr.null_count:
            row = _first_index(arr.is_null())
            raise DataError(
                "value is missing (null) but is required", file=file, row=row_offset + row + 1, column=col.name
            )
        if col.choices is not None and len(arr):
            allowed = pa.array(list(col.choices), type=arr.type)
            bad = pc.and_(pc.invert(pc.is_in(arr, value_set=allowed)), arr.is_valid())
            if pc.any(bad).as_py():
                row = _first_index(bad)
                raise DataError(
                    f"{_short(arr[row].as_py())} is not one of {', '.join(map(repr, col.choices))}",
                    file=file,
                    row=row_offset + row + 1,
                    column=col.name,
                )
        arrays.append(arr)
        fields.append(pa.field(col.name, col.type, nullable=True))
    for name in names:
        if name not in contract.names:
            arrays.append(table.column(name))
            fields.append(table.schema.field(name))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


_MIX = np.uint64(0x100000001B3)


def _column_hashes(arr) -> np.ndarray:
    """A uint64 hash per value of one column (stable within a process; nulls hash alike)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if pa.types.is_integer(arr.type):
        return arr.fill_null(-1).to_numpy().astype(np.int64).view(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    enc = arr.dictionary_encode()
    uniq = np.array([hash(v) for v in enc.dictionary.to_pylist()], dtype=np.int64).view(np.uint64)
    idx = enc.indices.fill_null(-1).to_numpy()
    out = np.full(len(idx), np.uint64(0x51ED270B27A3F2D1))
    ok = idx >= 0
    out[ok] = uniq[idx[ok]]
    return out


class KeyTracker:
    """Find duplicate keys across the batches of one stream, in 8 bytes per row.

    Each row's key is reduced to a 64-bit hash; duplicates inside a batch are
    reported at once, duplicates across batches when the stream ends
    (``finish``). A suspected duplicate is confirmed on the real key values
    (``fetch`` re-reads them by row) before it is reported, naming both rows.
    """

    def __init__(self, contract: Contract, *, file: Optional[str] = None, fetch=None) -> None:
        self.contract = contract
        self.file = file
        self.fetch = fetch
        self._hashes: list[np.ndarray] = []
        self._key: Optional[list[str]] = None

    def _keys(self, table: pa.Table) -> list[str]:
        return [k for k in self.contract.key if k in table.column_names]

    def _raise(self, key: list[str], values: tuple, row: int, first: int) -> None:
        shown = ", ".join(f"{k}={v!r}" for k, v in zip(key, values))
        raise DataError(f"duplicate key ({shown}); first seen at row {first}", file=self.file, row=row, column=key[-1])

    def update(self, table: pa.Table, row_offset: int = 0) -> None:
        key = self._keys(table)
        if not key:
            return
        self._key = key
        h = np.zeros(table.num_rows, dtype=np.uint64)
        for k in key:
            h = (h * _MIX) ^ _column_hashes(table.column(k))
        _, first_idx, counts = np.unique(h, return_index=True, return_counts=True)
        if (counts > 1).any():  # confirm on the values of this batch
            columns = [table.column(k).to_pylist() for k in key]
            seen: dict = {}
            for i, values in enumerate(zip(*columns)):
                first = seen.setdefault(values, i)
                if first != i:
                    self._raise(key, values, row_offset + i + 1, row_offset + first + 1)
        self._hashes.append(h)

    def finish(self) -> None:
        """Check duplicates across batches; call once the whole stream has been seen.

        Peak memory about 17 bytes per row: the kept hashes (8), one sorted copy (8) to find the hash values that
        repeat, a byte per row to mark them; the rows holding those values are then found batch by batch.
        """
        if len(self._hashes) < 2 or self._key is None:
            return
        s = np.concatenate(self._hashes)
        s.sort()
        repeated = s[1:][s[1:] == s[:-1]]
        del s
        if not len(repeated):
            return
        repeated = np.unique(repeated)
        rows_of: dict = {}
        offset = 0
        for h in self._hashes:
            for i in np.flatnonzero(np.isin(h, repeated)):
                rows_of.setdefault(int(h[i]), []).append(offset + int(i))
            offset += len(h)
        pairs = sorted(((a, b) for rs in rows_of.values() for a, b in zip(rs, rs[1:])), key=lambda p: p[1])
        rows = sorted({r for p in pairs for r in p})
        values = self.fetch(rows, self._key) if self.fetch is not None else None
        for first, row in pairs:
            if values is None or values[first] == values[row]:
                self._raise(self._key, values[row] if values else (), row + 1, first + 1)
