import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from adherence.data import example_path, read_turns, write_table
from adherence.engine import Engine


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


@pytest.fixture(scope="session")
def synthetic():
    return synthetic_turns


@pytest.fixture(scope="module")
def s3():
    """A moto S3 server on loopback, the process environment pointing pyarrow (and subprocesses) at it; None without
    moto. Started before a module's Ray instance, its workers get the endpoint's environment too (a node's workers
    start with the environment the node started with)."""
    try:
        import moto  # noqa: F401
    except ImportError:
        yield None
        return
    from soak_s3 import s3_bucket  # the S3 fault run starts its server the same way

    with s3_bucket("jobs") as uri:
        yield uri


@pytest.fixture
def local_reference(tmp_path, synthetic):
    """12 synthetic conversations written to a file, and a local run's scores and sessions of it."""
    turns = synthetic(12)
    src = write_table(turns, tmp_path / "in.parquet")
    Engine(method="cosine", shard_size=10, progress=False, n_bootstrap=0).run(src, tmp_path / "ref.parquet")
    return src, pq.read_table(tmp_path / "ref.parquet"), pq.read_table(tmp_path / "ref.sessions.parquet")
