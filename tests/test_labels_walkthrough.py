"""docs/labels.md, run as written: every `adherence` command on the page, in order, in a directory holding the
bundled examples. Two things a test cannot hold fixed are stood in for: the person at the labelling page is a
script that answers each sampled turn from the log's truth file through the page's own endpoints (with the token
the page carries), and the served judge is a local OpenAI-compatible server that answers as a strong judge would
(YES or NO from the truth file, with log-probabilities), whose URL replaces the page's http://127.0.0.1:8000/v1.
The classifier's verdicts on its own labels are out of fold, so the cascade cannot certify them all: a judge that
decides nothing (a random-weight model) would leave every turn abstained."""

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from adherence.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "labels.md").read_text(encoding="utf-8")
EXAMPLES = ROOT / "adherence" / "examples"

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::UserWarning")]


def _page_commands() -> list:
    out = []
    for block in re.findall(r"```bash\n(.*?)```", PAGE, re.S):
        out += [ln.strip() for ln in block.splitlines() if ln.strip().startswith("adherence ")]
    return out


def _label_as_the_truth_says(url: str) -> int:
    """What a person does at the page: every sampled turn labelled, through the page's endpoints and token."""
    truth = {}
    for line in (EXAMPLES / "support_log.truth.jsonl").read_text().splitlines():
        r = json.loads(line)
        truth[(r["conversation_id"], r["turn_index"])] = r["label"]
    page = urllib.request.urlopen(url + "label", timeout=10).read().decode()
    token = page.split('name="adherence-token" content="')[1].split('"')[0]
    state = json.loads(urllib.request.urlopen(url + "api/label/state", timeout=10).read())
    for i in range(state["size"]):
        turn = json.loads(urllib.request.urlopen(f"{url}api/label/turn?index={i}", timeout=10).read())
        body = json.dumps({"index": i, "label": truth[(turn["conversation_id"], turn["turn_index"])]}).encode()
        req = urllib.request.Request(url + "api/label", data=body, method="POST",
                                     headers={"Content-Type": "application/json", "X-Adherence-Token": token})  # fmt: skip
        urllib.request.urlopen(req, timeout=10).read()
    return state["size"]


def _truth_by_reply() -> dict:
    truth = {}
    for line in (EXAMPLES / "support_log.truth.jsonl").read_text().splitlines():
        r = json.loads(line)
        truth[(r["conversation_id"], r["turn_index"])] = r["label"] == "adherent"
    out = {}
    for line in (EXAMPLES / "support_log.jsonl").read_text().splitlines():
        rec = json.loads(line)
        replies = [m["content"] for m in rec["messages"] if m["role"] == "assistant"]
        for i, text in enumerate(replies):
            out[text] = truth[(rec["conversation_id"], i)]
    return out


def _strong_judge_server():
    """An OpenAI-compatible server whose first token is YES for an adherent reply and NO for a violation."""
    from tests.judges._server import ChatServer

    truth = sorted(_truth_by_reply().items(), key=lambda kv: -len(kv[0]))  # the longest reply found in a prompt

    class StrongJudge(ChatServer):
        def answer(self, path, body):
            content = body["messages"][-1]["content"]
            yes = True if content == self.PREFLIGHT else next((v for k, v in truth if k in content), True)
            top = [("YES", -0.02), ("NO", -4.0)] if yes else [("NO", -0.02), ("YES", -4.0)]
            logprobs = {"content": [{"token": top[0][0], "logprob": top[0][1],
                                     "top_logprobs": [{"token": t, "logprob": v} for t, v in top]}]}  # fmt: skip
            choice = {"message": {"role": "assistant", "content": top[0][0]}, "logprobs": logprobs}
            return 200, {"id": "x", "object": "chat.completion",
                         "choices": [dict(index=0, finish_reason="stop", **choice)]}  # fmt: skip

    return StrongJudge(None)


def test_the_page_runs_as_written(tmp_path, monkeypatch, capsys):

    (tmp_path / "adherence").mkdir()
    os.symlink(EXAMPLES, tmp_path / "adherence" / "examples")
    monkeypatch.chdir(tmp_path)
    commands = _page_commands()
    assert [c.split()[1] for c in commands] == ["score", "view", "classifier", "score", "estimate", "score",
                                                "cascade", "score", "score", "export", "calibrate", "score"]  # fmt: skip
    with _strong_judge_server() as server:
        for command in commands:
            command = command.replace("http://127.0.0.1:8000/v1", server.url)
            args = shlex.split(command)[1:]
            if args[0] == "view":
                proc = subprocess.Popen([sys.executable, "-m", "adherence", *args], stderr=subprocess.PIPE,
                                        start_new_session=True)  # fmt: skip
                try:
                    url = None
                    for _ in range(600):
                        line = proc.stderr.readline().decode()
                        m = re.search(r"label at (http://\S+/)label", line)
                        if m:
                            url = m.group(1)
                            break
                        assert proc.poll() is None, line
                    assert url == "http://127.0.0.1:8765/"
                    assert _label_as_the_truth_says(url) == 150
                finally:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                continue
            capsys.readouterr()
            assert main([*args, "--no-progress"]) == 0, command
            out = capsys.readouterr()
            if args[0] == "estimate":
                share = sum(json.loads(x)["label"] == "adherent" for x in
                            (EXAMPLES / "support_log.truth.jsonl").read_text().splitlines()) / 370  # fmt: skip
                low, high = map(float, re.search(r"\[(\S+), (\S+)\]", out.out).groups())
                assert low <= share <= high, out.out
            if args[:2] == ["classifier", "fit"]:
                assert "out-of-fold AUC" in out.out and "150 of 150 label(s) joined" in out.err
    labels = tmp_path / "out" / "labels.jsonl"
    assert sum(1 for ln in labels.read_text().splitlines() if '"labeller": "me"' in ln) == 150
    cascaded = pq.read_table(tmp_path / "out" / "cascaded.parquet")
    assert cascaded.num_rows == 370
    assert (tmp_path / "out" / "evaluations.otlp.jsonl").stat().st_size > 0
