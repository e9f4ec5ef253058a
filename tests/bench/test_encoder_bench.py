import json

import pytest
import torch

from adherence.bench.encoder import persona_chat_utterances
from adherence.cli.main import main
from tests.conftest import SHARED

SPC = SHARED / "data" / "persona" / "Synthetic-Persona-Chat_valid.csv"


@pytest.mark.slow
def test_encoder_bench_checks_against_sentence_transformers_then_times(tmp_path, capsys):
    out = tmp_path / "enc.json"
    assert main(["bench", "encoder", "--texts", "40", "--repeats", "1", "-o", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res == json.loads(capsys.readouterr().out)
    assert res["bench"] == "encoder" and res["correct"] and res["args"]["texts"] == 40
    assert res["correctness"]["min_cosine"] > 1 - 1e-5 and res["correctness"]["max_abs_difference"] < 1e-5
    ours = res["backends"]["adherence"]
    st = res["backends"]["sentence_transformers (float32, batch 32)"]
    assert ours["texts_per_s"] == pytest.approx(40 / ours["median_s"])
    st_rows = {k: v["median_s"] for k, v in res["backends"].items() if k.startswith("sentence_transformers")}
    assert len(st_rows) == 4 and st["median_s"] == st_rows["sentence_transformers (float32, batch 32)"]
    assert res["baseline"] == min(st_rows, key=st_rows.get)  # the fastest batch size is the named baseline
    assert res["speedup"] == pytest.approx(st_rows[res["baseline"]] / ours["median_s"])
    assert res["correctness"]["criterion"].startswith("1 - min_cosine")
    assert main(["bench", "encoder", "--texts", "0"]) == 2


@pytest.mark.skipif(not SPC.exists(), reason="the shared Synthetic-Persona-Chat file is not beside the checkout")
def test_persona_chat_utterances_are_distinct_and_unprefixed():
    texts = persona_chat_utterances(SPC, limit=500)
    assert len(texts) == 500 == len(set(texts))
    assert not any(t.startswith("User ") and t[5:6].isdigit() for t in texts)
    assert texts[:2] == ["Hi!", "Hello!"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_encoder_bench_on_gpu_matches_and_beats_sentence_transformers():
    from adherence.bench import bench_encoder

    res = bench_encoder(texts=5000, repeats=2)
    # the goal: >= 3x sentence-transformers at its fastest batch size, embeddings within 1e-3 cosine
    assert res["correct"] and res["speedup"] >= 3 and res["correctness"]["min_cosine"] >= 1 - 1e-3
