"""docs/labels.md, run as written: every `adherence` command on the page, in order, in a directory holding the
bundled examples. Two things a test cannot hold fixed are stood in for: the person at the labelling page is a
script that answers each sampled turn from the log's truth file through the page's own endpoints (with the token
the page carries), and the served judge is a local OpenAI-compatible server of a tiny random-weight model, whose URL
replaces the page's http://127.0.0.1:8000/v1."""

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


def test_the_page_runs_as_written(tmp_path, monkeypatch, capsys, tiny_yes_no_judge):
    from tests.judges._server import ChatServer

    (tmp_path / "adherence").mkdir()
    os.symlink(EXAMPLES, tmp_path / "adherence" / "examples")
    monkeypatch.chdir(tmp_path)
    commands = _page_commands()
    assert [c.split()[1] for c in commands] == ["score", "view", "classifier", "score", "estimate", "score",
                                                "cascade", "score", "score", "export", "calibrate", "score"]  # fmt: skip
    with ChatServer(tiny_yes_no_judge) as server:
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
