"""vLLM cannot run here: the adapter's request building and output parsing are tested with stand-ins."""

from types import SimpleNamespace

import pytest

from adherence._optional import MissingDependencyError, is_available
from adherence.judges import JudgeConfig, RoleJudge, p_yes_from_logprobs, turn_requests
from adherence.judges._vllm import VLLMBackend


class FakeLLM:
    """Records what the adapter sends; answers in vLLM's RequestOutput shape."""

    def __init__(self, tokenizer):
        self.tokenizer, self.calls, self.raw = tokenizer, [], []

    def get_tokenizer(self):
        return self.tokenizer

    def generate(self, prompts, params, use_tqdm=True):
        assert all(set(p) == {"prompt_token_ids"} for p in prompts)  # token ids: vLLM adds no special token
        self.raw.append(list(prompts))
        self.calls.append(([self.tokenizer.decode(p["prompt_token_ids"]) for p in prompts], params))
        out = []
        for i, _ in enumerate(prompts):
            first = {
                11: SimpleNamespace(logprob=-0.2 - 0.01 * i, rank=1, decoded_token="Yes"),
                12: SimpleNamespace(logprob=-1.9, rank=2, decoded_token=" No"),
                13: SimpleNamespace(logprob=-4.0, rank=3, decoded_token=None),
            }
            out.append(SimpleNamespace(outputs=[SimpleNamespace(text=" YES", logprobs=[first])]))
        return out


@pytest.fixture
def backend(tiny_llama_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_llama_dir))
    return VLLMBackend(
        "my-model", llm=FakeLLM(tok), sampling_params_cls=lambda **kw: kw, max_model_len=1024, progress=False
    )


def _reqs():
    a = turn_requests("conv-b", "Role B", ["q1", "q2"], ["a1", "a2"])
    b = turn_requests("conv-a", "Role A", ["x1"], ["y1"])
    return [a[1], b[0], a[0]]  # deliberately out of order


def test_requests_ordered_for_prefix_caching_and_mapped_back(backend):
    reqs = _reqs()
    out = backend.first_token_logprobs(reqs, top_k=20)
    prompts, params = backend.llm.calls[-1]
    assert params == {"max_tokens": 1, "temperature": 0.0, "logprobs": 20}
    # conv-a first, then conv-b turn 0, then conv-b turn 1: shared prefixes are adjacent
    assert "role a" in prompts[0] and "role b" in prompts[1] and "a2" in prompts[2] and "a2" not in prompts[1]
    assert prompts[0].endswith("[ assistant ]")  # the model's chat template is applied (uncased tokenizer)
    ids = backend.llm.raw[-1][0]["prompt_token_ids"]
    cls = backend.tokenizer.cls_token_id  # this tokenizer's special prefix: there exactly once, SEP never
    assert ids[0] == cls and ids.count(cls) == 1 and backend.tokenizer.sep_token_id not in ids
    # outputs come back in request order: reqs[1] (conv-a) got the first answer (logprob -0.20)
    assert out[1].top_logprobs[0] == ("Yes", pytest.approx(-0.2))
    assert out[0].top_logprobs[0] == ("Yes", pytest.approx(-0.22))
    assert out[0].top_logprobs[-1] == ("13", -4.0)  # undecoded token falls back to its id
    assert p_yes_from_logprobs(out[1].top_logprobs)[0] == pytest.approx(1 / (1 + pytest.importorskip("math").exp(-1.7)))


def test_generate_params_and_truncation(backend):
    out = backend.generate(_reqs(), max_tokens=4, temperature=0.0, seed=3)
    assert backend.llm.calls[-1][1] == {"max_tokens": 4, "temperature": 0.0, "seed": 3}
    assert [o.text for o in out] == [" YES"] * 3
    long = turn_requests("c", "R", ["question " * 30] * 4, ["answer " * 30] * 4)
    backend.max_model_len = len(backend.tokenizer(long[0].content)["input_ids"]) + 40
    out = backend.first_token_logprobs(long)
    assert out[0].truncated is False and all(o.truncated for o in out[2:])
    backend.max_model_len = 10
    assert "exceeds" in backend.first_token_logprobs(long[:1])[0].error


def test_role_judge_through_vllm_adapter(backend, tiny_llama_dir):
    from adherence.data import example_path, read_turns

    turns = read_turns(example_path("role")).slice(0, 5)
    cols = RoleJudge(JudgeConfig(model="my-model", backend="vllm"), backend=backend).score(turns)
    assert set(cols["status"]) == {"ok"} and set(cols["p_yes_source"]) == {"logprobs"}


@pytest.mark.skipif(is_available("vllm"), reason="checks the error shown when vllm is not installed")
def test_missing_vllm_names_the_extra():
    with pytest.raises(MissingDependencyError, match=r"adherence\[vllm\]"):
        VLLMBackend("some/model")
