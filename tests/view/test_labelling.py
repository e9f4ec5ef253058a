"""Labelling in the viewer: keys in a real browser, a killed server that loses nothing, several labellers' agreement
(irrCAC's), and the write endpoint's protections."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from irrCAC.raw import CAC
from sklearn.metrics import cohen_kappa_score

from adherence.data import example_path
from adherence.data._labels import read_labels
from adherence.view._labelling import LabelSession, draw_sample

LOG = example_path("role").parent / "support_log.jsonl"


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    """The bundled support log scored by scope (an output of ours, written by the command a user runs)."""
    out = tmp_path_factory.mktemp("scored") / "scope.parquet"
    subprocess.run([sys.executable, "-m", "adherence", "score", str(LOG), "-o", str(out), "--method", "scope",
                    "--no-progress"], check=True, capture_output=True)  # fmt: skip
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(scored, labels, port, *extra):
    proc = subprocess.Popen(
        [sys.executable, "-m", "adherence", "view", str(scored), "--label", str(labels), "--port", str(port), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/"
    for _ in range(300):
        try:
            urllib.request.urlopen(url + "api/label/state", timeout=1).read()
            return proc, url
        except (urllib.error.URLError, ConnectionError, TimeoutError):  # not listening yet, or a slow first answer
            if proc.poll() is not None:
                raise AssertionError(proc.stdout.read().decode()) from None
            time.sleep(0.1)
    proc.kill()
    raise AssertionError("the viewer did not start")


def _state(url):
    return json.loads(urllib.request.urlopen(url + "api/label/state", timeout=5).read())


@pytest.mark.slow
def test_keys_label_ten_turns_a_kill_loses_none_and_the_sample_resumes(scored, tmp_path, chromium):
    from playwright.sync_api import sync_playwright

    labels = tmp_path / "labels.jsonl"
    keys = list("avavaaaavs")  # 9 labels and a skip...
    port = _free_port()
    proc, url = _start(scored, labels, port, "--sample", "30", "--seed", "4", "--labeller", "ann")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        # the waits below evaluate expressions, which the page's own Content-Security-Policy forbids
        page = browser.new_page(viewport={"width": 1100, "height": 900}, bypass_csp=True)
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(url + "label")
        page.wait_for_function("document.querySelector('#where').textContent.startsWith('turn 1 of 30')")
        assert page.inner_text("#role").startswith("You are")
        for i, k in enumerate(keys):
            page.keyboard.press(k)
            page.wait_for_function(f"document.querySelector('#where').textContent.startsWith('turn {i + 2} of 30')")
        page.keyboard.press("u")  # ...then the skip undone,
        page.wait_for_function("document.querySelector('#where').textContent.startsWith('turn 10 of 30')")
        page.keyboard.press("b")  # a look back at turn 9 and forward again,
        page.wait_for_function("document.querySelector('#where').textContent.startsWith('turn 9 of 30')")
        assert "your label: violation" in page.inner_text("#facts")
        page.keyboard.press("ArrowRight")
        page.wait_for_function("document.querySelector('#where').textContent.startsWith('turn 10 of 30')")
        page.keyboard.press("a")  # ...and turn 10 labelled: ten labels
        page.wait_for_function("document.querySelector('#where').textContent.startsWith('turn 11 of 30')")
        page.wait_for_function("document.querySelector('#progress').textContent.startsWith('10 of 30')")
        assert "adherent share now" in page.inner_text("#estimate")
        page.screenshot(path=str(tmp_path / "labelling.png"), full_page=True)
        assert _state(url)["labelled"] == 10
        os.killpg(proc.pid, signal.SIGKILL)  # no shutdown of any kind
        proc.wait()
        proc, url = _start(scored, labels, port, "--labeller", "ann")
        page.goto(url + "label")
        page.wait_for_function("document.querySelector('#where').textContent.startsWith('turn 11 of 30')")
        assert page.inner_text("#progress").startswith("10 of 30")
        browser.close()
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not errors
    mine = read_labels(labels).by_labeller()["ann"]
    assert len(mine) == 10 and sum(v == "violation" for v in mine.values()) == 3
    sample = read_labels(labels).sample
    assert sample["seed"] == 4 and sample["size"] == 30 and len(sample["turns"]) == 30
    assert [tuple(k[:2]) for k in sample["turns"][:10]] == sorted(mine, key=[tuple(k[:2]) for k in
                                                                           sample["turns"]].index)  # fmt: skip


@pytest.mark.slow
def test_two_labellers_agreement_is_irrcacs(scored, tmp_path):
    import pyarrow.parquet as pq

    t = pq.read_table(scored)
    keys = list(zip(t.column("conversation_id").to_pylist(), t.column("turn_index").to_pylist()))
    scores = np.asarray(t.column("score").to_pylist(), dtype=float)
    path = tmp_path / "labels.jsonl"
    ann = LabelSession(str(path), keys, scores, labeller="ann", source=str(scored), sample=40, seed=2)
    bob = LabelSession(str(path), keys, scores, labeller="bob", source=str(scored))
    rng = np.random.default_rng(0)
    a = rng.choice(["adherent", "violation"], 40, p=[0.7, 0.3])
    b = np.where(rng.random(40) < 0.8, a, rng.choice(["adherent", "violation"], 40))
    for i in range(40):
        ann.write(i, str(a[i]))
        if i < 35:  # bob leaves five
            bob.write(i, str(b[i]))
    got = bob.state()["agreement"]
    ratings = pd.DataFrame({"ann": a, "bob": list(b[:35]) + [None] * 5})
    cac = CAC(ratings, digits=12)
    assert got["gwet_ac1"] == pytest.approx(cac.gwet()["est"]["coefficient_value"], abs=1e-10)
    assert got["fleiss_kappa"] == pytest.approx(cac.fleiss()["est"]["coefficient_value"], abs=1e-10)
    assert got["cohen_kappa"] == pytest.approx(cohen_kappa_score(a[:35], b[:35]), abs=1e-12)
    assert got["n_shared"] == 35 and got["labellers"] == ["ann", "bob"]


@pytest.mark.slow
def test_writes_need_the_token_the_hosts_name_and_its_own_origin(scored, tmp_path):
    labels = tmp_path / "labels.jsonl"
    port = _free_port()
    proc, url = _start(scored, labels, port, "--sample", "5")
    try:
        page = urllib.request.urlopen(url + "label", timeout=5).read().decode()
        token = page.split('name="adherence-token" content="')[1].split('"')[0]
        assert len(token) >= 24
        before = labels.read_bytes()

        def post(headers):
            req = urllib.request.Request(url + "api/label", data=json.dumps({"index": 0, "label": "adherent"}).encode(),
                                         headers={"Content-Type": "application/json", **headers}, method="POST")  # fmt: skip
            try:
                return urllib.request.urlopen(req, timeout=5).status
            except urllib.error.HTTPError as e:
                return e.code

        assert post({}) == 403  # no token
        assert post({"X-Adherence-Token": "x" * len(token)}) == 403  # a wrong one
        assert post({"X-Adherence-Token": token, "Origin": "http://evil.example"}) == 403
        assert post({"X-Adherence-Token": token, "Host": f"evil.example:{port}"}) == 403  # DNS rebinding
        req = urllib.request.Request(url + "api/summary", headers={"Host": f"rebound.example:{port}"})
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=5)
        assert e.value.code == 403  # reads too
        assert labels.read_bytes() == before
        assert post({"X-Adherence-Token": token, "Origin": url.rstrip("/")}) == 200
        assert post({"X-Adherence-Token": token, "Host": f"localhost:{port}"}) == 200
        assert len(read_labels(labels).events) == 2
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.mark.slow
def test_a_resumed_file_keeps_its_sample_and_refuses_another(scored, tmp_path):
    import pyarrow.parquet as pq

    t = pq.read_table(scored)
    keys = list(zip(t.column("conversation_id").to_pylist(), t.column("turn_index").to_pylist()))
    path = tmp_path / "l.jsonl"
    first = LabelSession(str(path), keys, np.zeros(len(keys)), labeller="a", source="s", sample=7, seed=1)
    again = LabelSession(str(path), keys, np.zeros(len(keys)), labeller="a", source="s")
    assert again.turns == first.turns
    with pytest.raises(ValueError, match="holds a sample with seed 1"):
        LabelSession(str(path), keys, np.zeros(len(keys)), labeller="a", source="s", seed=2)
    user = tmp_path / "mine.jsonl"
    user.write_text('{"conversation_id": "a", "turn_index": 0, "label": "x"}\n')
    with pytest.raises(ValueError, match="no sample record"):
        LabelSession(str(user), keys, np.zeros(len(keys)), labeller="a", source="s")
    assert Path(user).read_text().count("\n") == 1


@pytest.mark.slow
def test_a_label_cut_short_by_a_kill_is_dropped_and_the_next_label_reads(scored, tmp_path):
    """A kill in the middle of a label's write leaves a partial last line: the reader leaves it out (and says so),
    and the resumed session removes it before appending (the next label was glued to it: the file became
    unreadable at that line)."""
    import pyarrow.parquet as pq

    from adherence.data._labels import read_labels

    t = pq.read_table(scored)
    keys = list(zip(t.column("conversation_id").to_pylist(), t.column("turn_index").to_pylist()))
    path = tmp_path / "l.jsonl"
    first = LabelSession(str(path), keys, np.zeros(len(keys)), labeller="a", source="s", sample=7, seed=1)
    first.write(0, "adherent")
    first.write(1, "violation")
    with open(path, "ab") as f:
        f.write(b'{"conversation_id": "x", "turn_in')
    with pytest.warns(UserWarning, match=r"l.jsonl: line 4 is cut short"):
        assert len(read_labels(path).latest()) == 2
    with pytest.warns(UserWarning, match="cut short"):
        again = LabelSession(str(path), keys, np.zeros(len(keys)), labeller="a", source="s")
    again.write(2, "adherent")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sorted(again.mine().values()) == ["adherent", "adherent", "violation"]
    assert path.read_bytes().endswith(b"\n") and b"turn_in\n" not in path.read_bytes()


def test_uniform_sample_weights_are_population_over_size():
    keys = [(str(i), 0) for i in range(50)]
    drawn = draw_sample(keys, np.zeros(50), 10, "uniform", 3)
    assert len({k[:2] for k in drawn}) == 10 and {w for *_, w in drawn} == {5.0}
    assert drawn == draw_sample(keys, np.zeros(50), 10, "uniform", 3)  # the seed decides


@pytest.mark.slow
def test_the_pages_estimate_is_what_estimate_gives_on_the_same_labels(scored, tmp_path):
    """The share and interval shown while labelling are `estimate --labels`' on the same file: design-weighted,
    prediction-powered, clustered by conversation."""
    import pyarrow.parquet as pq

    from adherence.data._labels import join_labels
    from adherence.stats import estimate_table

    t = pq.read_table(scored)
    keys = list(zip(t.column("conversation_id").to_pylist(), t.column("turn_index").to_pylist()))
    scores = np.asarray(t.column("score").to_pylist(), dtype=float)
    truth = {}
    for line in (LOG.parent / "support_log.truth.jsonl").read_text().splitlines():
        r = json.loads(line)
        truth[(r["conversation_id"], r["turn_index"])] = r["label"]
    for design in ("uniform", "by-score"):
        path = tmp_path / f"{design}.jsonl"
        s = LabelSession(str(path), keys, scores, labeller="ann", source=str(scored), sample=60, design=design, seed=3)
        for i, k in enumerate(s.turns):
            s.write(i, truth[k])
        shown = s.state()["estimate"]
        joined, _ = join_labels(t, read_labels(path), file=str(scored))
        want = estimate_table(joined, score="score", label="label", positive="adherent", weight="label_weight")
        assert shown["estimate"] == pytest.approx(want["estimate"], abs=1e-12)
        assert shown["ci_low"] == pytest.approx(max(want["ci_low"], 0.0), abs=1e-12)
        assert shown["ci_high"] == pytest.approx(min(want["ci_high"], 1.0), abs=1e-12)


@pytest.mark.slow
def test_the_page_is_blind_by_default_and_the_finish_screen_gives_the_next_commands(scored, tmp_path, chromium):
    """No score beside the turn unless --show-scores (the page and its API alike); a reopened file keeps its
    labeller; the finish screen counts the skipped turns and prints the commands that use the labels."""
    from playwright.sync_api import sync_playwright

    labels = tmp_path / "labels.jsonl"
    port = _free_port()
    proc, url = _start(scored, labels, port, "--sample", "3", "--seed", "2", "--labeller", "bo")
    try:
        turn = json.loads(urllib.request.urlopen(url + "api/label/turn?index=0", timeout=5).read())
        assert turn["blind"] and turn["score"] is None and turn["method"] is None
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1100, "height": 900}, bypass_csp=True)
            page.goto(url + "label")
            page.wait_for_function("document.querySelector('#where').textContent.startsWith('turn 1 of 3')")
            assert "hidden while labelling" in page.inner_text("#facts")
            assert not any(c.isdigit() for c in page.inner_text("#facts"))
            for i, k in enumerate("avs"):
                page.keyboard.press(k)
                page.wait_for_function(
                    f"document.querySelector('#where').textContent.startsWith('{'turn ' + str(i + 2) if i < 2 else 'All'}')"
                )
            page.wait_for_function("document.querySelector('#next').textContent.includes('classifier fit')")
            done = page.inner_text("#where")
            assert "2 labelled" in done and "1 skipped" in done
            nxt = page.inner_text("#next")
            assert page.is_hidden("#turn-now")
            assert f"adherence classifier fit {scored} --labels {labels} -o clf.json" in nxt
            assert f"adherence estimate {scored} --labels {labels}" in nxt
            page.screenshot(path=str(tmp_path / "finished.png"), full_page=True)
            browser.close()
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    # reopened without --labeller: the file's labeller, said in one line; with --show-scores the score is shown
    port = _free_port()
    proc, url = _start(scored, labels, port, "--show-scores")
    try:
        assert _state(url)["labeller"] == "bo" and _state(url)["labelled"] == 2
        turn = json.loads(urllib.request.urlopen(url + "api/label/turn?index=0", timeout=5).read())
        assert not turn["blind"] and isinstance(turn["score"], float) and turn["method"] == "scope"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert "labelling as 'bo', the labeller of" in proc.stdout.read().decode()


def test_the_by_uncertainty_design_draws_near_the_threshold_and_its_weighted_estimates_are_unbiased():
    """2,000 turns whose adherence depends on the score; 400 samples of 80 by-uncertainty draws: turns near the
    threshold are drawn far more often than their share, the labels' plain mean is off, and the design-weighted
    (Hajek) mean of the labels is unbiased -- what `estimate` computes from the weights the file records."""
    from adherence.view._labelling import closeness

    rng = np.random.default_rng(0)
    n_pop = 2000
    s = rng.beta(5, 1.5, n_pop)
    y = (rng.random(n_pop) < s).astype(float)  # adherent with probability = score
    keys = [(f"c{i // 4}", i % 4) for i in range(n_pop)]
    pos = {k: i for i, k in enumerate(keys)}
    near = closeness(s, 0.5)
    plain, weighted, closeness_drawn = [], [], []
    for seed in range(400):
        drawn = draw_sample(keys, s, 80, "by-uncertainty", seed, threshold=0.5)
        idx = np.array([pos[(c, t)] for c, t, _ in drawn])
        w = np.array([w for _, _, w in drawn])
        assert len(set(idx.tolist())) == 80
        assert w.sum() == pytest.approx(n_pop)  # stratum sizes over draws: every turn counted once in all
        plain.append(y[idx].mean())
        weighted.append((w * y[idx]).sum() / w.sum())
        closeness_drawn.append(near[idx].mean())
    truth = y.mean()
    se = np.std(weighted) / np.sqrt(len(weighted))
    assert abs(np.mean(weighted) - truth) < max(4 * se, 0.005), (np.mean(weighted), truth)
    assert np.mean(plain) < truth - 0.05  # the uncertain turns are the violations' neighbourhood
    assert np.mean(closeness_drawn) > near.mean() + 0.1


def test_a_restart_never_deletes_a_whole_label_and_keeps_a_torn_line_aside(scored, tmp_path):
    """The issue's repros: a labels file saved without a final newline lost its last (valid) label at the next start,
    and a header-only file without a newline was truncated to nothing. Now a whole last line is completed, and only a
    line a kill cut short is removed -- into `<file>.torn`, not into nothing."""
    import pyarrow.parquet as pq

    t = pq.read_table(scored)
    keys = list(zip(t.column("conversation_id").to_pylist(), t.column("turn_index").to_pylist()))
    scores = t.column("score").to_numpy()
    path = tmp_path / "l.jsonl"
    s = LabelSession(str(path), keys, scores, labeller="ann", source=str(scored), sample=10, seed=1)
    s.write(0, "adherent")
    s.write(1, "violation")
    path.write_bytes(path.read_bytes().rstrip(b"\n"))  # an editor saved it without the final newline
    s = LabelSession(str(path), keys, scores, labeller=None, source=str(scored))
    assert s.labeller == "ann" and s.state()["labelled"] == 2
    assert path.read_bytes().endswith(b"\n") and any("completed" in n for n in s.notes)
    s.write(2, "adherent")
    assert s.state()["labelled"] == 3
    # a torn tail goes to .torn, the labels before it stay
    path.write_bytes(path.read_bytes() + b'{"conversation_id": "x", "turn_')
    s = LabelSession(str(path), keys, scores, labeller="ann", source=str(scored))
    assert s.state()["labelled"] == 3
    assert (tmp_path / "l.jsonl.torn").read_bytes() == b'{"conversation_id": "x", "turn_\n'
    # a header-only file without its newline is resumed, not emptied
    head = tmp_path / "h.jsonl"
    LabelSession(str(head), keys, scores, labeller="bo", source=str(scored), sample=5, seed=2)
    head.write_bytes(head.read_bytes().rstrip(b"\n"))
    size = head.stat().st_size
    s = LabelSession(str(head), keys, scores, labeller="bo", source=str(scored))
    assert head.stat().st_size == size + 1 and s.state()["size"] == 5


@pytest.mark.parametrize(
    "edit",
    [
        lambda r: r["turns"][0].__setitem__(2, 0.5),
        lambda r: r["turns"][0].__setitem__(2, 0),
        lambda r: r["turns"][0].__setitem__(2, -3),
        lambda r: r["turns"][0].__setitem__(2, "abc"),
        lambda r: r["turns"][0].__setitem__(2, None),
        lambda r: r.pop("turns"),
        lambda r: r["turns"].__setitem__(0, ["x"]),
    ],
)
def test_an_edited_sample_record_is_one_line_before_the_page_starts(scored, tmp_path, capsys, edit):
    """The issue's repros: weights of 0.5 / 0 / -3 started a session that wrote labels its own reader refused, and
    "abc" / null weights, a missing `turns` or a turn ["x"] gave "internal error"."""
    import pyarrow.parquet as pq

    from adherence.cli.main import main

    t = pq.read_table(scored)
    keys = list(zip(t.column("conversation_id").to_pylist(), t.column("turn_index").to_pylist()))
    path = tmp_path / "l.jsonl"
    LabelSession(str(path), keys, t.column("score").to_numpy(), labeller="ann", source=str(scored), sample=5)
    lines = path.read_text().splitlines()
    head = json.loads(lines[0])
    edit(head["sample"])
    path.write_text(json.dumps(head) + "\n")
    capsys.readouterr()
    assert main(["view", str(scored), "--label", str(path), "--port", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0] and "internal error" not in err[0], err
    assert path.read_text() == json.dumps(head) + "\n"  # nothing written


@pytest.mark.slow
def test_a_key_pressed_while_a_label_is_saved_labels_no_turn_twice(scored, tmp_path, chromium):
    """The issue's repro: a key pressed during the first (slow) save labelled the same turn twice and skipped the
    next. The page takes one action at a time: the second press is dropped, every turn gets one label."""
    from playwright.sync_api import sync_playwright

    labels = tmp_path / "labels.jsonl"
    port = _free_port()
    proc, url = _start(scored, labels, port, "--sample", "5", "--seed", "3", "--labeller", "cy")
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(bypass_csp=True)
            # every request answered 0.8 s late, as the first save on a slow disk was
            page.add_init_script("const f = window.fetch; window.fetch = (...a) => "
                                 "new Promise(r => setTimeout(() => r(f(...a)), 800));")  # fmt: skip
            page.goto(url + "label")
            page.wait_for_function("document.querySelector('#where').textContent.startsWith('turn 1 of 5')")
            page.keyboard.press("a")
            page.keyboard.press("v")  # at once, while the first label is being saved
            page.wait_for_function("document.querySelector('#where').textContent.startsWith('turn 2 of 5')")
            page.wait_for_timeout(500)
            assert page.inner_text("#where").startswith("turn 2 of 5")
            browser.close()
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    events = read_labels(labels).events
    assert [e["label"] for e in events] == ["adherent"]


def test_evaluate_and_calibrate_refuse_labels_drawn_with_unequal_probabilities(scored, tmp_path, capsys):
    """The issue's repro: `evaluate` on a by-score sample printed AUC 0.928 [0.878, 0.973] against 0.845 on all
    turns, with no word of the design. It is refused with the reason (and `estimate`, which weights, goes on)."""
    import pyarrow.parquet as pq

    from adherence.cli.main import main

    t = pq.read_table(scored)
    keys = list(zip(t.column("conversation_id").to_pylist(), t.column("turn_index").to_pylist()))
    truth = {(r["conversation_id"], r["turn_index"]): r["label"]
             for r in map(json.loads, (LOG.parent / "support_log.truth.jsonl").read_text().splitlines())}  # fmt: skip
    path = tmp_path / "by-score.jsonl"
    s = LabelSession(str(path), keys, t.column("score").to_numpy(), labeller="ann", source=str(scored), sample=60,
                     design="by-score", seed=1)  # fmt: skip
    for i, k in enumerate(s.turns):
        s.write(i, truth[k])
    for argv in (["evaluate", str(scored), "--labels", str(path)],
                 ["calibrate", str(scored), "--labels", str(path), "-o", str(tmp_path / "c.json")]):  # fmt: skip
        capsys.readouterr()
        assert main(argv) == 2
        assert "drawn with unequal probabilities" in capsys.readouterr().err
    assert not (tmp_path / "c.json").exists()
    assert main(["estimate", str(scored), "--labels", str(path)]) == 0
