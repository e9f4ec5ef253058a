"""The duplicate-key check of a streamed input: found across batches, naming both rows, in bounded memory."""

import tracemalloc

import numpy as np
import pyarrow as pa
import pytest

from adherence.data import TURNS, DataError
from adherence.data._validate import KeyTracker


def _batches(n, size, dup_at=None):
    out = []
    for start in range(0, n, size):
        idx = np.arange(start, min(n, start + size))
        conv = (idx // 8).astype(np.int64)
        turn = (idx % 8).astype(np.int32)
        if dup_at is not None and start <= dup_at[1] < start + size:
            conv[dup_at[1] - start], turn[dup_at[1] - start] = dup_at[0] // 8, dup_at[0] % 8
        out.append(pa.table({"conversation_id": pa.array(conv).cast(pa.string()), "turn_index": pa.array(turn)}))
    return out


def test_a_duplicate_across_batches_names_both_rows():
    batches = _batches(50_000, 4096, dup_at=(10, 40_000))  # row 40,001 repeats row 11's key
    kt = KeyTracker(TURNS, file="t.jsonl", fetch=lambda rows, key: {r: ("1", 2) for r in rows})
    for i, b in enumerate(batches):
        kt.update(b, i * 4096)
    with pytest.raises(
        DataError, match=r"t.jsonl: row 40001, column 'turn_index': duplicate key .*first seen at row 11"
    ):
        kt.finish()


def test_the_check_across_batches_holds_about_17_bytes_a_row_at_its_peak():
    """8 bytes a row kept while streaming, about 17 at the end (it was 33: a concatenation, an argsort and a
    sorted copy at once); planning memory is this plus one batch."""
    n, size = 1_000_000, 65_536
    batches = _batches(n, size)
    kt = KeyTracker(TURNS)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for i, b in enumerate(batches):
            kt.update(b, i * size)
        held = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.reset_peak()
        kt.finish()
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert held / n == pytest.approx(8.0, abs=0.5)
    assert peak / n <= 18.0, peak / n
