import pyarrow as pa
import pytest

from adherence.data import example_path, read_turns


def synthetic_turns(n_conversations: int, unique: bool = True) -> pa.Table:
    """``n_conversations`` copies of the bundled example's conversations, texts made unique per copy."""
    base = read_turns(example_path("role")).to_pylist()
    rows = []
    for k in range(n_conversations):
        src = [r for r in base if r["conversation_id"] == base[(k * 5) % len(base)]["conversation_id"]]
        for r in src:
            r = dict(r)
            r["conversation_id"] = f"{r['conversation_id']}-{k}"
            if unique:
                r["assistant"] = f"{r['assistant']} (ref {k})"
                r["ground_truth_assistant"] = f"{r['ground_truth_assistant']} (case {k})"
            rows.append(r)
    return pa.Table.from_pylist(rows)


@pytest.fixture
def synthetic():
    return synthetic_turns
