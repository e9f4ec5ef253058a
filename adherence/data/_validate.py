"""Cast a table to a contract and locate every problem by row and column."""

from __future__ import annotations

import json
import math
from typing import Any, Optional, Union

import pyarrow as pa
import pyarrow.compute as pc

from ._contracts import Contract
from ._errors import DataError

TableLike = Union[pa.Table, pa.RecordBatch]

__all__ = ["conform", "KeyTracker", "cast_column"]


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
    if value is None:
        return None
    if isinstance(value, list):
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
    values = arr.to_pylist()
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
            f"{', '.join(names) if names else 'no columns'}",
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
            raise DataError("value is missing (null) but is required", file=file, row=row_offset + row + 1, column=col.name)
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


class KeyTracker:
    """Find duplicate keys across the batches of one stream.

    Keeps each key seen with its first row so the error can name both rows.
    """

    def __init__(self, contract: Contract, *, file: Optional[str] = None) -> None:
        self.contract = contract
        self.file = file
        self._seen: dict[tuple, int] = {}

    def update(self, table: pa.Table, row_offset: int = 0) -> None:
        key = [k for k in self.contract.key if k in table.column_names]
        if not key:
            return
        columns = [table.column(k).to_pylist() for k in key]
        seen = self._seen
        for i, values in enumerate(zip(*columns)):
            first = seen.setdefault(values, row_offset + i + 1)
            if first != row_offset + i + 1:
                shown = ", ".join(f"{k}={v!r}" for k, v in zip(key, values))
                raise DataError(
                    f"duplicate key ({shown}); first seen at row {first}",
                    file=self.file,
                    row=row_offset + i + 1,
                    column=key[-1],
                )
