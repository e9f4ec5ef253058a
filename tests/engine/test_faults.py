"""Fault injection: what an unattended job does when its inputs, outputs, disk, judge server or process misbehave.

Every test reproduces one way a job could lose or corrupt data, or report success where it failed, and
checks the guarantee instead: nothing the job did not create is touched, nothing partial is published,
failures exit non-zero with one line, and every input row appears once with a status.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from adherence.cli.main import main
from adherence.data import example_path, metadata_path, read_table, read_turns, write_table
from adherence.engine import Engine
from tests.judges._server import LocalHTTPServer

EXAMPLE = example_path("role")
FAST = ["--method", "kl", "--no-progress", "--bootstrap", "0"]


def _digest(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _score(src, out, *extra) -> int:
    return main(["score", str(src), "-o", str(out), *FAST, *extra])


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in Path(directory).iterdir() if p.name.endswith(".tmp") or p.name.endswith(".lock"))


# --------------------------------------------------------------------------- output safety


def test_existing_directory_as_output_is_never_deleted(tmp_path, capsys):
    victim = tmp_path / "results"
    victim.mkdir()
    src = write_table(read_turns(EXAMPLE), victim / "input.parquet")
    (victim / "notes.txt").write_text("mine")
    assert _score(src, victim) == 2
    assert "was not written by adherence" in capsys.readouterr().err
    assert sorted(p.name for p in victim.iterdir()) == ["input.parquet", "notes.txt"]


def test_foreign_work_dir_is_never_cleared(tmp_path, capsys):
    work = tmp_path / "scratch"
    work.mkdir()
    (work / "keep.me").write_text("mine")
    assert _score(EXAMPLE, tmp_path / "o.parquet", "--work-dir", str(work)) == 2
    assert "did not write" in capsys.readouterr().err
    assert (work / "keep.me").read_text() == "mine" and not (tmp_path / "o.parquet").exists()


def test_output_equal_to_input_is_refused(tmp_path, capsys):
    src = write_table(read_turns(EXAMPLE), tmp_path / "in.parquet")
    before = _digest(src)
    assert _score(src, src) == 2
    assert "overwrite the input" in capsys.readouterr().err and _digest(src) == before


def test_sessions_output_equal_to_output_is_refused(tmp_path, capsys):
    out = tmp_path / "o.parquet"
    assert _score(EXAMPLE, out, "--sessions-output", str(out)) == 2
    assert "sessions output is the same path" in capsys.readouterr().err and not out.exists()


@pytest.mark.parametrize("column", ["score", "status", "method", "prediction", "error", "kl_distance"])
def test_input_columns_named_like_scores_are_refused(tmp_path, capsys, column):
    t = read_turns(EXAMPLE)
    src = write_table(t.append_column(column, pa.array(["x"] * t.num_rows)), tmp_path / "in.parquet")
    assert _score(src, tmp_path / "o.parquet") == 2
    err = capsys.readouterr().err
    assert f"column '{column}'" in err and "rename or drop it" in err and not (tmp_path / "o.parquet").exists()


def test_unsupported_output_extension_is_refused_before_any_work(tmp_path, capsys):
    t0 = time.perf_counter()
    assert _score(EXAMPLE, tmp_path / "o.xlsx") == 2
    assert "cannot write scores as '.xlsx'" in capsys.readouterr().err
    assert time.perf_counter() - t0 < 30 and list(tmp_path.iterdir()) == []


def test_foreign_output_file_is_not_overwritten_but_our_own_is(tmp_path, capsys):
    out = tmp_path / "o.parquet"
    out.write_text("someone else's file")
    assert _score(EXAMPLE, out) == 2
    assert out.read_text() == "someone else's file"
    out.unlink()
    assert _score(EXAMPLE, out) == 0 and _score(EXAMPLE, out) == 0  # a re-run replaces its own output
    assert pq.read_table(out).num_rows == 28 and _leftovers(tmp_path) == []


# --------------------------------------------------------------------------- atomic, verified publishing


def _previous_output(tmp_path):
    out = tmp_path / "o.parquet"
    assert _score(EXAMPLE, out, "--shard-size", "5") == 0
    sessions = tmp_path / "o.sessions.parquet"
    return out, {p: _digest(p) for p in (out, sessions, metadata_path(out), metadata_path(sessions))}


def _fail_on_second_write(monkeypatch, fault):
    """The merge's second table write raises ``fault`` (an exception) or calls it (e.g. sends a signal)."""
    from adherence.engine import _sink

    real, calls = _sink.TableSink.write, []

    def write(self, t):
        calls.append(1)
        if len(calls) == 2:
            if isinstance(fault, BaseException):
                raise fault
            fault()
        return real(self, t)

    monkeypatch.setattr(_sink.TableSink, "write", write)


def test_ctrl_c_during_the_merge_publishes_nothing(tmp_path, monkeypatch):
    out, before = _previous_output(tmp_path)
    _fail_on_second_write(monkeypatch, KeyboardInterrupt())
    assert _score(EXAMPLE, out, "--shard-size", "5", "--seed", "7") == 130
    assert {p: _digest(p) for p in before} == before  # previous output, sessions and metadata untouched
    assert _leftovers(tmp_path) == []


def test_sigterm_during_the_merge_publishes_nothing(tmp_path, monkeypatch):
    out, before = _previous_output(tmp_path)
    _fail_on_second_write(monkeypatch, lambda: os.kill(os.getpid(), signal.SIGTERM))
    previous = signal.getsignal(signal.SIGTERM)
    try:
        assert _score(EXAMPLE, out, "--shard-size", "5", "--seed", "7") == 143
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert {p: _digest(p) for p in before} == before and _leftovers(tmp_path) == []


def test_disk_full_during_the_merge_exits_1_and_keeps_the_previous_output(tmp_path, monkeypatch, capsys):
    out, before = _previous_output(tmp_path)
    capsys.readouterr()
    _fail_on_second_write(monkeypatch, OSError(errno.ENOSPC, "No space left on device"))
    assert _score(EXAMPLE, out, "--shard-size", "5") == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "No space left on device" in err[0]
    assert {p: _digest(p) for p in before} == before and _leftovers(tmp_path) == []


def test_corrupt_shard_output_is_recomputed_on_resume_and_never_published_short(tmp_path, synthetic):
    src = write_table(synthetic(30), tmp_path / "in.parquet")
    out = tmp_path / "o.parquet"
    first = Engine(method="kl", shard_size=20, progress=False, n_bootstrap=0, keep_work_dir=True).run(src, out)
    reference = pq.read_table(out)
    shard = tmp_path / "o.parquet.work" / "out" / "shard-00001.parquet"
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])  # a torn write
    for p in (out, tmp_path / "o.sessions.parquet"):  # unpublished, as a job killed before publishing leaves it
        p.unlink()
        metadata_path(p).unlink()
    again = Engine(method="kl", shard_size=20, progress=False, n_bootstrap=0, resume=True).run(src, out)
    assert again.summary["shards_resumed"] == first.summary["shards"] - 1
    assert pq.read_table(out).equals(reference)
    assert json.loads(metadata_path(out).read_text())["outputs"]["rows"] == reference.num_rows


def test_shard_outputs_missing_rows_are_never_published(tmp_path, synthetic):
    from adherence.engine import EngineError
    from adherence.engine._merge import verify_rows

    src = write_table(synthetic(30), tmp_path / "in.parquet")
    with pytest.raises(EngineError, match=r"hold \d+ of the \d+ input rows"):
        verify_rows([write_table(pa.table({"_row": pa.array([0, 1, 2], pa.int64())}), tmp_path / "s.parquet")], 5)
    assert src.exists()


# --------------------------------------------------------------------------- resume by content, locks


def test_same_size_edit_with_the_old_mtime_is_not_resumed(tmp_path):
    src = tmp_path / "in.jsonl"
    write_table(read_turns(EXAMPLE), src)
    out = tmp_path / "o.parquet"
    Engine(method="kl", progress=False, n_bootstrap=0, keep_work_dir=True).run(src, out)
    stat = src.stat()
    text = src.read_text(encoding="utf-8")
    first = json.loads(text.splitlines()[0])["assistant"]
    edited = first.replace(first[:5], first[:5][::-1], 1)
    assert len(edited) == len(first) and edited != first
    src.write_text(text.replace(first, edited, 1), encoding="utf-8")
    os.utime(src, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert src.stat().st_size == stat.st_size and src.stat().st_mtime_ns == stat.st_mtime_ns
    res = Engine(method="kl", progress=False, n_bootstrap=0, resume=True).run(src, out)
    assert res.summary["shards_resumed"] == 0
    assert edited in pq.read_table(out).column("assistant").to_pylist()


def test_a_second_job_on_the_same_output_is_refused(tmp_path, capsys):
    out = tmp_path / "o.parquet"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import fcntl, os, sys, time\n"
                f"fd = os.open({str(tmp_path / '.o.parquet.lock')!r}, os.O_RDWR | os.O_CREAT)\n"
                "fcntl.flock(fd, fcntl.LOCK_EX); os.write(fd, str(os.getpid()).encode()); print('locked', flush=True)\n"
                "time.sleep(60)\n"
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert _score(EXAMPLE, out) == 1
        assert f"in use by another adherence job (pid {holder.pid})" in capsys.readouterr().err
        assert not out.exists()
    finally:
        holder.kill()
        holder.wait()


# --------------------------------------------------------------------------- judge faults


class FaultServer(LocalHTTPServer):
    """An OpenAI-compatible server answering canned first-token log-probs, with faults by prompt content.

    ``faults`` maps a text found in the prompt to what to answer instead: ``"not-json"``, ``"no-token"``,
    ``"nan"``, ``"-inf"``, ``"empty-top"``, ``"retry-after"`` (429 with ``Retry-After: 1`` once).
    ``status`` forces an HTTP status on every call (401, ...); ``models`` is what ``/models`` lists.
    """

    def __init__(self, faults=None, *, status=None, models=("judge",), logprobs=True):
        self.faults, self.status, self.models, self.logprobs = dict(faults or {}), status, list(models), logprobs
        self.calls: list[tuple[float, str]] = []
        self.auth: list = []  # the Authorization header of each POST
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, status, body: bytes, headers=()):
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                if not self.path.startswith("/v1/"):
                    return self._send(404, b'{"error": "not found"}')
                if server.status:
                    return self._send(server.status, b'{"error": "no"}')
                self._send(200, json.dumps({"data": [{"id": m} for m in server.models]}).encode())

            def do_POST(self):
                server.auth.append(self.headers.get("Authorization"))
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if not self.path.startswith("/v1/"):
                    return self._send(404, b'{"error": "not found"}')
                answer = server.answer(body)
                if answer[0] == "trickle":  # one byte a second of a never-ending answer
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", "1000000")
                    self.end_headers()
                    try:
                        for _ in range(600):
                            self.wfile.write(b" ")
                            self.wfile.flush()
                            time.sleep(1.0)
                    except OSError:
                        pass
                    return
                self._send(*answer)

        self._listen(Handler)

    def answer(self, body):
        content = body["messages"][-1]["content"]
        with self.lock:
            self.calls.append((time.monotonic(), content))
            seen = sum(1 for _, c in self.calls if c == content)
        if self.status:
            return self.status, b'{"error": "unauthorised"}'
        fault = next((f for text, f in self.faults.items() if text in content), None)
        if fault == "not-json":
            return 200, b"<html>proxy error</html>"
        if fault == "trickle":
            return ("trickle",)
        if fault == "huge":
            return 200, b'{"pad": "' + b"x" * (40 * 2**20) + b'", "choices": []}'
        if fault == "error-body":
            return 200, b'{"error": {"message": "upstream overloaded"}}'
        if fault == "logprobs-null":
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": "Yes"},
                "finish_reason": "stop",
                "logprobs": None,
            }
            return 200, json.dumps({"choices": [choice]}).encode()
        if fault == "retry-after" and seen == 1:
            return 429, b'{"error": "slow down"}', [("Retry-After", "1")]
        top = [{"token": "Yes", "logprob": math.log(0.7)}, {"token": "No", "logprob": math.log(0.3)}]
        if fault == "nan":
            top[0]["logprob"] = float("nan")
        elif fault == "-inf":
            top = [{"token": "Yes", "logprob": float("-inf")}, {"token": "No", "logprob": float("-inf")}]
        elif fault == "empty-top":
            top = []
        elif fault == "neither":
            top = [{"token": "The", "logprob": math.log(0.6)}, {"token": "I", "logprob": math.log(0.3)}]
        elif fault == "yes-twice":
            top = [
                {"token": "Yes", "logprob": math.log(0.4)},
                {"token": "Yes", "logprob": math.log(0.4)},
                {"token": "No", "logprob": math.log(0.4)},
            ]
        first = {"token": "Yes", "logprob": math.log(0.7), "top_logprobs": top}
        if fault == "no-token":
            first = {"top_logprobs": top, "logprob": -0.1}
            top[0].pop("token")
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": "Yes"},
            "finish_reason": "stop",
            "logprobs": {"content": [first]} if body.get("logprobs") and self.logprobs else None,
        }
        return 200, json.dumps({"choices": [choice]}).encode()


def _judge_args(url, *extra):
    return [
        "--method",
        "llm_judge",
        "--backend",
        "openai",
        "--base-url",
        url,
        "--judge-model",
        "judge",
        "--no-progress",
        "--bootstrap",
        "0",
        *extra,
    ]


def _assistant(i):
    """The reply of the last turn of the i-th conversation: no other prompt holds it in its history."""
    rows = read_turns(EXAMPLE).to_pylist()
    last = {}
    for r in rows:
        if r["turn_index"] >= last.get(r["conversation_id"], r)["turn_index"]:
            last[r["conversation_id"]] = r
    return list(last.values())[i]["assistant"]


@pytest.mark.slow
def test_an_api_key_never_reaches_disk_or_output(tmp_path, capsys):
    key = "sk-PLANTED-7f3a9c"
    job = tmp_path / "job.yaml"
    job.write_text(f"api-key: {key}\nconcurrency: 2\n")
    out = tmp_path / "o.parquet"
    with FaultServer() as server:
        assert (
            main(
                [
                    "score",
                    str(EXAMPLE),
                    "-o",
                    str(out),
                    "--config",
                    str(job),
                    "--keep-work-dir",
                    *_judge_args(server.url),
                ]
            )
            == 0
        )
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "adherence",
                "score",
                str(EXAMPLE),
                "-o",
                str(tmp_path / "p.jsonl"),
                f"--api-key={key}",
                *_judge_args(server.url),
            ],
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0 and key not in proc.stdout + proc.stderr
    assert server.auth and set(server.auth) == {f"Bearer {key}"}  # the key was used...
    captured = capsys.readouterr()
    assert key not in captured.out + captured.err
    files = [p for p in tmp_path.rglob("*") if p.is_file() and p != job]
    assert len(files) >= 6 and any(p.name == "job.json" for p in files)
    for p in files:  # ...and is in no output, metadata or work file (`grep -r` finds nothing)
        assert key.encode() not in p.read_bytes(), p
    meta = json.loads((tmp_path / "o.parquet.meta.json").read_text())
    assert meta["job"]["options"]["api_key"] == "<redacted>"
    assert json.loads((tmp_path / "p.jsonl.meta.json").read_text())["command"].count("--api-key=<redacted>") == 1


@pytest.mark.slow
def test_the_request_timeout_bounds_the_whole_answer_and_its_size(tmp_path, capsys):
    slow, huge = _assistant(0), _assistant(1)
    out = tmp_path / "o.parquet"
    t0 = time.perf_counter()
    with FaultServer({slow: "trickle", huge: "huge"}) as server:
        rc = main(
            [
                "score",
                str(EXAMPLE),
                "-o",
                str(out),
                *_judge_args(server.url, "--request-timeout", "2", "--max-retries", "1"),
            ]
        )
    elapsed = time.perf_counter() - t0
    assert rc == 0 and elapsed < 120  # was: one read timeout per byte, 140 s a turn
    rows = {r["assistant"]: r for r in pq.read_table(out).to_pylist()}
    assert rows[slow]["status"] == "error" and "within --request-timeout 2 s" in rows[slow]["error"]
    assert rows[huge]["status"] == "error" and "exceeds 16 MiB" in rows[huge]["error"]
    assert sum(r["status"] == "ok" for r in rows.values()) == 26


@pytest.mark.parametrize("status", [401, None])
def test_audit_run_checks_the_judge_server_before_its_first_question(tmp_path, capsys, status):
    audit = EXAMPLE.parent / "audit"
    kw = {"status": status} if status else {"models": ["other-model"]}
    with FaultServer(**kw) as server:
        rc = main(
            [
                "audit",
                "run",
                "--rubric",
                str(audit / "rubric.yaml"),
                "--artifacts",
                str(audit / "artifacts.jsonl"),
                "--runs",
                "2",
                "-o",
                str(tmp_path / "out"),
                "--backend",
                "openai",
                "--base-url",
                server.url,
                "--judge-model",
                "judge",
                "--no-progress",
            ]
        )
        calls = server.calls
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1, err
    assert ("refused the credentials" if status else "does not serve model 'judge'") in err[0]
    assert len(calls) <= 1 and not (tmp_path / "out").exists()  # no question was sent


@pytest.mark.parametrize("fallback", [False, True])
def test_one_response_without_logprobs_costs_one_row_not_the_job(tmp_path, capsys, fallback):
    bad = {_assistant(0): "error-body", _assistant(2): "logprobs-null"}
    out = tmp_path / "o.parquet"
    with FaultServer(bad) as server:
        rc = main(
            [
                "score",
                str(EXAMPLE),
                "-o",
                str(out),
                *_judge_args(server.url),
                *(["--binary-fallback"] if fallback else []),
            ]
        )
    assert rc == 0
    rows = {r["assistant"]: r for r in pq.read_table(out).to_pylist()}
    for text in bad:
        assert rows[text]["status"] == "error" and "no token log-probabilities" in rows[text]["error"]
    others = [r for a, r in rows.items() if a not in bad]
    assert len(others) == 26 and all(r["status"] == "ok" and r["p_yes_source"] == "logprobs" for r in others)


def test_a_judge_without_yes_or_no_leaves_the_turn_unscored_and_a_repeated_token_counts_once(tmp_path, capsys):
    neither, twice = _assistant(0), _assistant(1)
    out = tmp_path / "o.parquet"
    with FaultServer({neither: "neither", twice: "yes-twice"}) as server:
        assert main(["score", str(EXAMPLE), "-o", str(out), *_judge_args(server.url)]) == 0
    rows = {r["assistant"]: r for r in pq.read_table(out).to_pylist()}
    r = rows[neither]
    assert r["status"] == "unscored" and r["score"] is None and r["prediction"] is None
    assert "neither a yes nor a no token" in r["error"] and "'The'" in r["error"]
    assert rows[twice]["status"] == "ok" and rows[twice]["score"] == pytest.approx(0.5)  # not 2/3
    others = [x for a, x in rows.items() if a not in (neither, twice)]
    assert all(x["status"] == "ok" and x["score"] == pytest.approx(0.7) for x in others)


def test_malformed_responses_fail_their_row_only(tmp_path, capsys):
    faults = {_assistant(0): "not-json", _assistant(5): "no-token"}
    out = tmp_path / "o.parquet"
    with FaultServer(faults) as server:
        assert main(["score", str(EXAMPLE), "-o", str(out), *_judge_args(server.url)]) == 0
    assert sum(_assistant(0) in c for _, c in server.calls) == 1  # a malformed answer is not retried
    t = pq.read_table(out).to_pylist()
    bad = {r["assistant"]: r for r in t if r["status"] != "ok"}
    assert set(bad) == {_assistant(0), _assistant(5)}
    assert all(r["status"] == "error" and "malformed response" in r["error"] for r in bad.values())
    assert sum(r["status"] == "ok" for r in t) == 26 and "ok 26  error 2" in capsys.readouterr().out


@pytest.mark.parametrize("fault", ["nan", "-inf", "empty-top"])
def test_unusable_logprobs_are_unscored_with_a_reason(tmp_path, fault):
    out = tmp_path / "o.parquet"
    with FaultServer({_assistant(2): fault}) as server:
        assert main(["score", str(EXAMPLE), "-o", str(out), *_judge_args(server.url)]) == 0
    rows = {r["assistant"]: r for r in pq.read_table(out).to_pylist()}
    row = rows[_assistant(2)]
    assert row["status"] == "unscored" and row["score"] is None and row["p_yes_source"] is None
    assert "log-probabilit" in row["error"]
    others = [r for a, r in rows.items() if a != _assistant(2)]
    assert all(r["status"] == "ok" and r["score"] == pytest.approx(0.7) for r in others)


@pytest.mark.parametrize(
    "case,expect",
    [
        ("unreachable", "cannot reach judge server"),
        ("401", "refused the credentials"),
        ("model", "does not serve model 'judge'"),
        ("bad-url", "has no /chat/completions (HTTP 404)"),
    ],
)
def test_a_judge_server_that_cannot_serve_stops_the_job_before_any_row(tmp_path, capsys, case, expect):
    out = tmp_path / "o.parquet"
    t0 = time.perf_counter()
    if case == "unreachable":
        rc = main(["score", str(EXAMPLE), "-o", str(out), *_judge_args("http://127.0.0.1:9/v1")])
        calls = []
    else:
        kw = {"status": 401} if case == "401" else {"models": ["other-model"]} if case == "model" else {}
        with FaultServer(**kw) as server:
            url = server.url.removesuffix("/v1") if case == "bad-url" else server.url
            rc = main(["score", str(EXAMPLE), "-o", str(out), *_judge_args(url)])
        calls = server.calls
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and expect in err[0]
    assert time.perf_counter() - t0 < 30 and len(calls) <= 1  # no row was sent
    assert not out.exists() and not (tmp_path / "o.parquet.work").exists()


def test_no_logprobs_in_continuous_mode_stops_the_job_before_any_row(tmp_path, capsys):
    with FaultServer(logprobs=False) as server:
        assert main(["score", str(EXAMPLE), "-o", str(tmp_path / "o.parquet"), *_judge_args(server.url)]) == 2
        assert len(server.calls) == 1
    assert "--binary-fallback" in capsys.readouterr().err


def test_retry_after_is_honoured(tmp_path):
    with FaultServer({_assistant(0): "retry-after"}) as server:
        assert main(["score", str(EXAMPLE), "-o", str(tmp_path / "o.parquet"), *_judge_args(server.url)]) == 0
    times = [t for t, c in server.calls if _assistant(0) in c and "Answer YES" not in c]
    assert len(times) == 2 and times[1] - times[0] >= 0.95


def test_request_timeout_bounds_a_server_that_never_answers(tmp_path, capsys):
    import socket

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)  # accepts connections, never answers
    url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
    t0 = time.perf_counter()
    try:
        rc = main(
            [
                "score",
                str(EXAMPLE),
                "-o",
                str(tmp_path / "o.parquet"),
                *_judge_args(url, "--request-timeout", "0.5", "--max-retries", "0"),
            ]
        )
    finally:
        silent.close()
    assert rc == 1 and "cannot reach judge server" in capsys.readouterr().err
    assert time.perf_counter() - t0 < 30


@pytest.mark.slow
def test_a_killed_judge_run_resumes_from_the_cache(tmp_path, synthetic):
    src = write_table(synthetic(200), tmp_path / "in.parquet")
    n = pq.read_metadata(src).num_rows
    assert n > 600
    cache = tmp_path / "judge.sqlite"
    cmd = [
        sys.executable,
        "-m",
        "adherence",
        "score",
        str(src),
        "-o",
        str(tmp_path / "o.parquet"),
        "--judge-cache",
        str(cache),
        "--concurrency",
        "2",
    ]
    with FaultServer() as server:
        proc = subprocess.Popen(cmd + _judge_args(server.url), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 600  # generous: a loaded machine is slow, a hang still ends
        while time.time() < deadline and len(server.calls) < 0.8 * n and proc.poll() is None:
            time.sleep(0.01)
        assert proc.poll() is None, "the job finished before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        import sqlite3

        cached = sqlite3.connect(cache).execute("SELECT COUNT(*) FROM calls").fetchone()[0]
        assert cached >= 256  # committed as results arrived, not once at the end of the shard
        # a request the killed job sent may still be read by a server thread: count once the server is quiet
        before, quiet_since = len(server.calls), time.time()
        while time.time() - quiet_since < 0.5:
            time.sleep(0.05)
            if len(server.calls) != before:
                before, quiet_since = len(server.calls), time.time()
        res = subprocess.run(cmd + _judge_args(server.url, "--resume"), capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
        assert len(server.calls) - before <= n - cached + 1  # only uncached turns (+ the preflight) are asked again
    assert pq.read_table(tmp_path / "o.parquet").num_rows == n


# --------------------------------------------------------------------------- exit codes


def test_a_failed_shard_exits_1_with_the_summary(tmp_path, capsys, monkeypatch):
    import adherence.engine._worker as worker

    def broken(*a, **k):
        raise RuntimeError("GPU fell off the bus")

    monkeypatch.setattr(worker, "score_turns", broken)
    out = tmp_path / "o.parquet"
    assert _score(EXAMPLE, out) == 1
    assert (tmp_path / "o.parquet.work").is_dir()  # kept for --resume
    cap = capsys.readouterr()
    assert "ok 0  error 28  unscored 0" in cap.out and "shard(s) failed as a whole" in cap.err
    assert set(pq.read_table(out).column("status").to_pylist()) == {"error"}  # every row, with its status
    monkeypatch.undo()  # the fault is gone: --resume scores the failed shard again instead of reusing it
    assert _score(EXAMPLE, out, "--resume") == 0
    assert "ok 28  error 0" in capsys.readouterr().out
    assert set(pq.read_table(out).column("status").to_pylist()) == {"ok"}
    assert not (tmp_path / "o.parquet.work").exists()


def test_max_error_rate(tmp_path, capsys):
    t = read_turns(EXAMPLE)
    texts = t.column("assistant").to_pylist()
    texts[0] = texts[1] = " "  # 2 of 28 rows are errors
    src = write_table(
        t.set_column(t.column_names.index("assistant"), "assistant", pa.array(texts)), tmp_path / "in.parquet"
    )
    assert _score(src, tmp_path / "a.parquet", "--max-error-rate", "0.05") == 1
    assert "error rate 0.0714 is above --max-error-rate 0.05" in capsys.readouterr().err
    assert _score(src, tmp_path / "b.parquet", "--max-error-rate", "0.1") == 0
    assert "ok 26  error 2  unscored 0" in capsys.readouterr().out


# --------------------------------------------------------------------------- input hygiene


def test_csv_text_that_looks_like_null_stays_text(tmp_path):
    src = tmp_path / "in.csv"
    src.write_text(
        "conversation_id,turn_index,role,user,assistant,ground_truth_assistant\n"
        "NA,0,You help.,N/A,null,None\nNA,1,You help.,NaN,#N/A,\n",
        encoding="utf-8",
    )
    out = tmp_path / "o.parquet"
    assert _score(src, out) == 0
    rows = pq.read_table(out).to_pylist()
    assert [r["conversation_id"] for r in rows] == ["NA", "NA"]
    assert [(r["user"], r["assistant"], r["ground_truth_assistant"]) for r in rows] == [
        ("N/A", "null", "None"),
        ("NaN", "#N/A", None),
    ]  # only the empty unquoted cell is null


def test_parquet_directory_with_differing_columns_keeps_every_column(tmp_path):
    t = read_turns(EXAMPLE)
    d = tmp_path / "in"
    d.mkdir()
    pq.write_table(t.slice(0, 14).drop_columns(["label"]), d / "a.parquet")
    pq.write_table(t.slice(14).append_column("source", pa.array(["log"] * 14)), d / "b.parquet")
    out = tmp_path / "o.parquet"
    assert _score(d, out) == 0
    got = pq.read_table(out)
    assert {"label", "source"} <= set(got.column_names) and got.num_rows == 28
    labels = dict(zip(got.column("assistant").to_pylist(), got.column("label").to_pylist()))
    assert all(labels[a] is None for a in t.slice(0, 14).column("assistant").to_pylist())
    assert got.column("label").null_count == 14


def test_bad_weights_are_row_errors_and_sessions_stay_defined(tmp_path):
    t = read_turns(EXAMPLE)
    w = [1.0] * t.num_rows
    w[0], w[1], w[2], w[3] = float("nan"), float("inf"), -1.0, 0.0
    src = write_table(t.append_column("weight", pa.array(w)), tmp_path / "in.parquet")
    out = tmp_path / "o.parquet"
    assert _score(src, out) == 0
    rows = pq.read_table(out).to_pylist()
    assert [r["status"] for r in rows[:4]] == ["error", "error", "error", "ok"]
    assert all("weight must be a finite number >= 0" in r["error"] for r in rows[:3])
    sessions = pq.read_table(tmp_path / "o.sessions.parquet").to_pylist()
    assert all(s["score"] is None or math.isfinite(s["score"]) for s in sessions)


def test_evaluate_prediction_on_a_score_output_with_error_rows(tmp_path, capsys):
    t = read_turns(EXAMPLE)
    texts = t.column("assistant").to_pylist()
    texts[0] = ""
    src = write_table(
        t.set_column(t.column_names.index("assistant"), "assistant", pa.array(texts)), tmp_path / "in.parquet"
    )
    assert _score(src, tmp_path / "o.parquet") == 0
    capsys.readouterr()
    assert (
        main(
            [
                "evaluate",
                str(tmp_path / "o.parquet"),
                "--score",
                "score",
                "--label",
                "label",
                "--positive",
                "adherent",
                "--prediction",
                "prediction",
                "--bootstrap",
                "0",
                "--json",
            ]
        )
        == 0
    )
    res = json.loads(capsys.readouterr().out)
    assert res["n_unscored"] == 1 and res["n"] == 27 and res["macro_f1"] is not None


def test_dollar_signs_in_labels_and_file_names_are_drawn_literally(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    # violation classes of one's own (a name ending in "violation"), dollar signs and all
    labels = ["costs $x^$ or $\\undefinedmacro$ violation", "adherent", "half $ sign violation"]
    rows = [{"score": i / 30, "label": labels[i % 3]} for i in range(30)]
    src = write_table(pa.Table.from_pylist(rows), tmp_path / "price_$x^2$.jsonl")
    page = tmp_path / "e.html"
    assert main(["evaluate", str(src), "--html", str(page), "--bootstrap", "0"]) == 0
    html = page.read_text()
    assert "Traceback" not in capsys.readouterr().err
    assert "costs $x^$ or $\\undefinedmacro$" in html  # in the per-label table; the plots drew it too


def test_evaluate_page_escapes_every_value(tmp_path):
    pytest.importorskip("matplotlib")
    evil = ["<script>alert(1)</script> violation", "--><img src=x onerror=alert(2)><!-- violation", "<b>x</b>"]
    rows = [{"score": i / 30, "label": evil[i % 3]} for i in range(30)]
    src = write_table(pa.Table.from_pylist(rows), tmp_path / "e.jsonl")
    page = tmp_path / "e.html"
    assert (
        main(
            [
                "evaluate",
                str(src),
                "--score",
                "score",
                "--label",
                "label",
                "--positive",
                "<b>x</b>",
                "--html",
                str(page),
                "--bootstrap",
                "0",
            ]
        )
        == 0
    )
    html = page.read_text()
    assert "<script>" not in html and "<img" not in html and "<b>x" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


@pytest.mark.parametrize(
    "name,content,expect",
    [
        (
            "dup.csv",
            "conversation_id,turn_index,role,assistant,assistant\nc,0,r,a,b\n",
            "names column 'assistant' twice",
        ),
        (
            "deep.jsonl",
            '{"conversation_id":"c","turn_index":0,"role":"r","assistant":"a","x":'
            + "[" * 100000
            + "]" * 100000
            + "}\n",
            "nested too deeply",
        ),
        (
            "surrogate.jsonl",
            '{"conversation_id":"c","turn_index":0,"role":"r","assistant":"a \\ud800 b"}\n',
            "lone UTF-16 surrogate",
        ),
    ],
    ids=["duplicate-header", "deep-json", "lone-surrogate"],
)
def test_bad_files_give_one_line_naming_file_row_and_column(tmp_path, capsys, name, content, expect):
    src = tmp_path / name
    src.write_text(content, encoding="utf-8")
    assert _score(src, tmp_path / "o.parquet") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and name in err[0] and expect in err[0]


def test_empty_directory_and_fifo_inputs_give_one_line(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert _score(tmp_path / "empty", tmp_path / "o.parquet") == 2
    assert "holds no .parquet files" in capsys.readouterr().err
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    t0 = time.perf_counter()
    assert _score(fifo, tmp_path / "o.parquet") == 2
    assert "not a regular file" in capsys.readouterr().err and time.perf_counter() - t0 < 30


def test_corrupt_judge_cache_names_the_file(tmp_path, capsys):
    cache = tmp_path / "cache.sqlite"
    cache.write_bytes(b"this is not a database" * 100)
    with FaultServer() as server:
        rc = main(
            [
                "score",
                str(EXAMPLE),
                "-o",
                str(tmp_path / "o.parquet"),
                "--judge-cache",
                str(cache),
                *_judge_args(server.url),
            ]
        )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "cache.sqlite" in err[0] and "judge cache" in err[0]


def test_audit_rubric_errors_surface_before_any_judging(tmp_path, capsys):
    from adherence.audit import load_rubric

    rubric = tmp_path / "r.yaml"
    rubric.write_text(
        "questions:\n- id: q1\n  question: Is it short?\n  category: Format Adherence\n"
        "  kind: objective\n  check: {type: word_count, min: ten}\n"
    )
    from adherence.data import DataError

    with pytest.raises(DataError, match="min must be a whole number"):
        load_rubric(rubric)
    rubric.write_text(
        "questions:\n- id: q1\n  question: Does it name the company?\n  category: Data Field Utilization\n"
        "  kind: objective\n  check: {type: contains_at_least, values: ['{compnay}']}\n"
    )
    arts = write_table(
        pa.Table.from_pylist(
            [
                {
                    "artifact_id": "a1",
                    "generator": "g",
                    "filled_prompt": "p",
                    "output": "Acme is great",
                    "company": "Acme",
                }
            ]
        ),
        tmp_path / "a.jsonl",
    )
    assert (
        main(
            [
                "audit",
                "run",
                "--rubric",
                str(rubric),
                "--artifacts",
                str(arts),
                "--runs",
                "1",
                "-o",
                str(tmp_path / "audit"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "placeholder {compnay}" in err and "company" in err and not (tmp_path / "audit").exists()


# --------------------------------------------------------------------------- scale and hygiene


def test_work_dir_is_removed_after_success_unless_kept(tmp_path):
    out = tmp_path / "o.csv"
    assert _score(EXAMPLE, out, "--shard-size", "5") == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "o.csv",
        "o.csv.meta.json",
        "o.sessions.csv",
        "o.sessions.csv.meta.json",
    ]
    assert read_table(out).num_rows == 28
    assert _score(EXAMPLE, tmp_path / "k.parquet", "--keep-work-dir") == 0
    assert (tmp_path / "k.parquet.work" / "plan.json").exists()
    assert _score(EXAMPLE, tmp_path / "k.parquet", "--resume") == 0  # a resumed job cleans up after itself too
    assert not (tmp_path / "k.parquet.work").exists() and _leftovers(tmp_path) == []
    mine = tmp_path / "scratch"
    mine.mkdir()  # an empty directory the user made for the job is used, emptied, and left in place
    assert _score(EXAMPLE, tmp_path / "m.parquet", "--work-dir", str(mine)) == 0
    assert mine.is_dir() and list(mine.iterdir()) == []


@pytest.mark.slow
def test_encoder_cache_is_bounded_by_bytes():
    from adherence.models import Encoder

    texts = [f"turn number {i} says something" for i in range(300)]
    bounded = Encoder(progress=False, cache_bytes=64 * 1024)
    a = bounded.encode(texts)
    assert 0 < bounded.cache_size_bytes <= 64 * 1024
    b = Encoder(progress=False, cache_bytes=0).encode(texts)
    np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-6)
    np.testing.assert_allclose(bounded.encode(texts[::-1]).numpy(), a.numpy()[::-1], atol=1e-6)


def _unprivileged(cmd: list[str]) -> list[str]:
    """Run ``cmd`` subject to file permissions: as root, without the capabilities that bypass them."""
    if os.geteuid() != 0:
        return cmd
    caps = "-dac_override,-dac_read_search"
    return ["setpriv", f"--bounding-set={caps}", f"--inh-caps={caps}", *cmd]


@pytest.mark.skipif(
    os.geteuid() == 0 and not shutil.which("setpriv"),
    reason="root without setpriv: file permissions cannot be enforced",
)
@pytest.mark.slow
def test_unreadable_input_and_read_only_output_dir_give_one_line(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_bytes(Path(EXAMPLE).read_bytes())
    ro = tmp_path / "ro"
    ro.mkdir()
    base = [sys.executable, "-m", "adherence", "score", "--method", "kl", "--no-progress"]
    try:
        src.chmod(0)
        res = subprocess.run(
            _unprivileged(base + [str(src), "-o", str(tmp_path / "o.parquet")]), capture_output=True, text=True
        )
        assert res.returncode == 2 and res.stderr.strip().splitlines() == [
            f"adherence score: error: {src}: permission denied: the input is not readable"
        ]
        src.chmod(0o644)
        ro.chmod(0o555)
        res = subprocess.run(
            _unprivileged(base + [str(src), "-o", str(ro / "o.parquet")]), capture_output=True, text=True
        )
        assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1
        assert "directory" in res.stderr and "is not writable" in res.stderr and list(ro.iterdir()) == []
    finally:
        src.chmod(0o644)
        ro.chmod(0o755)
