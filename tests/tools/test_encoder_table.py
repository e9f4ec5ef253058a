"""docs/encoders.md's tables are the newest committed cpu-encoder JSON of each kind of CPU, figure for figure."""

import html
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
import encoder_table  # noqa: E402

from adherence.models._onnx import BF16_BATCH_TOLERANCE  # noqa: E402


def test_the_encoder_page_is_rendered_from_the_newest_committed_json():
    page = (ROOT / "docs" / "encoders.md").read_text(encoding="utf-8")
    assert encoder_table.page_table(page) == encoder_table.render()
    million = encoder_table.page_table(page, encoder_table.M_START, encoder_table.M_END)
    assert million == encoder_table.render_million()
    assert encoder_table.main(["--check"]) == 0


def test_each_cpus_json_it_reads_was_checked_against_the_peers():
    shown = encoder_table.per_cpu()
    assert encoder_table.newest() == shown[0]
    for name, res in shown:
        _check_against_peers(name, res)


def test_each_kind_of_cpu_gets_its_own_section_from_its_newest_json(tmp_path, monkeypatch):
    newest = encoder_table.newest()[1]
    monkeypatch.setattr(encoder_table, "RESULTS", tmp_path)
    for name, model in [("2026-01-01-cpu-amx-encoder.json", "old"), ("2026-01-02-cpu-amx-encoder.json", "new"),
                        ("2026-01-03-cpu-avx2-encoder.json", "plain")]:  # fmt: skip
        (tmp_path / name).write_text(json.dumps(dict(newest, cpu=dict(newest["cpu"], model=model))))
    (tmp_path / "2026-01-04-cpu-amx-platforms-encoder.json").write_text(json.dumps(newest))  # another measurement
    assert [n for n, _ in encoder_table.per_cpu()] == [
        "2026-01-03-cpu-avx2-encoder.json",
        "2026-01-02-cpu-amx-encoder.json",
    ]
    page = encoder_table.render()
    assert page.index("### plain (") < page.index("### new (") and "### old" not in page


def _check_against_peers(name, res):
    assert res["correct"] is True and res["baselines"], name
    names = {b["name"] for b in res["baselines"]}
    assert {"sentence-transformers torch", "sentence-transformers openvino", "fastembed"} <= names
    assert {f"sentence-transformers onnx O{k}" for k in range(1, 5)} <= names
    for b in res["baselines"]:
        assert {"name", "version", "backend"} <= set(b) and ("error" in b or b["texts_per_s"] > 0)
    short = res["workloads"]["short"]
    ours = {r["name"]: r for r in short["ours"] if "ablation" not in r["backend"]}  # the paths a user runs
    st = next(b for b in res["baselines"] if b["name"] == "sentence-transformers torch")
    assert ours["adherence float32"]["min_cosine"] >= 0.9999 and st["min_cosine"] >= 0.9999
    fastest = max(ours.values(), key=lambda r: r["texts_per_s"])
    assert short["fast_path"]["name"] == fastest["name"]
    assert short["fast_path"]["speedup"] == fastest["texts_per_s"] / st["per_batch"]["32"]
    exact = [r for r in ours.values() if r["min_cosine"] >= 0.9999]
    assert short["exact_path"] == max(exact, key=lambda r: r["texts_per_s"])["name"]
    assert json.loads(json.dumps(res)) == res  # plain JSON, nothing a reader would trip on


def test_the_million_turn_run_was_checked_and_every_row_came_back():
    name, res = encoder_table.newest_million()
    assert res["correct"] is True
    bound = {"int8": 1e-4, "bf16": BF16_BATCH_TOLERANCE}  # bf16: a text moves ~1e-3 with its batch
    assert set(res["correctness"]) <= set(bound) and res["correctness"]
    for p, c in res["correctness"].items():
        assert c["job_vs_embeddings_max_abs_diff"] < bound[p]
        assert res[p]["rows"] == res[p]["ok"] == res[p]["turns"] == res["workload"]["turns"]
    assert res["workload"]["unique_text_share"] > 0.9  # mostly unique texts: the encoder's cache cannot help
    assert 0 <= res["profile"]["not_encoder_share"] < 1
    assert (encoder_table.RESULTS / res["profile"]["file"]).exists()


def test_the_readmes_million_turn_figures_are_the_jsons():
    _, res = encoder_table.newest_million()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    # the CPU named as the JSON's: its matrix units and its make
    cpu = f"{encoder_table._matrix_units(res['cpu'])} {'Xeon' if 'Xeon' in res['cpu']['model'] else 'EPYC'}"
    said = (
        f"a million mostly unique turns in {res['bf16']['hours']:.2f} h on {res['cpu']['logical_cpus']} {cpu} cores "
        f"(int8: {res['int8']['hours']:.2f} h)"
    )
    assert said in readme


def test_the_bound_figure_draws_each_cpus_exact_path_peer_and_goal_from_the_json(tmp_path, monkeypatch, capsys):
    groups = encoder_table.bound_bars()
    assert len(groups) == 2 * len(encoder_table.per_cpu())  # short and long texts on each kind of CPU
    for (name, res), (label, bars) in zip(
        [(n, r) for n, r in encoder_table.per_cpu() for _ in range(2)], groups, strict=True
    ):
        w = res["workloads"]["short" if "short texts" in label else "long"]
        ours = next(r for r in w["ours"] if r["name"] == w["exact_path"])
        assert list(bars.values()) == [
            ours["ratio_to_bound"],
            next(b for b in w["baselines"] if b["name"] == w["fastest_exact_peer"])["ratio_to_bound"],
            w["exact_goal"]["ratio_to_bound"],
        ]
        assert name[:10] in label and res["cpu"]["model"] in label
    # the committed figure holds every bar's figure; one missing fails the page's check
    drawn = encoder_table.FIGURE.read_text(encoding="utf-8")
    labels = [html.escape(label, quote=False) for label in encoder_table.figure_labels()]
    assert all(label in drawn for label in labels)
    drawn_now = encoder_table.figure()  # what --write would draw today holds the same figures, and no date
    assert all(label in drawn_now for label in labels) and "<dc:date>" not in drawn_now
    broken = tmp_path / "encoders-bound.svg"
    broken.write_text(drawn.replace(labels[0], labels[0].split(": ")[0] + ": n/a"), encoding="utf-8")
    monkeypatch.setattr(encoder_table, "FIGURE", broken)
    capsys.readouterr()
    assert encoder_table.main(["--check"]) == 1
    assert capsys.readouterr().out == (  # the tables still match: only the figure is named, with the mend
        "docs/img/encoders-bound.svg's figure differs from benchmarks/results: run tools/encoder_table.py --write\n"
    )
