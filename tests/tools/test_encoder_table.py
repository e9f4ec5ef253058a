"""docs/encoders.md's tables are the newest committed cpu-encoder JSON, figure for figure."""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import encoder_table  # noqa: E402


def test_the_encoder_page_is_rendered_from_the_newest_committed_json():
    page = (ROOT / "docs" / "encoders.md").read_text(encoding="utf-8")
    assert encoder_table.page_table(page) == encoder_table.render()
    million = encoder_table.page_table(page, encoder_table.M_START, encoder_table.M_END)
    assert million == encoder_table.render_million()
    assert encoder_table.main(["--check"]) == 0


def test_the_json_it_reads_was_checked_against_the_peers():
    name, res = encoder_table.newest()
    assert res["correct"] is True and res["baselines"], name
    names = {b["name"] for b in res["baselines"]}
    assert {"sentence-transformers torch", "sentence-transformers openvino", "fastembed"} <= names
    assert {f"sentence-transformers onnx O{k}" for k in range(1, 5)} <= names
    for b in res["baselines"]:
        assert {"name", "version", "backend"} <= set(b) and ("error" in b or b["texts_per_s"] > 0)
    short = res["workloads"]["short"]
    ours = {r["name"]: r for r in short["ours"]}
    st = next(b for b in res["baselines"] if b["name"] == "sentence-transformers torch")
    assert ours["adherence float32"]["min_cosine"] >= 0.9999 and st["min_cosine"] >= 0.9999
    assert short["fast_path"]["speedup"] == ours["adherence int8"]["texts_per_s"] / st["per_batch"]["32"]
    assert json.loads(json.dumps(res)) == res  # plain JSON, nothing a reader would trip on


def test_the_million_turn_run_was_checked_and_every_row_came_back():
    name, res = encoder_table.newest_million()
    assert res["correct"] is True and res["correctness"]["int8_job_vs_int8_embeddings_max_abs_diff"] < 1e-4
    assert res["int8"]["rows"] == res["int8"]["ok"] == res["int8"]["turns"] == res["workload"]["turns"]
    assert res["workload"]["unique_text_share"] > 0.9  # mostly unique texts: the encoder's cache cannot help
    assert 0 <= res["profile"]["not_encoder_share"] < 1
    assert (encoder_table.RESULTS / res["profile"]["file"]).exists()
