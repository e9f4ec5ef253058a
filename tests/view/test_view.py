"""`adherence view`: the store's answers against pandas, the server's routes (nothing else reachable, bad input a
400), and the page driven in a real browser (Debian's Chromium through Playwright): load, filter, search, open a
conversation, move with the keyboard, and text shown as text."""

import json
import urllib.error
import urllib.request

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from adherence.cli.main import main
from adherence.view import Filters, ScoreStore, ViewServer

EVIL = '<img src=x onerror="document.body.dataset.pwned=1">'


def _output(path, n_conv=40, seed=0):
    """A score output: conversations of 2-6 turns, labels, predictions, a few errors, one reply that is HTML."""
    rng = np.random.default_rng(seed)
    rows = []
    for c in range(n_conv):
        role = f"You are assistant number {c % 3}."
        for t in range(int(rng.integers(2, 7))):
            score = float(rng.random())
            status = "error" if rng.random() < 0.05 else "ok"
            rows.append({
                "conversation_id": f"conv-{c:03d}", "turn_index": t, "role": role, "user": f"question {c}.{t} about refunds" if t % 2 else f"question {c}.{t}",
                "assistant": EVIL if (c, t) == (5, 0) else f"answer {c}.{t}", "label": ["adherent", "scope_violation"][int(rng.random() < 0.3)],
                "method": "llm_judge", "score": None if status == "error" else score,
                "prediction": None if status == "error" else int(score >= 0.5), "status": status,
                "error": "judge call failed" if status == "error" else None,
            })  # fmt: skip
    t = pa.Table.from_pylist(rows)
    pq.write_table(t, path)
    return t.to_pandas()


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = tmp_path_factory.mktemp("view") / "scores.parquet"
    df = _output(path)
    return path, df


def _reference(df, mask):
    sub = df[mask]
    g = sub.groupby("conversation_id")
    ref = g.agg(turns=("turn_index", "size"), mean_score=("score", "mean"))
    ref["violations"] = g["prediction"].apply(lambda p: (p.dropna() == 0).mean() if p.notna().any() else np.nan)
    ref["problems"] = g["status"].apply(lambda s: int(s.isin(["error", "unscored"]).sum()))
    return ref.sort_values(["mean_score", "violations"], ascending=[True, False], na_position="last")


@pytest.mark.parametrize(
    "filters,mask",
    [
        (Filters(), lambda d: d.index >= 0),
        (Filters(label="scope_violation"), lambda d: d["label"] == "scope_violation"),
        (
            Filters(status="ok", min_score=0.2, max_score=0.7),
            lambda d: (d["status"] == "ok") & d["score"].between(0.2, 0.7),
        ),
        (Filters(q="REFUNDS", prediction=0), lambda d: d["user"].str.contains("refunds") & (d["prediction"] == 0)),
        (Filters(q="50%_"), lambda d: d["user"].str.contains("50%_", regex=False)),  # no match: % and _ are literal
    ],
)
def test_the_ranking_and_its_numbers_are_pandas(data, filters, mask):
    path, df = data
    store = ScoreStore([path])
    got = store.conversations(filters, limit=500)
    ref = _reference(df, mask(df))
    assert got["total"] == len(ref)
    assert [r["conversation_id"] for r in got["rows"]] == list(ref.index)
    for r in got["rows"]:
        x = ref.loc[r["conversation_id"]]
        assert r["turns"] == x["turns"] and r["problems"] == x["problems"]
        assert (r["mean_score"] is None and np.isnan(x["mean_score"])) or r["mean_score"] == pytest.approx(
            x["mean_score"]
        )
        assert (r["violations"] is None and np.isnan(x["violations"])) or r["violations"] == pytest.approx(
            x["violations"]
        )


def test_a_conversation_and_the_distributions(data):
    path, df = data
    store = ScoreStore([path])
    c = store.conversation(0, "conv-007")
    want = df[df["conversation_id"] == "conv-007"].sort_values("turn_index")
    assert [t["turn_index"] for t in c["turns"]] == list(want["turn_index"])
    assert [t["assistant"] for t in c["turns"]] == list(want["assistant"])
    d = store.distributions(Filters())
    assert sum(sum(v) for v in d["histogram"].values()) == int(df["score"].notna().sum())
    by_turn = {r["turn_index"]: r["turns"] for r in d["by_turn"]}
    assert by_turn == df.groupby("turn_index").size().to_dict()
    with pytest.raises(KeyError):
        store.conversation(0, "no-such-id")


def _get(url):
    try:
        with urllib.request.urlopen(url) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


def test_only_its_routes_are_served(data):
    path, _ = data
    with ViewServer(ScoreStore([path]), port=0) as srv:
        assert srv.url.startswith("http://127.0.0.1:")
        status, body, headers = _get(srv.url)
        assert status == 200 and b"adherence view" in body and "script-src 'self'" in headers["Content-Security-Policy"]
        for probe in (
            "../../etc/passwd",
            "%2e%2e/%2e%2e/etc/passwd",
            "static/../_store.py",
            "app.js/../../x",
            "_store.py",
        ):
            assert _get(srv.url + probe)[0] == 404
        status, body, _ = _get(srv.url + "api/conversations?min=abc")
        assert status == 400 and "min must be a number" in json.loads(body)["error"]
        status, body, _ = _get(srv.url + "api/conversations?q=%27%3B%20DROP%20VIEW%20turns%3B%20--")
        assert status == 200 and json.loads(body)["total"] == 0
        assert json.loads(_get(srv.url + "api/summary")[1])["turns"] > 0  # the view is still there


@pytest.mark.slow
def test_the_page_in_a_real_browser(data, tmp_path, chromium):
    from playwright.sync_api import sync_playwright

    path, df = data
    with ViewServer(ScoreStore([path]), port=0) as srv, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        # the page's own Content-Security-Policy would also stop injected script; bypassing it here shows the page
        # never turns data into markup in the first place (and lets the test's waits evaluate expressions)
        page = browser.new_page(viewport={"width": 1280, "height": 900}, bypass_csp=True)
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(srv.url)
        page.wait_for_selector('body[data-ready="1"]')
        rows = page.locator("tr[data-testid=conversation-row]")
        assert rows.count() == 40 and "40 conversations match" in page.inner_text("#count")
        worst = _reference(df, df.index >= 0).index[0]
        assert rows.first.locator("td").first.inner_text() == worst
        page.screenshot(path=str(tmp_path / "list.png"), full_page=True)
        # a filter, then a search: the list is pandas' answer
        page.select_option("select[name=label]", "scope_violation")
        page.wait_for_selector('body[data-ready="1"]')
        n_scope = df[df["label"] == "scope_violation"]["conversation_id"].nunique()
        assert f"{n_scope} conversations match" in page.inner_text("#count")
        page.select_option("select[name=label]", "")
        n_refunds = df[df["user"].str.contains("refunds")]["conversation_id"].nunique()
        page.fill("input[name=q]", "refunds")
        page.wait_for_selector('body[data-ready="1"]')
        page.wait_for_function(f"document.querySelector('#count').textContent.startsWith('{n_refunds} ')")
        page.fill("input[name=q]", "")
        page.wait_for_selector('body[data-ready="1"]')
        page.wait_for_function("document.querySelector('#count').textContent.startsWith('40 ')")
        # open the worst conversation, then the next and back by keyboard
        first, second = [rows.nth(i).locator("td").first.inner_text() for i in (0, 1)]
        rows.first.click()
        page.wait_for_selector("li[data-testid=turn]")
        assert page.inner_text("#conversation-title") == f"conversation {first}"
        page.keyboard.press("ArrowRight")
        page.wait_for_function(f"document.querySelector('#conversation-title').textContent === 'conversation {second}'")
        page.keyboard.press("k")
        page.wait_for_function(f"document.querySelector('#conversation-title').textContent === 'conversation {first}'")
        page.screenshot(path=str(tmp_path / "conversation.png"), full_page=True)
        page.keyboard.press("Escape")
        page.wait_for_selector("#list-view:not([hidden])")
        # a reply that is HTML is shown as text, never run
        page.goto(srv.url + "#c/0/conv-005")
        page.wait_for_selector("li[data-testid=turn]")
        assert EVIL in page.inner_text("ol#turns") and page.locator("ol#turns img").count() == 0
        assert page.evaluate("document.body.dataset.pwned") is None
        assert not errors
        browser.close()


def test_export_html_escapes_and_ranks(data, tmp_path, capsys):
    path, df = data
    out = tmp_path / "worst.html"
    assert main(["view", str(path), "--export-html", str(out), "--top", "5"]) == 0
    text = out.read_text()
    worst = list(_reference(df, df.index >= 0).index[:5])
    assert [text.index(f"<h2>{c} ") for c in worst] == sorted(text.index(f"<h2>{c} ") for c in worst)
    assert EVIL not in text and "&lt;img src=x" in text.replace("&#x27;", "'") or "conv-005" not in worst
    assert "<script" not in text


@pytest.mark.slow  # a moto S3 server
def test_an_output_on_object_storage_is_viewed_where_it_lies(data, tmp_path):
    """An s3:// output (a real S3-compatible server on 127.0.0.1) gives the local file's answers."""

    pytest.importorskip("moto")
    from soak_s3 import s3_bucket

    path, _ = data
    with s3_bucket("views") as bucket:
        from pyarrow import fs as pafs

        fs, root = pafs.FileSystem.from_uri(f"{bucket}/run/scores.parquet")
        pq.write_table(pq.read_table(path), root, filesystem=fs)
        remote, local = ScoreStore([f"{bucket}/run/scores.parquet"]), ScoreStore([path])
        for f in (Filters(), Filters(label="scope_violation", q="refunds")):
            assert remote.conversations(f, limit=500)["rows"] == local.conversations(f, limit=500)["rows"]
        assert remote.conversation(0, "conv-003") == local.conversation(0, "conv-003")
        assert remote.summary()["turns"] == local.summary()["turns"]


def test_a_labels_file_over_the_outputs(data, tmp_path, chromium):
    """`view OUT --labels L`: the file's labels replace the output's own where it has one (the filter offers its
    values), and each conversation shows its labelled turns and the share whose prediction agrees (pandas)."""
    from playwright.sync_api import sync_playwright

    path, df = data
    rng = np.random.default_rng(1)
    labelled = df.sample(60, random_state=2).copy()
    labelled["given"] = np.where(rng.random(60) < 0.5, "adherent", "off_role")
    lab = tmp_path / "labels.jsonl"
    lab.write_text("".join(json.dumps({"conversation_id": r.conversation_id, "turn_index": int(r.turn_index),
                                       "label": r.given}) + "\n" for r in labelled.itertuples()))  # fmt: skip
    store = ScoreStore([path], labels=str(lab))
    summary = store.summary()
    assert summary["labels_file"]["positive"] == "adherent" and summary["labels_file"]["n"] == 60
    assert "off_role" in {v for v, _ in summary["labels"]}
    merged = df.merge(
        labelled[["conversation_id", "turn_index", "given"]], how="left", on=["conversation_id", "turn_index"]
    )
    merged["label2"] = merged["given"].fillna(merged["label"])
    got = {r["conversation_id"]: r for r in store.conversations(Filters(), limit=500)["rows"]}
    for cid, g in merged.groupby("conversation_id"):
        given = g[g["given"].notna()]
        assert got[cid]["labelled"] == len(g)  # every turn has a label: the file's, else the output's own
        both = g[g["prediction"].notna()]
        agree = ((both["label2"] == "adherent") == (both["prediction"] == 1)).mean() if len(both) else None
        assert got[cid]["agreement"] == pytest.approx(agree) if agree is not None else got[cid]["agreement"] is None
        assert len(given) <= len(g)
    n_off = merged[merged["label2"] == "off_role"]["conversation_id"].nunique()
    assert store.conversations(Filters(label="off_role"))["total"] == n_off
    with ViewServer(store, port=0) as srv, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1280, "height": 900}, bypass_csp=True)
        page.goto(srv.url)
        page.wait_for_selector('body[data-ready="1"]')
        assert page.locator("th.labels-col").is_visible()
        cells = page.locator("td[data-testid=labels-cell]")
        assert cells.count() == 40 and "%" in cells.first.inner_text()
        page.select_option("select[name=label]", "off_role")
        page.wait_for_function(f"document.querySelector('#count').textContent.startsWith('{n_off} ')")
        page.screenshot(path=str(tmp_path / "labels.png"), full_page=True)
        browser.close()
    # without a labels file the column is not there
    with ViewServer(ScoreStore([path]), port=0) as srv, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page()
        page.goto(srv.url)
        page.wait_for_selector('body[data-ready="1"]')
        assert (
            not page.locator("th.labels-col").is_visible() and page.locator("td[data-testid=labels-cell]").count() == 0
        )
        browser.close()


def test_a_browser_that_goes_away_is_no_traceback(data, capsys):
    """A closed tab mid-answer (BrokenPipeError / ConnectionResetError in the handler's thread): the server goes on
    without a traceback; any other error is still reported. The disconnect itself is raised here, as a real socket
    cannot be made to break at a chosen write."""
    from adherence.view._server import _Server

    path, _ = data
    with ViewServer(ScoreStore([path]), port=0) as srv:
        assert isinstance(srv.httpd, _Server)
        for exc in (BrokenPipeError(32, "Broken pipe"), ConnectionResetError(104, "reset")):
            try:
                raise exc
            except OSError:
                srv.httpd.handle_error(None, ("127.0.0.1", 1))
        assert capsys.readouterr().err == ""
        try:
            raise ValueError("a real bug")
        except ValueError:
            srv.httpd.handle_error(None, ("127.0.0.1", 1))
        assert "a real bug" in capsys.readouterr().err
        with urllib.request.urlopen(srv.url + "api/summary") as r:  # still serving
            assert r.status == 200


def test_a_normal_start_prints_no_third_party_warning(data, tmp_path):
    """DuckDB once warned of an 'extra copy' at every start: opening outputs (Parquet, and JSONL read into Arrow)
    warns of nothing, as a fresh process shows it."""
    import subprocess
    import sys

    path, df = data
    jsonl = tmp_path / "scores.jsonl"
    df.head(50).to_json(jsonl, orient="records", lines=True)
    for src in (path, jsonl):
        page = tmp_path / f"{src.suffix[1:]}.html"
        r = subprocess.run([sys.executable, "-W", "default", "-m", "adherence", "view", str(src), "--export-html",
                            str(page)], capture_output=True, text=True, timeout=120)  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert r.stderr.strip().splitlines() == [f"wrote {page}"], r.stderr
