"""``adherence bench cpu-encoder``: ours against the peers that run in the given environment, checked first."""

import json
import sys

import pytest

from adherence.bench.cpu_encoder import EXACT_GOALS, EXACT_MIN_COSINE, _bound, _verdict, encoder_flops, long_texts
from adherence.cli.main import main
from adherence.models import Encoder
from tests.conftest import SHARED

SPC = SHARED / "data" / "persona" / "Synthetic-Persona-Chat_valid.csv"
pytestmark = pytest.mark.skipif(
    not SPC.exists(), reason="the shared Synthetic-Persona-Chat file is not beside the checkout"
)


def test_long_texts_are_300_to_500_tokens():
    tok = Encoder(device="cpu", progress=False).tokenizer
    texts = long_texts(SPC, tok, 5)
    assert len(texts) == 5 == len(set(texts))
    assert all(300 <= len(tok(t, add_special_tokens=False)["input_ids"]) <= 500 for t in texts)


def test_the_encoders_work_is_what_torchs_flop_counter_counts():
    """``encoder_flops`` against torch's own count of the bundled checkpoint's products (eager attention,
    which runs the scores and their weighted sum as counted batch products), each text alone: unpadded."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import AutoModel

    enc = Encoder(device="cpu", progress=False)
    model = AutoModel.from_pretrained(str(enc.resolved.path), attn_implementation="eager").eval()
    lengths, counted = [7, 50, 129], 0
    for n in lengths:
        with torch.inference_mode(), FlopCounterMode(display=False) as fc:
            model(input_ids=torch.full((1, n), 1000), attention_mask=torch.ones(1, n, dtype=torch.long))
        counts = {str(k): v for k, v in fc.get_flop_counts()["Global"].items()}
        assert set(counts) == {"aten.addmm", "aten.bmm"}
        pooler = 2 * model.config.hidden_size**2  # BertModel's pooler on the first token, not encoding work
        counted += fc.get_total_flops() - pooler
        assert counts["aten.bmm"] == encoder_flops(model.config, [n])["attention"]
    work = encoder_flops(model.config, lengths)
    assert work["linear"] + work["attention"] == counted
    c = model.config
    assert work["softmax"] == sum(n * n for n in lengths) * c.num_attention_heads * c.num_hidden_layers
    # the bound's time: products at the matmul rate, softmax elements at the exp rate
    rates = {"dtype": "bfloat16", "matmul_flops_per_s": 1e12, "exp_per_s": 1e9}
    b = _bound(c, lengths, rates)
    seconds = counted / 1e12 + work["softmax"] / 1e9
    assert b["texts_per_s"] == pytest.approx(len(lengths) / seconds, rel=1e-12) and b["work"] == work


@pytest.mark.slow
def test_bench_times_ours_and_each_peer_that_runs_and_names_those_that_do_not(tmp_path, capsys):
    # the encoder cache the other tests use: exports they made are not made again (the export path's own tests
    # start from an empty cache, tests/models)
    out = tmp_path / "enc.json"
    argv = ["bench", "cpu-encoder", str(SPC), "--peers-python", sys.executable, "--texts", "40", "--long", "3",
            "--batches", "16,32", "--long-batches", "4", "--repeats", "1", "--rounds", "2", "--no-accuracy",
            "-o", str(out)]  # fmt: skip
    assert main(argv) == 0
    res = json.loads(out.read_text())
    assert res == json.loads(capsys.readouterr().out)
    assert res["bench"] == "cpu-encoder" and res["correct"] is True and "correct_note" not in res
    assert res["args"]["rate_repeats"] == 5  # --repeats 1: a smoke run times the CPU's rates 5 times, not 10
    # without sentence-transformers' torch row on a workload (no peers, or that peer failed) it says so
    for lost in ([], [{"name": "sentence-transformers torch", "error": "ImportError"}]):
        verdict = _verdict({**res["workloads"], "long": {**res["workloads"]["long"], "baselines": lost}})
        assert verdict["correct"] is False and "not checked" in verdict["correct_note"]
    short = res["workloads"]["short"]
    assert short["texts"] == 40 and short["unique_share"] == 1.0
    ours = {r["name"]: r for r in short["ours"]}
    assert ours["adherence float32"]["min_cosine"] > 1 - 1e-6  # the reference is ours: float32 against itself
    # the float32 path on the runtime chosen for this CPU, and on torch beside it where that is another
    chosen = Encoder(device="cpu", progress=False).runtime
    assert ours["adherence float32"]["backend"] == f"{chosen} float32"
    assert ("adherence float32, torch" in ours) == (chosen != "torch")
    if chosen != "torch":
        assert ours["adherence float32, torch"]["min_cosine"] > 1 - 1e-6
    assert 0.9 < ours["adherence int8"]["min_cosine"] < 0.99999
    peers = {r["name"]: r for r in res["baselines"]}
    st = peers["sentence-transformers torch"]  # runs in this environment too
    assert st["min_cosine"] >= EXACT_MIN_COSINE and st["batch"] in (16, 32) and st["texts_per_s"] > 0
    assert {"name", "version", "backend", "batch", "texts_per_s"} <= set(st)
    assert "fastembed" in peers  # listed even where it cannot run, with the reason
    exact = [r for r in res["baselines"] if "error" not in r and r["min_cosine"] >= EXACT_MIN_COSINE]
    top = max(exact, key=lambda r: r["texts_per_s"])
    assert short["fastest_exact_peer"] == top["name"]
    # our exact path: the fastest of ours within the bar (bf16 where this CPU has bf16 products), among the
    # paths a user runs (not the ablation row)
    paths = [r for r in ours.values() if "ablation" not in r["backend"]]
    exact_ours = max((r for r in paths if r["min_cosine"] >= EXACT_MIN_COSINE), key=lambda r: r["texts_per_s"])
    assert short["exact_path"] == exact_ours["name"] and "adherence int8" != exact_ours["name"]
    assert ("adherence bf16" in ours) == ("bf16_note" not in res)
    if "adherence bf16" in ours:
        assert EXACT_MIN_COSINE <= ours["adherence bf16"]["min_cosine"] < 0.999999
    assert res["speedup"] == pytest.approx(exact_ours["texts_per_s"] / top["texts_per_s"])
    assert short["float32_speedup"] == pytest.approx(ours["adherence float32"]["texts_per_s"] / top["texts_per_s"])
    default = st["per_batch"]["32"]  # sentence-transformers' default batch size
    assert short["st_torch_default_texts_per_s"] == default
    fastest = max(paths, key=lambda r: r["texts_per_s"])
    assert short["fast_path"]["name"] == fastest["name"]
    assert short["fast_path"]["speedup"] == pytest.approx(fastest["texts_per_s"] / default)
    assert all(r["vs_st_torch_default"] == pytest.approx(r["texts_per_s"] / default) for r in ours.values())
    assert res["workloads"]["long"]["tokens_mean"] > 200
    # the limit of the exact path's arithmetic on this CPU, measured in the same run, and each row against it
    for w in res["workloads"].values():
        bound = w["bound"]
        assert bound["dtype"] == ("bfloat16" if w["exact_path"] == "adherence bf16" else "float32")
        assert bound["matmul_flops_per_s"] > 1e9 and bound["exp_per_s"] > 1e7
        # the fastest library seen running the products (numpy's BLAS beside torch in float32)
        assert bound["matmul_flops_per_s"] == max(bound["matmul_by_library"].values())
        assert any(k.startswith("numpy ") for k in bound["matmul_by_library"]) == (bound["dtype"] == "float32")
        for r in [*w["ours"], *(b for b in w["baselines"] if "error" not in b)]:
            assert r["ratio_to_bound"] == pytest.approx(r["texts_per_s"] / bound["texts_per_s"])
    for wname, w in res["workloads"].items():
        top = next(b for b in w["baselines"] if b["name"] == w["fastest_exact_peer"])
        goal = EXACT_GOALS[wname]
        assert w["exact_goal"]["texts_per_s"] == pytest.approx(goal * top["texts_per_s"])
        assert w["exact_goal"]["ratio_to_bound"] == pytest.approx(goal * top["ratio_to_bound"])
        # the exact path and that peer again, in turn: each round's ratio and their median
        h = w["head_to_head"]
        assert (h["ours"], h["peer"]) == (w["exact_path"], w["fastest_exact_peer"]) and len(h["rounds"]) == 2
        assert all(r["speedup"] == pytest.approx(r["ours"] / r["peer"]) for r in h["rounds"])
        assert h["speedup"] == pytest.approx(sum(r["speedup"] for r in h["rounds"]) / 2)  # the median of two
        # the bf16 path without its static-shape models is measured beside it, never named a path
        names = {r["name"]: r for r in w["ours"]}
        if "adherence bf16" in names:
            assert "ablation" in names["adherence bf16, dynamic shapes only"]["backend"]
        assert "dynamic shapes only" not in w["exact_path"] + w["fast_path"]["name"]
    # the variants run each path at its default batch, not the last one the timing loop tried
    variants = res["variants"]
    assert variants["ours int8"]["batch"] == 16 and variants["ours int8"]["batch_shift"] < 1e-6
    assert variants["onnxruntime dynamic int8"]["batch_shift"] > 1e-3  # one activation scale per batch
    if "adherence bf16" in ours:
        assert variants["ours bf16 (OpenVINO)"]["batch"] == 64


def test_a_peers_environment_that_cannot_start_is_one_error_naming_it(tmp_path):
    from adherence.bench.cpu_encoder import _Peers

    bad = tmp_path / "python"
    bad.write_text("#!/bin/sh\necho 'No module named sentence_transformers' >&2\nexit 3\n")
    bad.chmod(0o755)
    with pytest.raises(RuntimeError, match=r"peers' run failed \(.*python, exit 3\): \['No module named sentence_"):
        _Peers(str(bad), tmp_path)
