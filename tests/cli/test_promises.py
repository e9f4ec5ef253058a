"""Every command keeps the engine's promises: its files through the one owner-checked writer (never an input,
never a file it did not create), its score outputs through the one reader (a corrupt file is one line naming it),
and --labels on every statistical command, with the labels that match no turn counted and named."""

import json
import shutil

import pyarrow.parquet as pq
import pytest

from adherence.cli.main import main
from adherence.data import example_path

LOG = example_path("role").parent / "support_log.jsonl"
TRUTH = example_path("role").parent / "support_log.truth.jsonl"


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    d = tmp_path_factory.mktemp("scored")
    out = d / "scope.parquet"
    assert main(["score", str(LOG), "-o", str(out), "--method", "scope", "--no-progress"]) == 0
    labels = d / "labels.jsonl"
    rows = [json.loads(x) for x in TRUTH.read_text().splitlines()]
    # a uniform sample of 150 of the 370 turns, and one label for a turn that is not in the output
    import numpy as np

    pick = np.random.default_rng(0).choice(len(rows), 150, replace=False)
    lines = [dict(rows[i], labeller="ann") for i in sorted(pick)]
    lines.append({"conversation_id": "elsewhere-1", "turn_index": 3, "label": "adherent", "labeller": "ann"})
    labels.write_text("".join(json.dumps(r) + "\n" for r in lines))
    return out, labels


@pytest.mark.parametrize(
    "argv",
    [
        ["view", "{out}", "--export-html", "{out}"],
        ["compare", "{out}", "{out2}", "--html", "{out2}"],
        ["evaluate", "{out}", "--labels", "{labels}", "-o", "{labels}"],
        ["estimate", "{out}", "--labels", "{labels}", "--html", "{out}"],
        ["calibrate", "{out}", "--labels", "{labels}", "-o", "{out}"],
        ["export", "{out}", "--format", "otel", "-o", "{out}"],
    ],
)
@pytest.mark.slow
def test_no_command_writes_over_its_input(tmp_path, capsys, scored, argv):
    out, labels = scored
    out2 = tmp_path / "again.parquet"
    shutil.copy(out, out2)
    shutil.copy(str(out) + ".meta.json", str(out2) + ".meta.json")
    before = {p: p.read_bytes() for p in (out, labels, out2)}
    capsys.readouterr()
    code = main([a.format(out=out, out2=out2, labels=labels) for a in argv])
    err = capsys.readouterr().err
    assert code == 2, err
    assert {p: p.read_bytes() for p in before} == before
    assert ("would overwrite the input" in err) or ("no trace_id column" in err)


@pytest.mark.slow
def test_no_command_writes_over_a_file_it_did_not_create(tmp_path, capsys, scored):
    out, labels = scored
    mine = tmp_path / "report.html"
    mine.write_text("my own notes")
    for argv in (
        ["evaluate", str(out), "--labels", str(labels), "--html", str(mine), "--bootstrap", "0"],
        ["estimate", str(out), "--labels", str(labels), "-o", str(mine)],
        ["view", str(out), "--export-html", str(mine)],
        # a benchmark's JSON went through a writer of its own that replaced whatever was there
        ["bench", "kernels", "--device", "cpu", "--batch", "16", "--dim", "8", "--refs", "2", "--repeats", "1",
         "-o", str(mine)],
        ["persona", "--reference", str(mine), "--simulation", str(mine), "-o", str(mine)],
    ):  # fmt: skip
        capsys.readouterr()
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert "not written by adherence" in err or "would overwrite the input" in err, (argv, err)
    assert mine.read_text() == "my own notes"
    # a file the command wrote is its own to replace
    page = tmp_path / "page.html"
    for _ in range(2):
        assert main(["view", str(out), "--export-html", str(page)]) == 0
    assert page.read_text().startswith("<!doctype html>")


@pytest.mark.slow
def test_a_corrupt_output_is_one_line_naming_it_in_every_command(tmp_path, capsys, scored):
    out, labels = scored
    bad = tmp_path / "bad.parquet"
    data = out.read_bytes()
    bad.write_bytes(data[: len(data) // 3])
    shutil.copy(str(out) + ".meta.json", str(bad) + ".meta.json")
    for argv in (
        ["evaluate", str(bad), "--labels", str(labels)],
        ["estimate", str(bad), "--labels", str(labels)],
        ["calibrate", str(bad), "--labels", str(labels), "-o", str(tmp_path / "c.json")],
        ["compare", str(out), str(bad)],
        ["cascade", "fit", str(bad), "--labels", str(labels), "-o", str(tmp_path / "k.json")],
        ["view", str(bad), "--export-html", str(tmp_path / "v.html")],
        ["export", str(bad), "--format", "otel", "-o", str(tmp_path / "e.jsonl")],
    ):
        capsys.readouterr()
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and str(bad) in err[0] and "internal error" not in err[0], (argv, err)


@pytest.mark.slow
@pytest.mark.parametrize("command", ["evaluate", "calibrate", "estimate"])
def test_every_statistical_command_reads_the_labels_file(tmp_path, capsys, scored, command):
    out, labels = scored
    argv = [command, str(out), "--labels", str(labels), "--json"]
    if command == "calibrate":
        argv += ["-o", str(tmp_path / "cal.json")]
    if command != "estimate":
        argv += ["--bootstrap", "0"]
    capsys.readouterr()
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "150 of 151 label(s) joined" in captured.err
    assert "1 label(s) match no turn and are left out: elsewhere-1/3" in captured.err
    r = json.loads(captured.out)
    if command == "evaluate":
        assert r["n"] == 150 and r["labels"]["n_unmatched"] == 1
    elif command == "estimate":
        truth = [json.loads(x)["label"] == "adherent" for x in TRUTH.read_text().splitlines()]
        assert r["n_labelled"] == 150 and abs(r["estimate"] - sum(truth) / len(truth)) < 3 * r["se"] + 0.01
    else:
        assert r["source"]["labels"]["n_matched"] == 150 and r["source"]["labels_digest"].startswith("sha256:")


@pytest.mark.slow
def test_classifier_fit_reads_the_labels_file_and_scores_through_the_engine(tmp_path, capsys, scored):
    out, labels = scored
    clf = tmp_path / "clf.json"
    capsys.readouterr()
    assert main(["classifier", "fit", str(LOG), "--labels", str(labels), "-o", str(clf), "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert "5-fold out-of-fold AUC" in captured.out and "reply length" in captured.out
    assert "1 label(s) match no turn" in captured.err
    doc = json.loads(clf.read_text())
    assert doc["source"]["n"] == 150 and doc["cv"]["baselines"]["auc"]["reply_length"] > 0
    scores = tmp_path / "clf.parquet"
    assert main(["score", str(LOG), "-o", str(scores), "--method", "classifier", "--classifier", str(clf),
                 "--no-progress"]) == 0  # fmt: skip
    t = pq.read_table(scores)
    assert t.num_rows == 370 and set(t.column("status").to_pylist()) == {"ok"}
    meta = json.loads((tmp_path / "clf.parquet.meta.json").read_text())
    assert meta["config"]["classifier_digest"].startswith("sha256:")
    # an edited classifier is refused before any work
    doc["model"]["intercept"] += 1
    clf.write_text(json.dumps(doc))
    capsys.readouterr()
    assert main(["score", str(LOG), "-o", str(tmp_path / "x.parquet"), "--method", "classifier", "--classifier",
                 str(clf)]) == 2  # fmt: skip
    assert "edited after it was fitted" in capsys.readouterr().err


@pytest.mark.slow
def test_a_command_replaces_only_a_file_of_its_own_kind_and_never_labels(tmp_path, capsys, scored):
    """One file of each kind adherence writes, and every command's -o / --html pointed at each of another kind:
    refused, the file untouched (the issue's repro: `evaluate a.parquet --html b.parquet` made b.parquet a page;
    `calibrate -o labels.jsonl` replaced the viewer's labels). A command's own kind, made by it, is replaced."""
    from adherence.view._labelling import LabelSession

    out, labels = scored
    d = tmp_path
    made = {
        "scores": d / "scores.parquet",
        "sessions": d / "scores.sessions.parquet",
        "page": d / "page.html",
        "result": d / "result.json",
        "calibration": d / "cal.json",
        "cascade": d / "cascade.json",
        "labels": d / "viewer-labels.jsonl",
    }
    assert main(["score", str(example_path("role")), "-o", str(made["scores"]), "--method", "kl", "--no-progress"]) == 0
    assert main(["evaluate", str(out), "--labels", str(labels), "--html", str(made["page"]), "--bootstrap", "0"]) == 0
    assert main(["evaluate", str(out), "--labels", str(labels), "-o", str(made["result"]), "--bootstrap", "0"]) == 0
    assert main(["calibrate", str(out), "--labels", str(labels), "-o", str(made["calibration"]),
                 "--bootstrap", "0"]) == 0  # fmt: skip
    assert main(["cascade", "fit", str(out), "--labels", str(labels), "-o", str(made["cascade"])]) == 0
    made["classifier"] = d / "clf.json"
    assert main(["classifier", "fit", str(LOG), "--labels", str(labels), "-o", str(made["classifier"]),
                 "--no-progress"]) == 0  # fmt: skip
    made["decided"] = d / "decided.parquet"
    assert main(["cascade", "apply", str(out), "--cascade", str(made["cascade"]), "-o", str(made["decided"])]) == 0
    t = pq.read_table(out)
    keys = list(zip(t.column("conversation_id").to_pylist(), t.column("turn_index").to_pylist()))
    LabelSession(str(made["labels"]), keys, t.column("score").to_numpy(), labeller="ann", source=str(out), sample=5)
    writers = {
        "page": [["evaluate", str(out), "--labels", str(labels), "--bootstrap", "0", "--html"],
                 ["estimate", str(out), "--labels", str(labels), "--html"],
                 ["view", str(out), "--export-html"]],
        "result": [["evaluate", str(out), "--labels", str(labels), "--bootstrap", "0", "-o"],
                   ["estimate", str(out), "--labels", str(labels), "-o"]],
        "calibration": [["calibrate", str(out), "--labels", str(labels), "--bootstrap", "0", "-o"]],
        "cascade": [["cascade", "fit", str(out), "--labels", str(labels), "-o"]],
        "scores": [["score", str(example_path("role")), "--method", "kl", "--no-progress", "-o"]],
        "classifier": [["classifier", "fit", str(LOG), "--labels", str(labels), "--no-progress", "-o"]],
        "decided": [["cascade", "apply", str(out), "--cascade", str(made["cascade"]), "-o"]],
        "export": [["export", str(out), "--format", "otel", "-o"]],
        "compare page": [["compare", str(out), str(made["scores"]), "--html"]],
    }  # fmt: skip
    before = {k: p.read_bytes() for k, p in made.items()}
    for kind, argvs in writers.items():
        for argv in argvs:
            for target_kind, target in made.items():
                if (
                    target_kind == kind
                    and argv[0] in ("evaluate", "calibrate", "cascade", "score", "classifier")
                    and not (argv[0] == "evaluate" and kind == "page" and "--html" not in argv)
                ):
                    continue  # its own kind, made by the same command: replaceable
                capsys.readouterr()
                code = main([*argv, str(target)])
                err = capsys.readouterr().err
                assert code == 2, (argv, target_kind, err)
                said = ("would replace", "cannot write", "would overwrite the input", "use one of")
                assert any(x in err for x in said), (argv, target_kind, err)
                if target_kind == "labels":
                    assert "never replaces labels" in err
                assert target.read_bytes() == before[target_kind], (argv, target_kind)
    # a command's own file is its own to replace
    for _ in range(2):
        assert main(["evaluate", str(out), "--labels", str(labels), "--html", str(made["page"]), "--bootstrap",
                     "0"]) == 0  # fmt: skip
    assert main(["score", str(example_path("role")), "-o", str(made["scores"]), "--method", "kl", "--no-progress"]) == 0


@pytest.mark.slow
def test_every_refusal_to_write_comes_before_any_work(tmp_path, capsys, scored):
    """A command whose -o / --html it may not write is refused before it reads anything: given a corrupt input as
    well, it names the output it will not write, not the input it could not read (it used to compute first)."""
    out, labels = scored
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(out.read_bytes()[:100])
    shutil.copy(str(out) + ".meta.json", str(bad) + ".meta.json")
    for argv in (
        ["evaluate", str(bad), "--labels", str(labels), "--html", str(out)],
        ["estimate", str(bad), "--labels", str(labels), "-o", str(labels)],
        ["calibrate", str(bad), "--labels", str(labels), "-o", str(out)],
        ["compare", str(out), str(bad), "--html", str(labels)],
        ["cascade", "fit", str(bad), "--labels", str(labels), "-o", str(out)],
        ["export", str(bad), "--format", "otel", "-o", str(labels)],
        ["view", str(bad), "--export-html", str(out)],
        ["persona", "--reference", str(bad), "--simulation", str(bad), "-o", str(out)],
        ["bench", "labels", "--sizes", "50", "-o", str(out)],
    ):
        capsys.readouterr()
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        refused = ("would replace", "would overwrite the input", "refusing to overwrite")
        assert any(r in err for r in refused) and "cannot read" not in err, (argv, err)


def test_every_command_that_writes_with_o_declares_what_it_writes_once():
    """A command's -o is declared in one place (`Command.writes`): the check before any work and the writer both
    read it. Every step with an --output declares it, but score (the engine checks its outputs before any work) and
    `audit run` (its -o is a directory: each file in it goes through the writer as its own kind)."""
    import argparse

    from adherence.cli.main import COMMANDS, _load, _parser

    def steps(p: argparse.ArgumentParser, name: str = ""):
        subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            yield name, {o for a in p._actions for o in a.option_strings}
        for a in subs:
            for step, sp in a.choices.items():
                yield from steps(sp, step)

    checked = 0
    for command in COMMANDS:
        if command == "score":
            continue
        cmd = _load(command)
        top = _parser(command).selected_parser
        for step, dests in steps(top):
            if "--output" in dests and (command, step) != ("audit", "run"):
                assert cmd.writes_at(step), f"`{command} {step}` has -o but declares no `writes`"
                checked += 1
    assert checked >= 8
