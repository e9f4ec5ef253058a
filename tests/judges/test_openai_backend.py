import numpy as np
import pytest

from adherence.data import example_path, read_turns
from adherence.judges import JudgeConfig, JudgeRequest, RoleJudge, get_backend, p_yes_from_logprobs
from tests.judges._server import ChatServer


@pytest.fixture(scope="module")
def turns():
    return read_turns(example_path("role")).slice(0, 7)


def _backend(server, **kw):
    return get_backend("openai", model="tiny", base_url=server.url, backoff=0.01, **kw)


def test_logprobs_over_http_equal_in_process(tiny_yes_no_judge, turns):
    with ChatServer(tiny_yes_no_judge) as server:
        judge = RoleJudge(JudgeConfig(model="tiny", backend="openai"), backend=_backend(server, concurrency=4))
        cols = judge.score(turns)
    assert set(cols["status"]) == {"ok"}
    # the server sees the whole content as one piece; score the same single-piece prompts in process
    from adherence.judges import turn_requests

    rows = turns.to_pylist()
    ref = []
    for cid in dict.fromkeys(r["conversation_id"] for r in rows):
        grp = [r for r in rows if r["conversation_id"] == cid]
        reqs = turn_requests(cid, grp[0]["role"], [g["user"] for g in grp], [g["assistant"] for g in grp])
        outs = tiny_yes_no_judge.first_token_logprobs([JudgeRequest((r.content,)) for r in reqs])
        ref += [p_yes_from_logprobs(o.top_logprobs)[0] for o in outs]
    np.testing.assert_allclose(cols["score"], ref, atol=1e-6)
    assert np.std(cols["score"]) > 0.02  # real P(yes) values, not the no-evidence case (constant 0.5)


def test_retries_then_per_row_errors(tiny_yes_no_judge, turns):
    with ChatServer(tiny_yes_no_judge, fail_first=2) as server:
        backend = _backend(server, max_retries=3)
        cols = RoleJudge(JudgeConfig(model="tiny", backend="openai"), backend=backend).score(turns)
        assert set(cols["status"]) == {"ok"}
        assert backend.calls == 3 * turns.num_rows  # two failures then success, per prompt
    # the last turn of the first conversation: its text is in no other prompt's history
    victim = turns.column("assistant")[3].as_py()
    with ChatServer(tiny_yes_no_judge, always_fail=victim) as server:
        cols = RoleJudge(JudgeConfig(model="tiny", backend="openai"), backend=_backend(server, max_retries=1)).score(
            turns
        )
    assert cols["status"][3] == "error" and "HTTP 500" in cols["error"][3]
    assert cols["status"].count("ok") == turns.num_rows - 1


def test_provider_without_logprobs(tiny_yes_no_judge, turns):
    with ChatServer(tiny_yes_no_judge, logprobs=False) as server:
        with pytest.raises(ValueError, match="binary-fallback"):
            RoleJudge(JudgeConfig(model="tiny", backend="openai"), backend=_backend(server)).score(turns)
        judge = RoleJudge(JudgeConfig(model="tiny", backend="openai", binary_fallback=True), backend=_backend(server))
        with pytest.warns(UserWarning, match="falls back to binary"):
            cols = judge.score(turns)
    scored = [src for src, st in zip(cols["p_yes_source"], cols["status"]) if st == "ok"]
    assert all(src == "binary_fallback" for src in scored)
    assert set(cols["status"]) <= {"ok", "unscored"}


def test_unreachable_server_stops_before_any_row(turns):
    from adherence.judges._openai import JudgeUnavailable

    backend = get_backend(
        "openai", model="m", base_url="http://127.0.0.1:9/v1", max_retries=1, backoff=0.01, request_timeout=2
    )
    with pytest.raises(JudgeUnavailable, match=r"cannot reach judge server http://127.0.0.1:9/v1"):
        RoleJudge(JudgeConfig(model="m", backend="openai"), backend=backend)


def test_payload_and_arguments():
    b = get_backend("openai", model="m", base_url="http://h/v1/")
    body = b.build_payload(JudgeRequest(("hi",), system="sys"), max_tokens=1, temperature=0.0, top_k=20, seed=None)
    assert body == {
        "model": "m",
        "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}],
        "max_tokens": 1,
        "temperature": 0.0,
        "logprobs": True,
        "top_logprobs": 20,
    }
    with pytest.raises(ValueError, match="--base-url"):
        get_backend("openai", model="m")
    with pytest.raises(ValueError, match="Did you mean 'openai'"):
        get_backend("opnai")


class _Counting(ChatServer):
    """A ChatServer that counts the requests it answered, and can be stopped mid-run (as a crash)."""

    def __init__(self, backend, **kw):
        super().__init__(backend, **kw)
        self.answered = 0

    def answer(self, path, body):
        out = super().answer(path, body)
        self.answered += 1
        return out

    def kill(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.mark.slow
def test_a_fleet_spreads_requests_and_survives_an_endpoint_killed_mid_run(tiny_yes_no_judge, turns):
    import threading

    many = turns
    for _ in range(3):
        many = __import__("pyarrow").concat_tables([many, turns])
    with ChatServer(tiny_yes_no_judge) as one:
        want = RoleJudge(JudgeConfig(model="tiny", backend="openai"), backend=_backend(one, concurrency=2)).score(many)
    a, b, c = _Counting(tiny_yes_no_judge), _Counting(tiny_yes_no_judge), _Counting(tiny_yes_no_judge)
    with a, b:
        c.thread.start()
        fleet = get_backend(
            "openai",
            model="tiny",
            base_url=[a.url, b.url, c.url],
            backoff=0.01,
            max_retries=2,
            concurrency=2,
            request_timeout=5,
        )
        assert fleet.model_id.count("http://127.0.0.1:") == 3
        judge = RoleJudge(JudgeConfig(model="tiny", backend="openai"), backend=fleet)
        killed = threading.Event()

        def kill_c_after_a_few():
            while c.answered < 2:
                __import__("time").sleep(0.01)
            c.kill()
            killed.set()

        threading.Thread(target=kill_c_after_a_few, daemon=True).start()
        got = judge.score(many)
        assert killed.is_set()
    assert got["status"] == ["ok"] * many.num_rows  # the killed endpoint cost no row
    np.testing.assert_allclose(got["score"], want["score"], atol=1e-6)
    assert a.answered > 0 and b.answered > 0 and c.answered >= 2
    # every row answered somewhere, plus one preflight per endpoint (a request c answered as it died may be retried)
    assert a.answered + b.answered + c.answered >= many.num_rows + 3


def test_max_qps_caps_the_request_rate_over_the_fleet(tiny_yes_no_judge, turns):
    import time

    with ChatServer(tiny_yes_no_judge) as a, ChatServer(tiny_yes_no_judge) as b:
        fleet = get_backend("openai", model="tiny", base_url=[a.url, b.url], max_qps=10, concurrency=8)
        start = time.perf_counter()
        cols = RoleJudge(JudgeConfig(model="tiny", backend="openai"), backend=fleet).score(turns)
        took = time.perf_counter() - start
    assert cols["status"] == ["ok"] * turns.num_rows
    assert took >= (turns.num_rows - 1) / 10 - 0.05  # 7 requests at 10/s: 0.6 s at least
    with pytest.raises(ValueError, match="--max-qps must be > 0"):
        get_backend("openai", model="tiny", base_url=a.url, max_qps=0)


def test_a_fleet_with_one_dead_endpoint_warns_and_scores_on_the_others(tiny_yes_no_judge, turns):
    with ChatServer(tiny_yes_no_judge) as a:
        fleet = get_backend(
            "openai",
            model="tiny",
            base_url=[a.url, "http://127.0.0.1:9/v1"],
            backoff=0.01,
            max_retries=1,
            request_timeout=2,
        )
        with pytest.warns(UserWarning, match=r"cannot reach judge server http://127.0.0.1:9/v1 .*skipped until"):
            cols = RoleJudge(JudgeConfig(model="tiny", backend="openai"), backend=fleet).score(turns)
    assert cols["status"] == ["ok"] * turns.num_rows


def test_base_url_flags_repeat_and_read_a_file(tmp_path):
    from adherence.judges._backend_options import base_urls

    f = tmp_path / "fleet.txt"
    f.write_text("# our servers\nhttp://a:8000/v1\n\nhttp://b:8000/v1\n")
    assert base_urls(["http://x/v1", f"@{f}"]) == ["http://x/v1", "http://a:8000/v1", "http://b:8000/v1"]
    assert base_urls("http://x/v1") == ["http://x/v1"] and base_urls(None) == []


def test_the_cache_keys_on_the_model_not_on_where_it_is_served(tiny_yes_no_judge, turns, tmp_path):
    # localhost vs 127.0.0.1, another port, one more endpoint in the fleet: the same model asked the same thing
    from adherence.judges import JudgeCache

    cache = str(tmp_path / "c.sqlite")
    with ChatServer(tiny_yes_no_judge) as a, ChatServer(tiny_yes_no_judge) as b:
        first = RoleJudge(JudgeConfig(model="tiny", backend="openai", cache=cache), backend=_backend(a))
        cols = first.score(turns)
        assert first.stats["cache_hits"] == 0 and len(JudgeCache(cache)) == turns.num_rows
        for urls in (a.url.replace("127.0.0.1", "localhost"), [b.url, a.url]):
            backend = get_backend("openai", model="tiny", base_url=urls, backoff=0.01)
            again = RoleJudge(JudgeConfig(model="tiny", backend="openai", cache=cache), backend=backend)
            assert again.score(turns)["score"] == cols["score"]
            assert again.stats["cache_hits"] == turns.num_rows and again.stats["calls"] == 0
    # another served model is another judge: nothing reused
    other = get_backend("openai", model="other", base_url=a.url, backoff=0.01)
    assert other.cache_id != backend.cache_id


# ---------------------------------------------------------------------------- fleets that fail fast


def _html(n):
    return 200, b"<html><body>502 Bad Gateway (from the proxy)</body></html>", {"Content-Type": "text/html"}


def test_an_endpoint_answering_200_with_a_proxys_html_page_is_routed_around(tiny_yes_no_judge, turns):
    with ChatServer(tiny_yes_no_judge) as good, ChatServer(tiny_yes_no_judge, after_preflight=_html) as proxy:
        fleet = get_backend("openai", model="tiny", base_url=[good.url, proxy.url], backoff=0.01, max_retries=2)
        cols = RoleJudge(JudgeConfig(model="tiny", backend="openai"), backend=fleet).score(turns)
        assert proxy.scoring_calls >= 1  # it was asked, answered HTML, and its rows went to the other endpoint
    assert cols["status"] == ["ok"] * turns.num_rows


@pytest.mark.slow
def test_retry_after_is_capped_and_counted_in_the_rows_time(tiny_yes_no_judge, turns):
    import time

    def busy_once(n):  # every request's first try: 429 "come back in 100 s"
        return (429, b'{"error": "rate limited"}', {"Retry-After": "100"}) if n <= turns.num_rows else None

    with ChatServer(tiny_yes_no_judge, after_preflight=busy_once) as server:
        backend = _backend(server, max_retries=2, max_retry_after=0.2, concurrency=turns.num_rows)
        start = time.perf_counter()
        cols = RoleJudge(JudgeConfig(model="tiny", backend="openai"), backend=backend).score(turns)
        took = time.perf_counter() - start
    assert cols["status"] == ["ok"] * turns.num_rows and took < 20  # 0.2 s waits, not 100 s

    def always_busy(n):
        return 429, b'{"error": "rate limited"}', {"Retry-After": "1"}

    with ChatServer(tiny_yes_no_judge, after_preflight=always_busy) as server:
        backend = _backend(server, max_retries=50, request_timeout=30, max_retry_after=10)
        judge = RoleJudge(JudgeConfig(model="tiny", backend="openai"), backend=backend)  # its preflight is answered
        backend.timeout = 0.05  # a 2.55 s budget per row (the preflight's real answer can take longer than 0.05 s)
        cols = judge.score(turns.slice(0, 2))
    assert cols["status"] == ["error"] * 2
    assert all("the row's budget of --request-timeout x (--max-retries + 1)" in e for e in cols["error"])


@pytest.mark.slow
def test_a_fleet_with_no_endpoint_up_for_the_stall_timeout_stops_the_job(tiny_yes_no_judge, tmp_path, capsys):
    """Every endpoint of the fleet dies after the preflight: the job stops after --stall-timeout with one line
    and exit 1 (it ran for half an hour and exited 0 with most rows in error)."""
    import time

    from adherence.cli.main import main

    def down(n):
        return 503, b'{"error": "no healthy upstream"}', {"Content-Type": "application/json"}

    with (
        ChatServer(tiny_yes_no_judge, after_preflight=down) as a,
        ChatServer(tiny_yes_no_judge, after_preflight=down) as b,
    ):
        argv = ["score", str(example_path("role")), "-o", str(tmp_path / "o.parquet"), "--backend", "openai",
                "--judge-model", "tiny", "--base-url", a.url, "--base-url", b.url, "--stall-timeout", "2",
                "--request-timeout", "5", "--no-progress", "--bootstrap", "0"]  # fmt: skip
        start = time.perf_counter()
        assert main(argv) == 1
        took = time.perf_counter() - start
    err = capsys.readouterr().err.strip().splitlines()
    assert "no answer from any of the 2 judge servers for 2 s (--stall-timeout" in err[-1], err
    assert "HTTP 503" in err[-1] and took < 60
    assert not (tmp_path / "o.parquet").exists()


def test_resume_on_a_published_output_never_calls_the_judge_again(tiny_yes_no_judge, tmp_path, capsys):
    """A paid judge is not billed twice: --resume on an output published from the same input with the same options
    scores nothing (it re-ran every judge call)."""
    from adherence.cli.main import main

    out = tmp_path / "o.parquet"
    with ChatServer(tiny_yes_no_judge, after_preflight=lambda n: None) as server:  # counts the scoring calls
        argv = ["score", str(example_path("role")), "-o", str(out), "--backend", "openai", "--judge-model", "tiny",
                "--base-url", server.url, "--no-progress", "--bootstrap", "0"]  # fmt: skip
        assert main(argv) == 0
        calls = server.scoring_calls
        assert calls > 0
        capsys.readouterr()
        assert main([*argv, "--resume"]) == 0
        assert server.scoring_calls == calls
    err = capsys.readouterr().err
    assert "is already published from this input with these options: nothing scored" in err and "kept " in err
