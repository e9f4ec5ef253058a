"""Servers for tests: a small OpenAI-compatible chat server answering with a real (tiny) transformers model,
and helpers that run real external servers (vLLM, llama.cpp) on 127.0.0.1."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from adherence.judges import JudgeRequest


class LocalHTTPServer:
    """A threaded HTTP server on 127.0.0.1 (a free port), serving from a background thread while in a ``with``."""

    def _listen(self, handler) -> None:
        class Server(ThreadingHTTPServer):
            request_queue_size = 256  # the judge opens up to `concurrency` connections at once

            def handle_error(self, request, client_address):
                # a client that gave up (a stall timeout, a cancelled request) is not the server's fault: without
                # this, socketserver prints the broken pipe's traceback into the test's captured stderr
                if isinstance(sys.exc_info()[1], ConnectionError):
                    return
                super().handle_error(request, client_address)

        self.httpd = Server(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


class ChatServer(LocalHTTPServer):
    """``POST /v1/chat/completions`` backed by a TransformersBackend.

    ``fail_first``: the first N calls for each prompt answer HTTP 500;
    ``always_fail``: prompts containing this text always answer 500;
    ``logprobs``: False to answer like a provider without log-probabilities.
    """

    PREFLIGHT = "Answer YES or NO: is 2 > 1?"  # what the backend asks each endpoint before any row

    def __init__(self, backend, *, fail_first=0, always_fail=None, logprobs=True, after_preflight=None):
        self.backend, self.fail_first, self.always_fail, self.logprobs = backend, fail_first, always_fail, logprobs
        # after_preflight(n) -> None (answer normally) or (status, body bytes, headers): how every scoring request
        # (not the preflight's) is answered, n counting them from 1 -- a server that turns bad after it was checked.
        self.after_preflight = after_preflight
        self.scoring_calls = 0
        self.seen = Counter()
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                scripted = None
                if server.after_preflight is not None and body["messages"][-1]["content"] != server.PREFLIGHT:
                    with server.lock:
                        server.scoring_calls += 1
                        n = server.scoring_calls
                    scripted = server.after_preflight(n)
                if scripted is not None:
                    status, data, headers = scripted
                else:
                    status, payload = server.answer(self.path, body)
                    data, headers = json.dumps(payload).encode(), {"Content-Type": "application/json"}
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._listen(Handler)

    def answer(self, path, body):
        if path != "/v1/chat/completions":
            return 404, {"error": "not found"}
        msgs = body["messages"]
        content = msgs[-1]["content"]
        system = msgs[0]["content"] if msgs[0]["role"] == "system" else None
        with self.lock:
            self.seen[content] += 1
            n = self.seen[content]
            if n <= self.fail_first or (self.always_fail and self.always_fail in content):
                return 500, {"error": "overloaded"}
            req = JudgeRequest((content,), system=system)
            if body.get("logprobs") and self.logprobs:
                top = self.backend.first_token_logprobs([req], top_k=body.get("top_logprobs", 20))[0].top_logprobs
                choice = {
                    "message": {"role": "assistant", "content": top[0][0]},
                    "logprobs": {
                        "content": [
                            {
                                "token": top[0][0],
                                "logprob": top[0][1],
                                "top_logprobs": [{"token": t, "logprob": v} for t, v in top],
                            }
                        ]
                    },
                }
            else:
                text = self.backend.generate([req], max_tokens=body["max_tokens"])[0].text
                choice = {"message": {"role": "assistant", "content": text}, "logprobs": None}
        return 200, {"id": "x", "object": "chat.completion", "choices": [dict(index=0, finish_reason="stop", **choice)]}


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def external_server(cmd: list, url: str, log, *, timeout: float, env=None):
    """Run a real OpenAI-compatible server process (vLLM, llama.cpp) until ``url``/models answers; yields the
    process and stops it after. A server that exits or never answers fails the test with its log's tail."""
    import httpx
    import pytest

    with open(log, "w") as fh:
        # its own process group: a server's workers (vLLM's engine core and worker) go with it
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"{cmd[2]} exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(1)
    else:
        kill_server(proc)
        pytest.fail(f"{cmd[2]} did not answer in {timeout:.0f} s: {log.read_text()[-2000:]}")
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                pass
        kill_server(proc)  # whatever of its group is left (a SIGKILLed vLLM server leaves its workers running)


def kill_server(proc) -> None:
    """SIGKILL a server started by ``external_server`` and every process of its group, at once: no goodbye."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def score_while_the_server_dies(proc, url: str, tmp_path, *, after_s: float):
    """Score 168 turns one request at a time against ``url``, kill the server after ``after_s`` seconds;
    returns the exit code and the output table (every row must be there, errors marked)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from adherence.cli.main import main
    from adherence.data import example_path, read_turn_scores, read_turns

    many = pa.concat_tables([read_turns(example_path("role"))] * 6)
    cids = [f"{c}-{i // 28}" for i, c in enumerate(many.column("conversation_id").to_pylist())]
    many = many.set_column(many.column_names.index("conversation_id"), "conversation_id", pa.array(cids))
    src = tmp_path / "many.parquet"
    pq.write_table(many, src)
    threading.Timer(after_s, kill_server, args=(proc,)).start()
    rc = main(
        [
            "score",
            str(src),
            "-o",
            str(tmp_path / "o.parquet"),
            "--backend",
            "openai",
            "--base-url",
            url,
            "--judge-model",
            "smollm2",
            "--no-progress",
            "--bootstrap",
            "0",
            "--concurrency",
            "1",
            "--max-retries",
            "1",
            "--request-timeout",
            "10",
            "--max-error-rate",
            "0.01",
        ]
    )
    got = read_turn_scores(tmp_path / "o.parquet")
    status = got.column("status").to_pylist()
    errors = {e for e, s in zip(got.column("error").to_pylist(), status) if s == "error"}
    return rc, got, status, errors
