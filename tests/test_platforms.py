"""Ray Data and Spark give the engine's scores on the same input, and refuse what they cannot do."""

import os
import shutil
import sys

import pyarrow as pa
import pytest

import adherence
from adherence.data import example_path, read_turns
from adherence.judges import JudgeConfig
from adherence.role import RoleConfig


def _by_key(t: pa.Table) -> dict:
    return {(r["conversation_id"], r["turn_index"]): r for r in t.to_pylist()}


def _assert_same_scores(got: pa.Table, ref: pa.Table) -> None:
    a, b = _by_key(got), _by_key(ref)
    assert a.keys() == b.keys()
    for k, want in b.items():
        assert a[k]["status"] == want["status"] and a[k]["prediction"] == want["prediction"], k
        if want["score"] is None:
            assert a[k]["score"] is None
        else:
            assert a[k]["score"] == pytest.approx(want["score"], abs=1e-6), k


@pytest.fixture(scope="module")
def turns():
    return read_turns(example_path("role"))


def _judge(tiny_llama_dir):
    return JudgeConfig(model=str(tiny_llama_dir), backend_options={"device": "cpu", "progress": False})


# --------------------------------------------------------------------------- Ray Data


@pytest.fixture(scope="module")
def ray_local():
    ray = pytest.importorskip("ray")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _collect(ray, ds) -> pa.Table:
    return pa.concat_tables(ray.get(ds.to_arrow_refs()), promote_options="permissive")


@pytest.mark.ray
def test_ray_data_equals_the_engine(ray_local, turns, tiny_llama_dir):
    import ray.data

    from adherence.ray_data import score_dataset

    ref = adherence.score(turns, method="cosine", n_bootstrap=0)
    got = _collect(ray_local, score_dataset(ray.data.from_arrow(turns), method="cosine", concurrency=1))
    _assert_same_scores(got, ref)
    assert got.num_rows == turns.num_rows and set(got.column("method").to_pylist()) == {"cosine"}
    judge = _judge(tiny_llama_dir)
    ref = adherence.score(turns, config=RoleConfig(method="llm_judge", judge=judge), n_bootstrap=0)
    got = _collect(ray_local, score_dataset(ray.data.from_arrow(turns), method="llm_judge", judge=judge))
    _assert_same_scores(got, ref)


@pytest.mark.ray
def test_ray_data_refuses_job_wide_methods(ray_local, turns):
    import ray.data

    from adherence.ray_data import RoleScorer, score_dataset

    with pytest.raises(ValueError, match="needs the whole job's ground truths"):
        score_dataset(ray.data.from_arrow(turns), method="kl")
    with pytest.raises(ValueError, match="needs the whole job's ground truths"):
        RoleScorer(method="knn", reference_pool="dataset")
    with pytest.raises(ValueError, match="leave none for the grouping shuffle"):  # instead of waiting forever
        score_dataset(ray.data.from_arrow(turns), method="cosine", concurrency=2)


# --------------------------------------------------------------------------- Spark


@pytest.fixture(scope="module")
def spark():
    pytest.importorskip("pyspark")
    if not shutil.which("java") and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark needs Java")
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (SparkSession.builder.master("local[2]").appName("adherence-tests").config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "3").getOrCreate())
    yield session
    session.stop()


@pytest.mark.spark
@pytest.mark.parametrize("chunk_rows", [1, 5, 4096])
def test_spark_equals_the_engine(spark, turns, chunk_rows):
    from adherence.spark import score_dataframe

    ref = adherence.score(turns, method="cosine", n_bootstrap=0)
    out = score_dataframe(spark.createDataFrame(turns.to_pandas()), method="cosine", chunk_rows=chunk_rows)
    got = pa.Table.from_pandas(out.toPandas(), preserve_index=False)
    _assert_same_scores(got, ref)
    assert got.num_rows == turns.num_rows and "rater_score" in got.column_names  # extra columns pass through


@pytest.mark.spark
def test_spark_judge_equals_the_engine(spark, turns, tiny_llama_dir):
    from adherence.spark import score_dataframe

    judge = _judge(tiny_llama_dir)
    ref = adherence.score(turns, config=RoleConfig(method="llm_judge", judge=judge), n_bootstrap=0)
    out = score_dataframe(spark.createDataFrame(turns.to_pandas()), method="llm_judge", judge=judge, chunk_rows=7)
    _assert_same_scores(pa.Table.from_pandas(out.toPandas(), preserve_index=False), ref)


@pytest.mark.spark
def test_spark_refuses_what_it_cannot_do(spark, turns):
    from adherence.spark import score_dataframe

    df = spark.createDataFrame(turns.to_pandas())
    with pytest.raises(ValueError, match="needs the whole job's ground truths"):
        score_dataframe(df, method="mahalanobis")
    with pytest.raises(ValueError, match="input column 'score' would be replaced"):
        score_dataframe(df.withColumnRenamed("rater_score", "score"), method="cosine")
