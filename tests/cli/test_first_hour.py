"""A newcomer's first hour: reference methods on chat logs, references from transcripts or a keyed file,
`evaluate` on a score output without flags."""

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from sklearn import metrics as skm

from adherence.cli.main import main
from adherence.data import DataError, example_path, read_ground_truth

ROLE = "You are the cooking assistant of a recipe site. Only talk about cooking and recipes."
CHATS = [
    {
        "id": "a",
        "messages": [
            {"role": "system", "content": ROLE},
            {"role": "user", "content": "How do I boil an egg?"},
            {
                "role": "assistant",
                "content": "Put the egg in boiling water for 9 minutes, then cool it in cold water.",
                "label": "adherent",
            },
            {"role": "user", "content": "Who won the football match?"},
            {"role": "assistant", "content": "The home team won 3-1 after extra time.", "label": "scope_violation"},
        ],
    },
    {
        "id": "b",
        "messages": [
            {"role": "system", "content": ROLE},
            {"role": "user", "content": "Best pasta sauce?"},
            {
                "role": "assistant",
                "content": "A simple tomato sauce with fresh basil is hard to beat.",
                "label": "adherent",
            },
        ],
    },
]
REFERENCES = {
    ("a", 0): "Boil the egg for 9 minutes and cool it in iced water.",
    ("a", 1): "I can only help with cooking and recipes.",
    ("b", 0): "Try a tomato sauce with fresh basil and garlic.",
}


def _chats(path, with_references=False):
    lines = []
    for rec in CHATS:
        rec = json.loads(json.dumps(rec))
        if with_references:
            k = 0
            for m in rec["messages"]:
                if m["role"] == "assistant":
                    m["reference"] = REFERENCES[(rec["id"], k)]
                    k += 1
        lines.append(json.dumps(rec))
    path.write_text("\n".join(lines) + "\n")
    return path


def _ground_truth_csv(path, extra=""):
    rows = ["conversation_id,turn_index,ground_truth_assistant"]
    rows += [f'{c},{i},"{t}"' for (c, i), t in REFERENCES.items()]
    path.write_text("\n".join(rows) + "\n" + extra)
    return path


@pytest.mark.parametrize("method", ["cosine", "knn", "bertscore", "kl", "mahalanobis"])
def test_reference_method_on_a_chat_log_without_references_fails_before_any_model_loads(
    tmp_path, capsys, monkeypatch, method
):
    import adherence.models

    def no_load(*a, **k):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(adherence.models, "Encoder", no_load)
    chats = _chats(tmp_path / "chats.jsonl")
    out = tmp_path / "c.parquet"
    code = main(["score", str(chats), "-o", str(out), "--method", method, "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert str(chats) in err and "ground_truth_assistant" in err and "--ground-truth" in err and "llm_judge" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chats.jsonl"]  # no output, no work dir left


@pytest.mark.slow
def test_references_on_assistant_messages_and_from_a_keyed_file_give_the_same_scores(tmp_path, capsys):
    inline = tmp_path / "inline.parquet"
    assert (
        main(
            [
                "score",
                str(_chats(tmp_path / "chats_refs.jsonl", True)),
                "-o",
                str(inline),
                "--method",
                "cosine",
                "--no-progress",
                "--bootstrap",
                "0",
            ]
        )
        == 0
    )
    keyed = tmp_path / "keyed.parquet"
    gt = _ground_truth_csv(tmp_path / "refs.csv", 'b,7,"no such turn"\n')
    with pytest.warns(UserWarning, match="1 reference row"):
        assert (
            main(
                [
                    "score",
                    str(_chats(tmp_path / "chats.jsonl")),
                    "-o",
                    str(keyed),
                    "--method",
                    "cosine",
                    "--ground-truth",
                    str(gt),
                    "--no-progress",
                    "--bootstrap",
                    "0",
                ]
            )
            == 0
        )
    a, b = pq.read_table(inline).to_pylist(), pq.read_table(keyed).to_pylist()
    assert [r["status"] for r in b] == ["ok"] * 3
    assert [(r["conversation_id"], r["turn_index"]) for r in b] == list(REFERENCES)
    np.testing.assert_allclose([r["score"] for r in a], [r["score"] for r in b], rtol=1e-6)
    # the encoder's own cosine of turn and reference
    from adherence.models import Encoder

    enc = Encoder(None, progress=False)
    turns = [m["content"] for rec in CHATS for m in rec["messages"] if m["role"] == "assistant"]
    x = enc.encode(turns).float().numpy()
    y = enc.encode(list(REFERENCES.values())).float().numpy()
    cos = (x * y).sum(1) / np.linalg.norm(x, axis=1) / np.linalg.norm(y, axis=1)
    np.testing.assert_allclose([r["score"] for r in b], np.clip(cos, 0, 1), atol=1e-5)
    meta = json.loads((tmp_path / "keyed.parquet.meta.json").read_text())
    gt_inputs = [i for i in meta["inputs"] if i.get("role") == "ground_truth"]
    assert gt_inputs and gt_inputs[0]["path"] == str(gt.resolve()) and gt_inputs[0]["digest"].startswith("sha256:")


def test_a_changed_ground_truth_file_is_planned_again_on_resume(tmp_path):
    chats = _chats(tmp_path / "chats.jsonl")
    gt = _ground_truth_csv(tmp_path / "refs.csv")
    out = tmp_path / "o.parquet"
    args = [
        "score",
        str(chats),
        "-o",
        str(out),
        "--method",
        "cosine",
        "--ground-truth",
        str(gt),
        "--no-progress",
        "--bootstrap",
        "0",
        "--keep-work-dir",
        "--work-dir",
        str(tmp_path / "w"),
    ]
    assert main(args) == 0
    first = pq.read_table(out).column("score").to_pylist()
    out.unlink(), (tmp_path / "o.sessions.parquet").unlink()
    for p in tmp_path.glob("o*.meta.json"):
        p.unlink()
    gt.write_text(gt.read_text().replace("I can only help with cooking and recipes.", "The home team won 3-1."))
    assert main(args + ["--resume"]) == 0
    second = pq.read_table(out).column("score").to_pylist()
    assert second[0] == pytest.approx(first[0]) and second[1] > first[1] + 0.3


def test_bad_ground_truth_files_are_one_line_errors(tmp_path, capsys):
    chats = _chats(tmp_path / "chats.jsonl")
    dup = _ground_truth_csv(tmp_path / "dup.csv", 'a,0,"again"\n')
    with pytest.raises(DataError, match=r"dup.csv: row 4, column 'turn_index': duplicate key"):
        read_ground_truth(dup)
    nokey = tmp_path / "nokey.csv"
    nokey.write_text("conversation_id,ground_truth_assistant\na,hi\n")
    notext = tmp_path / "notext.csv"
    notext.write_text("conversation_id,turn_index\na,0\n")
    for bad, needle in (
        (dup, "duplicate key"),
        (nokey, "turn_index"),
        (notext, "ground_truth_assistant"),
        (tmp_path / "missing.csv", "missing.csv"),
    ):
        code = main(
            [
                "score",
                str(chats),
                "-o",
                str(tmp_path / "o.parquet"),
                "--method",
                "cosine",
                "--ground-truth",
                str(bad),
                "--no-progress",
            ]
        )
        err = capsys.readouterr().err
        assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "o.parquet").exists()


def test_evaluate_reads_its_columns_from_a_score_output(tmp_path, capsys):
    out = tmp_path / "r.parquet"
    assert (
        main(
            ["score", str(example_path("role")), "-o", str(out), "--method", "kl", "--no-progress", "--bootstrap", "0"]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["evaluate", str(out), "--json", "--bootstrap", "0"]) == 0
    captured = capsys.readouterr()
    res = json.loads(captured.out)
    assert "positive='adherent'" in captured.err and "prediction='prediction'" in captured.err
    t = pq.read_table(out)
    y = np.array([v == "adherent" for v in t.column("label").to_pylist()])
    s = np.array(t.column("score").to_pylist(), dtype=float)
    p = np.array(t.column("prediction").to_pylist())
    assert (res["score_column"], res["label_column"], res["positive"]) == ("score", "label", "adherent")
    assert res["auc"] == pytest.approx(skm.roc_auc_score(y, s))
    assert res["macro_f1"] == pytest.approx(skm.f1_score(y, p, average="macro"))
    # the explicit flags give the same numbers
    assert (
        main(
            [
                "evaluate",
                str(out),
                "--json",
                "--bootstrap",
                "0",
                "--score",
                "score",
                "--label",
                "label",
                "--positive",
                "adherent",
                "--prediction",
                "prediction",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["auc"] == res["auc"]


def test_evaluate_refuses_what_it_cannot_tell(tmp_path, capsys):
    out = tmp_path / "r.parquet"
    assert (
        main(
            ["score", str(example_path("role")), "-o", str(out), "--method", "kl", "--no-progress", "--bootstrap", "0"]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["evaluate", str(out), "--positive", "yes"]) == 2  # no positive row is an error, not exit 0
    err = capsys.readouterr().err
    assert "--positive 'yes' is no label here" in err and "adherent" in err and len(err.strip().splitlines()) == 1
    # a label that is the adherent class misspelt would count as a violation in silence: refused, its row named
    typo = tmp_path / "typo.csv"
    typo.write_text("score,label\n0.1,violation\n0.9,adherent\n0.8,adherant\n0.7,Adherent\n")
    for argv in (["evaluate", str(typo), "--positive", "adherent"], ["estimate", str(typo), "--positive", "adherent"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "looks like the adherent class 'adherent' misspelt" in err and "row 4" in err, err
    # a value that is neither the adherent class nor a violation word is refused, unless --label-map says what it is
    own = tmp_path / "own.csv"
    own.write_text("score,label\n0.1,violation\n0.9,adherent\n0.8,maybe\n0.2,tone_violation\n0.7,adherent\n")
    assert main(["estimate", str(own)]) == 2
    err = capsys.readouterr().err
    assert "label 'maybe' on 1 row(s) (first: 3) is neither the adherent class" in err and "--label-map" in err
    assert main(["evaluate", str(own), "--label-map", "maybe=violation", "--json", "--bootstrap", "0"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert (r["n_positive"], r["n_negative"]) == (2, 3)
    assert main(["evaluate", str(own), "--label-map", "maybe"]) == 2
    assert "FROM=TO" in capsys.readouterr().err
    two = tmp_path / "two.csv"
    two.write_text("score,label\n0.1,scope\n0.9,tone\n")
    assert main(["evaluate", str(two)]) == 2
    err = capsys.readouterr().err
    assert "give --positive" in err and "scope, tone" in err
    nolabel = tmp_path / "nolabel.csv"
    nolabel.write_text("score,verdict\n0.1,yes\n")
    assert main(["evaluate", str(nolabel)]) == 2
    assert "give --label" in capsys.readouterr().err


def test_bundled_examples_by_file_name():
    assert example_path("role_turns.jsonl") == example_path("role")
    assert example_path("audit/rubric.yaml").is_file()
    with pytest.raises(ValueError, match="role_turns.jsonl"):
        example_path("../../setup.py")


def test_a_warning_during_a_progress_bar_gets_a_line_of_its_own(monkeypatch):
    import io
    import warnings

    from tqdm import tqdm

    from adherence.cli.main import format_warning

    monkeypatch.setattr(warnings, "formatwarning", format_warning)
    buf = io.StringIO()
    with tqdm(total=3, desc="scoring", file=buf) as bar:
        bar.update(1)
        # what warnings.showwarning writes (pytest records warnings instead of showing them)
        buf.write(warnings.formatwarning(UserWarning("the judge is a smoke test"), UserWarning, "x.py", 1))
    text = buf.getvalue()
    i = text.index("warning: the judge is a smoke test")
    assert text[i - 1] in "\r\n"  # the bar line cleared first, not glued to its "1/3 [..]"
    assert text[i:].split("\n")[0] == "warning: the judge is a smoke test"


def test_every_help_imports_no_heavy_module():
    """`adherence [COMMAND] --help` answers without torch, transformers, pyarrow.compute's heavy users, ..."""
    import subprocess
    import sys

    code = (
        "import sys\nfrom adherence.cli.main import main\n"
        "for argv in ([], ['score'], ['evaluate'], ['persona'], ['audit'], ['audit', 'run'], ['bench'],"
        " ['bench', 'encoder'], ['models']):\n"
        "    try:\n        main(argv + ['--help'])\n    except SystemExit:\n        pass\n"
        "heavy = [m for m in ('torch', 'transformers', 'vllm', 'ray', 'pyspark', 'faiss', 'triton', 'matplotlib',"
        " 'sklearn', 'scipy') if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip().splitlines()[-1] == "HEAVY []"
