"""Spark (``local[2]``) gives the engine's scores on the same input, and refuses what it cannot do; a bad row is
that row's error. Its own file, apart from the Ray files (which share one test worker under ``-n 3``)."""

import pyarrow as pa
import pytest

import adherence
from adherence.data import example_path, read_turns
from adherence.role import RoleConfig
from tests._platforms import assert_same_scores, by_key, judge_config, spark_session


@pytest.fixture(scope="module")
def turns():
    return read_turns(example_path("role"))


@pytest.fixture(scope="module")
def spark():
    session = spark_session("local[2]", "adherence-tests", 3)
    yield session
    session.stop()


@pytest.mark.spark
@pytest.mark.parametrize("chunk_rows", [1, 5, 4096])
def test_spark_equals_the_engine(spark, turns, chunk_rows):
    from adherence.spark import score_dataframe

    ref = adherence.score(turns, method="cosine", n_bootstrap=0)
    out = score_dataframe(spark.createDataFrame(turns.to_pandas()), method="cosine", chunk_rows=chunk_rows)
    got = pa.Table.from_pandas(out.toPandas(), preserve_index=False)
    assert_same_scores(got, ref)
    assert got.num_rows == turns.num_rows and "rater_score" in got.column_names  # extra columns pass through


@pytest.mark.spark
def test_spark_judge_equals_the_engine(spark, turns, tiny_llama_dir):
    from adherence.spark import score_dataframe

    judge = judge_config(tiny_llama_dir)
    ref = adherence.score(turns, config=RoleConfig(method="llm_judge", judge=judge), n_bootstrap=0)
    out = score_dataframe(spark.createDataFrame(turns.to_pandas()), method="llm_judge", judge=judge, chunk_rows=7)
    assert_same_scores(pa.Table.from_pandas(out.toPandas(), preserve_index=False), ref)


@pytest.mark.spark
def test_spark_refuses_what_it_cannot_do(spark, turns):
    from adherence.spark import score_dataframe

    df = spark.createDataFrame(turns.to_pandas())
    with pytest.raises(ValueError, match="needs the whole job's ground truths"):
        score_dataframe(df, method="mahalanobis")
    with pytest.raises(ValueError, match="input column 'score' would be replaced"):
        score_dataframe(df.withColumnRenamed("rater_score", "score"), method="cosine")


@pytest.mark.spark
def test_spark_a_null_or_repeated_key_is_that_rows_error(spark, turns):
    """As in the engine's rows: the job completes, the bad rows say why, the others are the engine's scores."""
    from adherence.spark import score_dataframe

    rows = turns.to_pylist()
    dup = dict(rows[3], assistant="a second reply under the same key")
    orphan = dict(rows[5], conversation_id=None)
    dirty = pa.Table.from_pylist(rows + [dup, orphan], schema=turns.schema)
    out = score_dataframe(spark.createDataFrame(dirty.to_pandas()), method="cosine", chunk_rows=5)
    got = pa.Table.from_pandas(out.toPandas(), preserve_index=False).to_pylist()
    assert len(got) == len(rows) + 2
    errors = sorted((r["error"] or "") for r in got if r["status"] == "error")
    assert len(errors) == 2
    assert errors[0].startswith("duplicate key (conversation_id=") and "null conversation_id" in errors[1]
    good = pa.Table.from_pylist([r for r in got if r["status"] != "error"])
    ref = adherence.score(turns, method="cosine", n_bootstrap=0)
    good_by_key = by_key(good)
    want = by_key(ref)
    for k, w in want.items():
        if w["conversation_id"] == rows[3]["conversation_id"] and w["turn_index"] == rows[3]["turn_index"]:
            assert good_by_key[k]["assistant"] in (rows[3]["assistant"],)  # the first of the two keeps the key
        assert good_by_key[k]["score"] == pytest.approx(w["score"], abs=1e-6), k
