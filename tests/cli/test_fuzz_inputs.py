"""No "internal error" for bad input, in any command: each input kind a command reads (a score output, a labels
file, a cascade or calibration file) corrupted each way (cut short, empty, wrong types, NaN, infinite, huge
values, no rows). Input that cannot be read exits 2 with one line naming the file; input that can (a NaN score is
"no score") exits 0 -- never 1, never a traceback."""

import json
import shutil
import time
import warnings

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from adherence.cli.main import main
from adherence.data import example_path

LOG = example_path("role").parent / "support_log.jsonl"
TRUTH = example_path("role").parent / "support_log.truth.jsonl"


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    d = tmp_path_factory.mktemp("fuzz")
    out = d / "scope.parquet"
    assert main(["score", str(LOG), "-o", str(out), "--method", "scope", "--threshold", "0.3", "--no-progress"]) == 0
    labels = d / "labels.jsonl"
    rows = [json.loads(x) for x in TRUTH.read_text().splitlines()]
    labels.write_text("".join(json.dumps(r) + "\n" for r in rows[::2]))
    cascade = d / "cascade.json"
    assert main(["cascade", "fit", str(out), "--labels", str(labels), "-o", str(cascade)]) == 0
    cal = d / "cal.json"
    assert main(["calibrate", str(out), "--labels", str(labels), "-o", str(cal)]) == 0
    clf = d / "clf.json"
    assert main(["classifier", "fit", str(LOG), "--labels", str(labels), "-o", str(clf), "--no-progress"]) == 0
    return {"out": out, "labels": labels, "cascade": cascade, "cal": cal, "clf": clf}


def _output_variant(src, dst, kind):
    """A copy of score output ``src`` at ``dst`` (its run metadata beside it, so it is taken as ours), corrupted."""
    shutil.copy(str(src) + ".meta.json", str(dst) + ".meta.json")
    data = src.read_bytes()
    if kind == "cut short":
        dst.write_bytes(data[: len(data) // 2])
        return
    if kind == "empty file":
        dst.write_bytes(b"")
        return
    t = pq.read_table(src)
    n = t.num_rows
    i = t.schema.get_field_index("score")
    if kind == "score as words":
        t = t.set_column(i, "score", pa.array(["high" if (v or 0) > 0.3 else "low" for v in t["score"].to_pylist()]))
    elif kind == "turn_index as text":
        j = t.schema.get_field_index("turn_index")
        t = t.set_column(j, "turn_index", pa.array([f"t{v}" for v in t["turn_index"].to_pylist()]))
    elif kind == "no score column":
        t = t.drop_columns(["score"])
    elif kind in ("NaN scores", "infinite scores", "huge scores"):
        v = {"NaN scores": np.nan, "infinite scores": np.inf, "huge scores": 1e308}[kind]
        s = np.array(t["score"].to_numpy(zero_copy_only=False), dtype=float)
        s[::3] = v
        t = t.set_column(i, "score", pa.array(s))
    elif kind == "no rows":
        t = t.slice(0, 0)
    elif kind == "conversation_id as list":
        j = t.schema.get_field_index("conversation_id")
        t = t.set_column(j, "conversation_id", pa.array([[v] for v in t["conversation_id"].to_pylist()]))
    elif kind == "float ids":
        j = t.schema.get_field_index("conversation_id")
        t = t.set_column(j, "conversation_id", pa.array([float(k) for k in range(n)]))
    elif kind in ("negative turn_index", "huge turn_index"):
        j = t.schema.get_field_index("turn_index")
        ti = t["turn_index"].to_pylist()
        ti[4] = -1 if kind.startswith("negative") else 2**40
        t = t.set_column(j, "turn_index", pa.array(ti, pa.int64()))
    elif kind == "label as list":
        t = t.drop_columns([c for c in ("label",) if c in t.column_names])
        t = t.append_column("label", pa.array([["adherent"]] * n))
    elif kind == "prediction as text":
        j = t.schema.get_field_index("prediction")
        t = t.set_column(j, "prediction", pa.array(["yes" if v else "no" for v in t["prediction"].to_pylist()]))
    elif kind == "prediction 2":
        j = t.schema.get_field_index("prediction")
        p = t["prediction"].to_pylist()
        p[7] = 2
        t = t.set_column(j, "prediction", pa.array(p, pa.int8()))
    else:
        raise AssertionError(kind)
    assert n > 0
    pq.write_table(t, dst)


def _text_variant(src, dst, kind):
    """A copy of a JSON / JSONL file corrupted."""
    text = src.read_text()
    if kind == "cut short":
        dst.write_text(text[: len(text) // 2])
    elif kind == "empty file":
        dst.write_text("")
    elif kind == "wrong types":
        if src.suffix == ".jsonl":
            rows = [json.loads(x) for x in text.splitlines()]
            rows[3]["turn_index"] = "third"
            rows[5]["label"] = 5
            dst.write_text("".join(json.dumps(r) + "\n" for r in rows))
        else:
            d = json.loads(text)
            dst.write_text(json.dumps({k: ([1, "x"] if isinstance(v, (dict, list)) else "x") for k, v in d.items()}))
    elif kind == "NaN":
        if src.suffix == ".jsonl":
            rows = [json.loads(x) for x in text.splitlines()]
            rows[2]["turn_index"] = float("nan")
            dst.write_text("".join(json.dumps(r) + "\n" for r in rows))
        else:
            dst.write_text(text.replace("0.", "NaN", 3))
    elif kind == "huge":
        if src.suffix == ".jsonl":
            rows = [json.loads(x) for x in text.splitlines()]
            rows[2]["turn_index"] = 10**30
            dst.write_text("".join(json.dumps(r) + "\n" for r in rows))
        else:
            dst.write_text(text.replace("0.", "1e308", 3))
    else:
        raise AssertionError(kind)


COMMANDS = {
    "evaluate": ["evaluate", "{out}", "--labels", "{labels}"],
    "estimate": ["estimate", "{out}", "--labels", "{labels}"],
    "calibrate": ["calibrate", "{out}", "--labels", "{labels}", "-o", "{tmp}/c.json"],
    "compare": ["compare", "{good}", "{out}"],
    "cascade fit": ["cascade", "fit", "{out}", "--labels", "{labels}", "-o", "{tmp}/k.json"],
    "cascade apply": ["cascade", "apply", "--cascade", "{cascade}", "{out}", "-o", "{tmp}/a.parquet"],
    "view": ["view", "{out}", "--export-html", "{tmp}/v.html"],
    "classifier fit": ["classifier", "fit", str(LOG), "--labels", "{labels}", "-o", "{tmp}/clf.json", "--no-progress"],
    "export": ["export", "{out}", "--format", "otel", "-o", "{tmp}/e.jsonl"],
}
# the key and decision columns of the wrong type or range (the one reader names them: these were "internal error")
BAD_KEYS = ["conversation_id as list", "float ids", "negative turn_index", "huge turn_index", "label as list",
            "prediction as text", "prediction 2"]  # fmt: skip
OUTPUT_KINDS = ["cut short", "empty file", "score as words", "turn_index as text", "no score column",
                "NaN scores", "infinite scores", "huge scores", "no rows", *BAD_KEYS]  # fmt: skip
MUST_FAIL = {"cut short", "empty file", "score as words", "turn_index as text", "wrong types", *BAD_KEYS}
VALUE_KINDS = {"negative turn_index", "huge turn_index", "prediction 2"}
TEXT_KINDS = ["cut short", "empty file", "wrong types", "NaN", "huge"]


def _run(capsys, argv, bad):
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own exit
        code = exc.code
    err = capsys.readouterr().err.strip().splitlines()
    assert code in (0, 2), (argv, code, err)
    assert not any("internal error" in ln or "Traceback" in ln for ln in err), (argv, err)
    if code == 2:  # one error line, the last, naming the file (notes such as a labels join may come before it)
        assert str(bad) in err[-1] and sum("error" in ln for ln in err) == 1, (argv, err)
    return code, err


@pytest.mark.parametrize("command", [c for c in COMMANDS if c != "classifier fit"])
@pytest.mark.slow
def test_a_corrupted_score_output_is_exit_2_naming_it_or_read_as_it_is(tmp_path, capsys, base, command):
    for kind in OUTPUT_KINDS:
        bad = tmp_path / f"{kind.replace(' ', '-')}.parquet"
        _output_variant(base["out"], bad, kind)
        fields = dict(base, out=bad, good=base["out"], tmp=tmp_path)
        code, _ = _run(capsys, [a.format(**fields) for a in COMMANDS[command]], bad)
        # the viewer queries an output where it lies: it checks the columns' types, not each value
        if kind in MUST_FAIL and not (command == "view" and kind in VALUE_KINDS):
            assert code == 2, (command, kind)


@pytest.mark.parametrize("command", ["evaluate", "estimate", "calibrate", "cascade fit", "classifier fit"])
@pytest.mark.slow
def test_a_corrupted_labels_file_is_exit_2_naming_it_or_read_as_it_is(tmp_path, capsys, base, command):
    for kind in TEXT_KINDS:
        bad = tmp_path / f"{kind.replace(' ', '-')}.jsonl"
        _text_variant(base["labels"], bad, kind)
        fields = dict(base, labels=bad, tmp=tmp_path)
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            code, err = _run(capsys, [a.format(**fields) for a in COMMANDS[command]], bad)
        if kind == "cut short":  # the last line a killed writer left half written: left out, and said
            assert code == 0 and any(f"{bad}: line" in str(w.message) and "cut short" in str(w.message)
                                     for w in said), (command, [str(w.message) for w in said])  # fmt: skip
        elif kind == "huge":  # a key no turn has: the label is counted and named, never dropped in silence
            assert code == 0 and any("1 label(s) match no turn" in ln and str(10**30) in ln for ln in err), err
        elif kind in MUST_FAIL | {"NaN"}:
            assert code == 2, (command, kind)


@pytest.mark.slow
@pytest.mark.parametrize("what", ["cascade", "cal", "clf"])
def test_a_corrupted_cascade_calibration_or_classifier_file_is_exit_2_naming_it(tmp_path, capsys, base, what):
    for kind in TEXT_KINDS:
        bad = tmp_path / f"{kind.replace(' ', '-')}.json"
        _text_variant(base[what], bad, kind)
        if bad.read_text() == base[what].read_text():
            continue  # nothing to corrupt that way
        if what == "cascade":
            argv = ["cascade", "apply", "--cascade", str(bad), str(base["out"]), "-o", str(tmp_path / "a.parquet")]
        elif what == "cal":
            argv = ["score", str(LOG), "-o", str(tmp_path / "s.parquet"), "--method", "scope", "--calibration",
                    str(bad), "--no-progress"]  # fmt: skip
        else:
            argv = ["score", str(LOG), "-o", str(tmp_path / "s.parquet"), "--method", "classifier", "--classifier",
                    str(bad), "--no-progress"]  # fmt: skip
        assert _run(capsys, argv, bad)[0] == 2, (what, kind)


EXAMPLES = example_path("role").parent


def _variant(src, dst, kind):
    text = src.read_text(encoding="utf-8")
    if kind == "cut short":
        dst.write_text(text[: len(text) // 2], encoding="utf-8")
    elif kind == "empty file":
        dst.write_text("", encoding="utf-8")
    elif kind == "wrong types":
        if src.suffix == ".csv":  # the columns the reader needs are not there
            dst.write_text("a,b\n1,2\n", encoding="utf-8")
        elif src.suffix == ".jsonl":
            rows = [json.loads(x) for x in text.splitlines()]
            rows[1]["output"] = {"not": "text"}
            rows[2]["artifact_id"] = None
            dst.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        else:  # YAML: questions as a mapping of numbers
            dst.write_text("questions:\n  a: 1\n  b: 2\n", encoding="utf-8")


@pytest.mark.parametrize(
    "which, argv",
    [
        ("reference", ["persona", "--reference", "{bad}", "--simulation", str(EXAMPLES / "persona" / "sim_faithful.csv"),
                       "--dimensions", "naturalness", "--repeats", "2", "--no-progress"]),
        ("simulation", ["persona", "--reference", str(EXAMPLES / "persona" / "human.csv"), "--simulation", "{bad}",
                        "--dimensions", "naturalness", "--repeats", "2", "--no-progress"]),
        ("artifacts", ["audit", "run", "--rubric", str(EXAMPLES / "audit" / "rubric.yaml"), "--artifacts", "{bad}",
                       "-o", "{tmp}/run", "--runs", "1", "--no-progress"]),
        ("rubric", ["audit", "run", "--rubric", "{bad}", "--artifacts", str(EXAMPLES / "audit" / "artifacts.jsonl"),
                    "-o", "{tmp}/run", "--runs", "1", "--no-progress"]),
    ],
)  # fmt: skip
def test_persona_and_audit_inputs_corrupted_are_exit_2_naming_them(tmp_path, capsys, which, argv):
    src = {"reference": EXAMPLES / "persona" / "human.csv", "simulation": EXAMPLES / "persona" / "sim_faithful.csv",
           "artifacts": EXAMPLES / "audit" / "artifacts.jsonl", "rubric": EXAMPLES / "audit" / "rubric.yaml"}[which]  # fmt: skip
    # cut short, an audit input is a smaller valid one: the judge would run on it (a run of its own, not a fuzz case)
    for kind in ("empty file", "wrong types") + (("cut short",) if which in ("reference", "simulation") else ()):
        bad = tmp_path / f"{kind.replace(' ', '-')}{src.suffix}"
        _variant(src, bad, kind)
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            code, _ = _run(capsys, [a.format(bad=bad, tmp=tmp_path) for a in argv], bad)
        if kind != "cut short":  # a CSV or JSONL cut at a row's end can still be a smaller corpus
            assert code == 2, (which, kind)
            assert time.perf_counter() - start < 15, (which, kind)  # said before any model loads
