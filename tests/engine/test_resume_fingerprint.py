"""A resumed job reuses its finished shards exactly when nothing that decides a score changed."""

import dataclasses
import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from adherence._fingerprint import score_fingerprint, score_hash
from adherence.data import example_path, metadata_path
from adherence.engine import Engine
from adherence.judges import JudgeConfig
from adherence.role import RoleConfig


def _judge_config(model, **opts):
    options = {"device": "cpu", "progress": False, **opts}
    return RoleConfig(method="llm_judge", judge=JudgeConfig(model=str(model), backend_options=options), progress=False)


def _unpublish(out):
    """The state a job killed before it published leaves: its work dir, no output (an output published from the
    same input with the same options is kept as it is by --resume, which then scores nothing)."""
    for p in (out, out.with_name(out.name.replace(".parquet", ".sessions.parquet"))):
        p.unlink()
        metadata_path(p).unlink()


def _run(config, out, **kw):
    return Engine(config=config, shard_size=8, n_bootstrap=0, keep_work_dir=True, **kw).run(example_path("role"), out)


@pytest.mark.slow
def test_cosmetic_options_reuse_every_shard_and_score_options_do_not(tmp_path, tiny_llama_dir):
    out = tmp_path / "s.parquet"
    first = _run(_judge_config(tiny_llama_dir), out)
    scores = pq.read_table(out)
    assert first.summary["shards"] > 1
    # what the CLI's --no-progress, --device, --batch-tokens, --judge-cache and --batch-size change: nested
    # backend options and top-level ones alike
    cosmetic = dataclasses.replace(
        _judge_config(tiny_llama_dir, progress=True, batch_tokens=512),
        batch_size=3,
        progress=True,
        judge=dataclasses.replace(
            _judge_config(tiny_llama_dir, progress=True, batch_tokens=512).judge, cache=str(tmp_path / "c.sqlite")
        ),
    )
    again = _run(cosmetic, out, resume=True)
    assert again.summary["shards_resumed"] == first.summary["shards"]
    assert pq.read_table(out).equals(scores)
    # a backend option that can change the numbers (the judge's dtype, here set where it was left to auto) starts over
    other = _run(_judge_config(tiny_llama_dir, dtype="float32"), out, resume=True)
    assert other.summary["shards_resumed"] == 0


@pytest.mark.slow
def test_a_changed_threshold_gives_that_thresholds_predictions(tmp_path, tiny_llama_dir):
    out = tmp_path / "s.parquet"
    _run(_judge_config(tiny_llama_dir), out)
    scores = np.array(pq.read_table(out).column("score").to_pylist(), dtype=float)
    cut = float(np.median(scores))  # between the scores, so the predictions must change
    again = _run(dataclasses.replace(_judge_config(tiny_llama_dir), threshold=cut), out, resume=True)
    t = pq.read_table(out)
    assert again.summary["shards_resumed"] == 0
    pred = np.array(t.column("prediction").to_pylist())
    np.testing.assert_array_equal(pred, (np.array(t.column("score").to_pylist()) >= cut).astype(int))
    assert 0 < pred.sum() < len(pred)


def test_the_fingerprint_leaves_out_exactly_the_declared_cosmetic_options():
    base = RoleConfig(
        method="llm_judge",
        judge=JudgeConfig(
            model="m",
            backend="openai",
            backend_options={"base_url": "http://a/v1", "api_key": "k", "concurrency": 4, "request_timeout": 9, "x": 1},
        ),
    )
    fp = score_fingerprint(base)
    assert fp["judge"]["backend_options"] == {"x": 1} and "cache" not in fp["judge"]
    assert not {"progress", "device", "batch_size", "reference_file"} & set(fp)
    moved = dataclasses.replace(
        base,
        device="cuda",
        judge=dataclasses.replace(
            base.judge, backend_options={"base_url": "http://b/v1", "concurrency": 64, "max_retries": 9, "x": 1}
        ),
    )
    assert score_hash(moved) == score_hash(base)
    for changed in (
        dataclasses.replace(base, threshold=0.7),
        dataclasses.replace(base, judge=dataclasses.replace(base.judge, backend_options={"x": 2})),
        dataclasses.replace(base, judge=dataclasses.replace(base.judge, top_logprobs=5)),
        dataclasses.replace(base, judge=dataclasses.replace(base.judge, backend="vllm")),
    ):
        assert score_hash(changed) != score_hash(base)


@pytest.mark.parametrize("backend", ["transformers", "vllm", "openai", "someones_own"])
def test_an_unknown_option_of_any_backend_counts(backend):
    cfg = JudgeConfig(model="m", backend="openai" if backend == "someones_own" else backend)
    cfg = dataclasses.replace(cfg, backend=backend) if backend == "someones_own" else cfg
    a = dataclasses.replace(cfg, backend_options={"new_knob": 1})
    b = dataclasses.replace(cfg, backend_options={"new_knob": 2})
    assert score_hash(a) != score_hash(b)


def test_the_same_bytes_at_another_path_are_the_same_input(tmp_path, synthetic):
    from adherence.data import write_table

    src = write_table(synthetic(10), tmp_path / "in.parquet")
    first = Engine(method="kl", shard_size=8, progress=False, n_bootstrap=0, keep_work_dir=True).run(
        src, tmp_path / "o.parquet"
    )
    moved = tmp_path / "elsewhere" / "copy.parquet"
    moved.parent.mkdir()
    moved.write_bytes(src.read_bytes())
    _unpublish(tmp_path / "o.parquet")
    again = Engine(method="kl", shard_size=8, progress=False, n_bootstrap=0, resume=True, keep_work_dir=True).run(
        moved, tmp_path / "o.parquet"
    )
    assert again.summary["shards_resumed"] == first.summary["shards"]
    meta = json.loads(metadata_path(tmp_path / "o.parquet").read_text())
    assert meta["inputs"][0]["path"] == str(moved)  # the run names the input it read


def test_work_a_resume_cannot_reuse_is_named_with_the_reason(tmp_path, synthetic, recwarn):
    from adherence.data import write_table

    src = write_table(synthetic(10), tmp_path / "in.parquet")
    run = dict(method="kl", shard_size=8, progress=False, n_bootstrap=0, keep_work_dir=True)
    Engine(**run).run(src, tmp_path / "o.parquet")
    with pytest.warns(
        UserWarning,
        match=r"--resume: the earlier work in .* is not reused: options that decide "
        r"scores changed \(kl_beta 1\.0 -> 2\.0, threshold 0\.5 -> 0\.3\)",
    ):
        Engine(**run, resume=True, kl_beta=2.0, threshold=0.3).run(src, tmp_path / "o.parquet")
    _unpublish(tmp_path / "o.parquet")
    with pytest.warns(UserWarning, match=r"not reused: the shard size changed \(8 -> 5\)"):
        Engine(**dict(run, shard_size=5), resume=True, kl_beta=2.0, threshold=0.3).run(src, tmp_path / "o.parquet")
    write_table(synthetic(11), src)
    with pytest.warns(UserWarning, match=r"not reused: the input's content changed"):
        Engine(**dict(run, shard_size=5), resume=True, kl_beta=2.0, threshold=0.3).run(src, tmp_path / "o.parquet")
    recwarn.clear()
    Engine(**dict(run, shard_size=5), resume=True, kl_beta=2.0, threshold=0.3).run(src, tmp_path / "o.parquet")
    assert not [w for w in recwarn if "--resume" in str(w.message)]  # nothing discarded, nothing said
