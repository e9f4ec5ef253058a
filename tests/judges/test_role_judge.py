import numpy as np
import pyarrow as pa
import pytest

from adherence.data import example_path, read_turns
from adherence.judges import JudgeCache, JudgeConfig, RoleJudge
from adherence.role import Resources, RoleConfig, score_turns


@pytest.fixture(scope="module")
def turns():
    return read_turns(example_path("role"))


def _judge(backend, **kw):
    return RoleJudge(JudgeConfig(model="tiny", **kw), backend=backend)


def test_continuous_scores_every_turn(tiny_judge, turns):
    cols = _judge(tiny_judge).score(turns)
    assert set(cols["status"]) == {"ok"}
    assert all(0.0 <= s <= 1.0 for s in cols["score"])
    assert set(cols["p_yes_source"]) == {"full_vocab"}  # in-process: exact over the whole vocabulary
    assert all(0.0 < m <= 1.0 for m in cols["yes_no_mass"])
    top = _judge(tiny_judge, full_vocab=False).score(turns)
    # a random judge's top-20 holds neither yes nor no: every turn is unscored with its reason, never a 0.5
    assert set(top["status"]) == {"unscored"} and set(top["score"]) == {None}
    assert all("neither a yes nor a no token among the first token's top 20" in e for e in top["error"])


def test_top_logprobs_give_the_exact_p_yes_when_yes_and_no_are_in_reach(tiny_yes_no_judge, turns):
    """What a server's top-20 sees, when "yes" and "no" are in it, is the whole-vocabulary P(yes)."""
    exact = _judge(tiny_yes_no_judge).score(turns)
    top = _judge(tiny_yes_no_judge, full_vocab=False).score(turns)
    assert set(top["status"]) == {"ok"} and set(top["p_yes_source"]) == {"logprobs"}
    np.testing.assert_allclose(top["score"], exact["score"], atol=1e-6)
    assert np.std(top["score"]) > 0.01  # P(yes) varies by turn: the comparison is not between constants


def test_rows_are_scored_in_conversation_order_whatever_the_input_order(tiny_judge, turns):
    base = _judge(tiny_judge).score(turns)["score"]
    perm = np.random.default_rng(0).permutation(turns.num_rows)
    shuffled = _judge(tiny_judge).score(turns.take(pa.array(perm)))["score"]
    np.testing.assert_allclose(np.array(shuffled), np.array(base)[perm], atol=1e-5)


def test_bad_rows_get_errors_and_the_rest_is_kept(tiny_judge, turns):
    assistants = turns.column("assistant").to_pylist()
    assistants[1] = ""
    t = turns.set_column(turns.column_names.index("assistant"), "assistant", pa.array(assistants))
    cols = _judge(tiny_judge).score(t)
    assert cols["status"][1] == "error" and cols["error"][1] == "empty assistant turn"
    assert cols["status"].count("ok") == turns.num_rows - 1


def test_binary_mode_unparseable_is_unscored_never_zero(tiny_judge, turns):
    cols = _judge(tiny_judge, output_mode="binary").score(turns.slice(0, 6))
    for s, st, e in zip(cols["score"], cols["status"], cols["error"]):
        if st == "unscored":
            assert s is None and e.startswith("unparseable judge answer")
        else:
            assert st == "ok" and s in (0.0, 1.0)


def test_cache_makes_reruns_free_and_keys_the_repeat(tiny_judge, turns, tmp_path):
    path = tmp_path / "judge.sqlite"
    first = _judge(tiny_judge, cache=str(path)).score(turns)
    calls = tiny_judge.stats["forward_tokens"]
    again = RoleJudge(JudgeConfig(model="tiny", cache=str(path)), backend=tiny_judge)
    second = again.score(turns)
    assert tiny_judge.stats["forward_tokens"] == calls  # no forward pass on the re-run
    assert again.cache.hits == turns.num_rows and second["score"] == pytest.approx(first["score"])
    assert len(JudgeCache(path)) == turns.num_rows
    other = RoleJudge(JudgeConfig(model="tiny", cache=str(path), repeat=1), backend=tiny_judge)
    other.score(turns.slice(0, 2))
    assert other.cache.misses == 2


def test_include_reason_and_conversation_granularity(tiny_judge, turns):
    cols = _judge(tiny_judge, include_reason=True).score(turns.slice(0, 4))
    assert all(isinstance(r, str) and r.strip() for r in cols["reason"])  # one generated reason per turn
    plain = _judge(tiny_judge).score(turns.slice(0, 4))
    assert set(plain["reason"]) == {None} and cols["score"] == pytest.approx(plain["score"])
    conv = _judge(tiny_judge, granularity="conversation", output_mode="binary").score(turns.slice(0, 7))
    # a random judge names no turn's verdict: every turn unscored with that reason, none read as 0 or 1
    assert conv["status"] == ["unscored"] * 7 and conv["score"] == [None] * 7
    assert set(conv["error"]) == {"no verdict for this turn in the judge's answer"}
    with pytest.raises(ValueError, match="binary"):
        JudgeConfig(granularity="conversation", output_mode="continuous")


def test_llm_judge_method_through_score_turns(tiny_judge, turns):
    cfg = RoleConfig(method="llm_judge", judge=JudgeConfig(model="tiny"), progress=False)
    res = Resources(cfg)
    res._judge = RoleJudge(cfg.judge, backend=tiny_judge)
    out = score_turns(turns, "llm_judge", config=cfg, resources=res)
    assert {"score", "status", "p_yes_source", "truncated", "prediction"} <= set(out.column_names)
    assert out.column("method").to_pylist() == ["llm_judge"] * turns.num_rows
    assert res.describe()["judge"]["backend"] == "transformers"


@pytest.mark.slow
def test_bundled_judge_warns_it_is_a_smoke_test(smollm_judge, turns):
    with pytest.warns(UserWarning, match="smoke-test judge"):
        judge = RoleJudge(JudgeConfig(backend="transformers", backend_options={"device": "cpu", "progress": False}))
    cols = judge.score(turns.slice(0, 4))
    assert set(cols["status"]) == {"ok"} and all(0 < s < 1 for s in cols["score"])


def test_a_backend_that_drops_outputs_is_an_error_naming_it(tiny_judge, turns):
    # A user's own backend (JudgeBackend is public) that answers fewer requests than it was given: the job
    # stops with one line naming it, instead of leaving the missing turns without an output.
    from adherence.judges import JudgeBackend

    class Lossy(JudgeBackend):
        name = "lossy"
        full_vocab = True

        @property
        def model_id(self):
            return tiny_judge.model_id

        def first_token_logprobs(self, requests, **kw):
            return tiny_judge.first_token_logprobs(requests, **kw)[:-1]

        def generate(self, requests, **kw):
            return tiny_judge.generate(requests, **kw)

    with pytest.raises(RuntimeError, match=r"the lossy backend returned \d+ outputs for \d+ requests"):
        _judge(Lossy()).score(turns)


def test_without_a_cache_no_prompt_is_hashed(tiny_judge, turns, monkeypatch):
    from adherence.judges import JudgeRequest

    def refuse(*args, **kwargs):
        raise AssertionError("a cache key was computed with no cache")

    first = RoleJudge(JudgeConfig(model="tiny"), backend=tiny_judge).score(turns)["score"]
    monkeypatch.setattr(JudgeRequest, "cache_key", refuse)
    without = RoleJudge(JudgeConfig(model="tiny"), backend=tiny_judge).score(turns)["score"]
    assert without == first and all(s is not None for s in without)
