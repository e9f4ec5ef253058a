import numpy as np
import pytest
import torch

from adherence.data import example_path, read_persona_corpus
from adherence.persona import classify_nli, naturalness


@pytest.fixture(scope="module")
def tiny_nli(tmp_path_factory):
    """A random-weight BERT NLI classifier (entailment / neutral / contradiction) built from a config."""
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from adherence.models import resolve_model

    path = tmp_path_factory.mktemp("tiny-nli")
    torch.manual_seed(7)
    cfg = BertConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=3,
        id2label={0: "ENTAILMENT", 1: "NEUTRAL", 2: "CONTRADICTION"},
        label2id={"ENTAILMENT": 0, "NEUTRAL": 1, "CONTRADICTION": 2},
    )
    model = BertForSequenceClassification(cfg)
    with torch.no_grad():  # spread the logits so the labels vary from pair to pair
        model.classifier.weight.mul_(40)
    model.save_pretrained(path)
    AutoTokenizer.from_pretrained(str(resolve_model("bundled:all-MiniLM-L6-v2").path)).save_pretrained(path)
    from adherence.role._nli import NliModel

    return NliModel(str(path), device="cpu", batch_size=16)


def _direct_probs(nli, premise, hypothesis):
    batch = nli.tokenizer([premise], [hypothesis], return_tensors="pt", truncation=True, max_length=512)
    with torch.no_grad():
        return torch.softmax(nli.model(**batch).logits, -1)[0].numpy()


def test_classify_nli_threshold():
    labels = ["entailment", "neutral", "contradiction"]
    p = np.array([[0.2, 0.1, 0.7], [0.15, 0.16, 0.69], [0.5, 0.5, 0.0]])
    assert classify_nli(p, labels, 0.7).tolist() == [2, 1, 0]
    with pytest.raises(ValueError, match="entailment and contradiction"):
        classify_nli(p[:, :2], ["yes", "no"])


def test_naturalness_matches_a_direct_computation(tiny_nli):
    corpus = read_persona_corpus(example_path("persona") / "human.csv", limit=3)
    conv = corpus.conversations.to_pylist()
    personas = {(r["conversation_id"], r["speaker"]): r["persona"] for r in corpus.personas.to_pylist()}
    cache = {}

    def label(prem, hyp, thr):
        if (prem, hyp) not in cache:
            cache[(prem, hyp)] = _direct_probs(tiny_nli, prem, hyp)
        e, n, c = cache[(prem, hyp)]
        return "c" if c >= thr else ("e" if e >= n else "n")

    # A threshold between the middle contradiction probabilities of consecutive pairs gives a mix of
    # labels, and no pair sits on the threshold (padding may move probabilities by ~1e-7).
    pc = np.sort(
        [
            _direct_probs(tiny_nli, a["text"], b["text"])[2]
            for a, b in zip(conv, conv[1:])
            if a["conversation_id"] == b["conversation_id"]
        ]
    )
    thr = float((pc[len(pc) // 2] + pc[len(pc) // 2 + 1]) / 2)
    cons, pers, selfs = [], [], []
    for cid in dict.fromkeys(r["conversation_id"] for r in conv):
        turns = [r for r in conv if r["conversation_id"] == cid]
        for t, r in enumerate(turns):
            if t:
                cons.append(label(turns[t - 1]["text"], r["text"], thr))
            pers.append(any(label(p, r["text"], thr) == "c" for p in personas[(cid, r["speaker"])]))
            earlier = [x["text"] for x in turns[:t] if x["speaker"] == r["speaker"]][-5:]
            if earlier:
                selfs.append(any(label(u, r["text"], thr) == "c" for u in earlier))
    cs = np.mean([{"e": 1.0, "n": 0.5, "c": 0.0}[x] for x in cons])
    got = naturalness(corpus, tiny_nli, threshold=thr)
    assert 0 < got["cr"] < 1 and 0 < got["pcr"] < 1
    assert got["cs"] == pytest.approx(cs, abs=1e-9)
    assert got["pcr"] == pytest.approx(np.mean(pers)) and got["scr"] == pytest.approx(np.mean(selfs))
    assert got["er"] + got["nr"] + got["cr"] == pytest.approx(1.0)
    assert got["cr"] == pytest.approx(np.mean([x == "c" for x in cons]))
    assert got["score"] == pytest.approx(0.6 * cs + 0.2 * (1 - np.mean(pers)) + 0.2 * (1 - np.mean(selfs)))
    assert got["n_consecutive"] == len(cons) and got["n_self_utterances"] == len(selfs)
    # K bounds the self-contradiction window: K = 1 sees only the previous utterance of the speaker.
    assert naturalness(corpus, tiny_nli, threshold=thr, k_previous=1)["n_self_utterances"] == len(selfs)


def test_bad_arguments(tiny_nli):
    corpus = read_persona_corpus(example_path("persona") / "human.csv", limit=2)
    with pytest.raises(ValueError, match="k_previous"):
        naturalness(corpus, tiny_nli, k_previous=0)
    with pytest.raises(ValueError, match="threshold"):
        naturalness(corpus, tiny_nli, threshold=0)
