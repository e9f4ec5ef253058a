"""Every "What next" command on every page runs as printed: evaluate's, calibrate's, estimate's and cascade fit's
pages, made from outputs with labels in the table and from outputs joined to a labels file."""

from __future__ import annotations

import html
import re
import shlex
import shutil

import pytest

from adherence.cli.main import main
from adherence.data import example_path

pytestmark = pytest.mark.slow


def _commands(page: str) -> list:
    """The runnable commands of a page's "What next" section: each <code> that starts with ``adherence ``."""
    section = page.split("<h2>What next</h2>", 1)[1]
    codes = [html.unescape(c) for c in re.findall(r"<code>(.*?)</code>", section, flags=re.S)]
    return [c for c in codes if c.startswith("adherence ")]


def _run_all(page_path, tmp_path, monkeypatch, capsys) -> list:
    monkeypatch.chdir(tmp_path)
    cmds = _commands(page_path.read_text())
    assert cmds, "the page gives no command"
    for cmd in cmds:
        argv = shlex.split(cmd)
        assert argv[0] == "adherence"
        code = main(argv[1:])
        err = capsys.readouterr().err
        assert code == 0, f"{cmd!r} exited {code}: {err[-800:]}"
    return cmds


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    """The support log scored by scope (labels in a separate file), and the bundled role turns by cosine (labels
    in the table)."""
    d = tmp_path_factory.mktemp("scored")
    support, truth = example_path("role").parent / "support_log.jsonl", d / "truth.jsonl"
    shutil.copy(example_path("role").parent / "support_log.truth.jsonl", truth)
    assert main([
        "score", str(support), "-o", str(d / "scope.parquet"), "--method", "scope", "-q", "--no-progress",
    ]) == 0  # fmt: skip
    assert main([
        "score", str(example_path("role")), "-o", str(d / "cosine.parquet"), "--method", "cosine", "-q",
        "--no-progress",
    ]) == 0  # fmt: skip
    return d, truth


def test_evaluate_pages_with_and_without_a_labels_file(scored, tmp_path, monkeypatch, capsys):
    d, truth = scored
    page = tmp_path / "scope.html"
    assert main(["evaluate", str(d / "scope.parquet"), "--labels", str(truth), "--html", str(page), "-q"]) == 0
    cmds = _run_all(page, tmp_path, monkeypatch, capsys)
    assert all(f"--labels {truth}" in c for c in cmds)  # the page was made with labels: its commands give them
    page = tmp_path / "cosine.html"
    assert main(["evaluate", str(d / "cosine.parquet"), "--html", str(page), "-q"]) == 0
    cmds = _run_all(page, tmp_path, monkeypatch, capsys)
    assert not any("--labels" in c for c in cmds)


def test_calibrate_page_gives_the_scoring_command_that_applies_it(scored, tmp_path, monkeypatch, capsys):
    d, truth = scored
    page, cal = tmp_path / "cal.html", tmp_path / "cal.json"
    assert main(["calibrate", str(d / "cosine.parquet"), "-o", str(cal), "--html", str(page), "-q"]) == 0
    cmds = _run_all(page, tmp_path, monkeypatch, capsys)
    assert len(cmds) == 1 and cmds[0].startswith("adherence score ") and "--method cosine" in cmds[0]
    assert f"--calibration {cal}" in cmds[0]
    # what it made: the same turns, scored again with the calibration applied
    import pyarrow.parquet as pq

    out = pq.read_table(d / "cosine-calibrated.parquet")
    assert "calibrated_score" in out.column_names


def test_estimate_page_with_a_labels_file(scored, tmp_path, monkeypatch, capsys):
    d, truth = scored
    page = tmp_path / "estimate.html"
    assert main(["estimate", str(d / "scope.parquet"), "--labels", str(truth), "--html", str(page), "-q"]) == 0
    cmds = _run_all(page, tmp_path, monkeypatch, capsys)
    assert any("--by role" in c and f"--labels {truth}" in c for c in cmds)
    assert (tmp_path / "by-role.html").is_file()


def test_cascade_page_gives_the_apply_command(scored, tmp_path, monkeypatch, capsys):
    d, truth = scored
    page, cascade = tmp_path / "cascade.html", tmp_path / "cascade.json"
    assert main([
        "cascade", "fit", str(d / "cosine.parquet"), "-o", str(cascade), "--alpha", "0.3", "--html", str(page), "-q",
    ]) == 0  # fmt: skip
    cmds = _run_all(page, tmp_path, monkeypatch, capsys)
    assert cmds == [f"adherence cascade apply {d / 'cosine.parquet'} --cascade {cascade} -o decided.parquet"]
    assert (tmp_path / "decided.parquet").is_file()


def test_an_output_without_labels_is_told_to_give_labels(scored, capsys):
    d, _ = scored
    code = main(["evaluate", str(d / "scope.parquet")])
    err = capsys.readouterr().err
    assert code == 2 and "no labels: give --labels FILE" in err and "--positive" not in err
