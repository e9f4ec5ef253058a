"""BOS (any special prefix a tokenizer defines) is in every judge prompt exactly once, on every in-process
backend and layout, with and without a chat template: Llama- and Gemma-style tokenizers (built here, with
their families' special tokens and templates) and the bundled SmolLM2 tokenizer."""

import pytest

from adherence.judges import turn_requests
from adherence.judges._chat import prompt_ids, special_prefix, with_special_prefix
from adherence.judges._planner import PromptPlanner
from adherence.judges._vllm import VLLMBackend

LLAMA3_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
    "{{ m['content'] }}<|eot_id|>{% endfor %}{% if add_generation_prompt %}<|start_header_id|>assistant"
    "<|end_header_id|>\n\n{% endif %}"
)
# A template that forgets the BOS the tokenizer defines (the prompt must still start with it).
LLAMA_NO_BOS_TEMPLATE = LLAMA3_TEMPLATE.replace("{{ bos_token }}", "")
GEMMA_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' else 'user' }}\n"
    "{{ m['content'] }}<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)
# A template that writes BOS twice: the prompt keeps one.
DOUBLE_BOS_TEMPLATE = "{{ bos_token }}" + GEMMA_TEMPLATE

FAMILIES = {
    "llama": dict(bos="<|begin_of_text|>", eos="<|eot_id|>", extra=["<|start_header_id|>", "<|end_header_id|>"]),
    "gemma": dict(bos="<bos>", eos="<eos>", extra=["<start_of_turn>", "<end_of_turn>"]),
}


def _tokenizer_dir(path, family: str, template):
    """A word-level tokenizer with the family's special tokens; the post-processor puts BOS before every text
    (and EOS after it for Gemma-style, so a prompt that took it would end before the answer)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import LlamaConfig, PreTrainedTokenizerFast

    f = FAMILIES[family]
    words = [
        "<unk>",
        "<pad>",
        f["bos"],
        f["eos"],
        *f["extra"],
        "Hello",
        "You",
        "are",
        "auditing",
        "a",
        "chatbot",
        "Role",
        "yes",
        "no",
        "user",
        "model",
        "assistant",
        "system",
        "YES",
        "NO",
    ]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    single = f"{f['bos']} $A" + (f" {f['eos']}" if family == "gemma" else "")
    specials = [(f["bos"], words.index(f["bos"]))] + ([(f["eos"], words.index(f["eos"]))] if family == "gemma" else [])
    tok.post_processor = processors.TemplateProcessing(single=single, special_tokens=specials)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=f["bos"],
        eos_token=f["eos"],
        unk_token="<unk>",
        pad_token="<pad>",
        additional_special_tokens=f["extra"],
    )
    if template:
        fast.chat_template = template
    fast.save_pretrained(path)
    LlamaConfig(
        vocab_size=len(words),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        max_position_embeddings=512,
    ).save_pretrained(path)
    return path, words.index(f["bos"]), words.index(f["eos"])


def _requests(layout):
    return turn_requests("c", "Role: You are a chatbot", ["Hello", "Hello again"], ["yes", "no"], layout=layout)


class _FakeLLM:
    def __init__(self, tok):
        self.tok = tok

    def get_tokenizer(self):
        return self.tok


CASES = [
    ("llama", LLAMA3_TEMPLATE),
    ("llama", LLAMA_NO_BOS_TEMPLATE),
    ("llama", None),
    ("gemma", GEMMA_TEMPLATE),
    ("gemma", DOUBLE_BOS_TEMPLATE),
    ("gemma", None),
]


@pytest.mark.parametrize(
    "family,template",
    CASES,
    ids=[
        "llama3",
        "llama-template-without-bos",
        "llama-no-template",
        "gemma",
        "gemma-template-twice",
        "gemma-no-template",
    ],
)
@pytest.mark.parametrize("layout", ["user", "system", "pygaussia"])
def test_bos_once_and_nothing_appended(tmp_path, family, template, layout):
    path, bos, eos = _tokenizer_dir(tmp_path, family, template)
    judge = PromptPlanner.from_model(str(path))
    assert special_prefix(judge.tokenizer) == (bos,)
    vllm = VLLMBackend("m", llm=_FakeLLM(judge.tokenizer), sampling_params_cls=dict, max_model_len=512, progress=False)
    for req in _requests(layout):
        ids = judge.plan(req).ids
        assert ids[0] == bos and ids.count(bos) == 1, (family, template, layout)
        if family == "gemma" and template is None:
            assert eos not in ids  # the post-processor's EOS would end the prompt: never appended
        # the vLLM backend sends the very same ids (as prompt_token_ids, to which vLLM adds nothing)
        prompt, truncated, error = vllm.build_prompt(req, 1)
        assert error is None and prompt == {"prompt_token_ids": ids}


def test_without_the_fix_the_template_less_prompt_lacks_bos(tmp_path):
    """What the old tokenisation (add_special_tokens=False, no prefix rule) fed a template-less base model."""
    path, bos, _ = _tokenizer_dir(tmp_path, "gemma", None)
    judge = PromptPlanner.from_model(str(path))
    req = _requests("user")[0]
    head, _, _ = judge.piece_texts(req)
    assert bos not in judge.tokenizer(head, add_special_tokens=False)["input_ids"]
    assert judge.plan(req).ids[0] == bos


@pytest.mark.slow
def test_smollm2_prompt_equals_its_own_chat_template():
    """SmolLM2 defines no prefix (its template opens with <|im_start|>): the prompt is exactly what
    apply_chat_template(tokenize=True) gives, on every layout."""
    judge = PromptPlanner.from_model()
    tok = judge.tokenizer
    assert special_prefix(tok) == ()
    for layout in ("user", "system", "pygaussia"):
        for req in _requests(layout):
            ref = tok.apply_chat_template(req.messages(), tokenize=True, add_generation_prompt=True)
            ref = ref["input_ids"] if hasattr(ref, "keys") else ref
            assert judge.plan(req).ids == list(ref)
            assert prompt_ids(tok, req.messages()) == list(ref)


def test_with_special_prefix():
    assert with_special_prefix([5, 6], (1,)) == [1, 5, 6]
    assert with_special_prefix([1, 1, 1, 5], (1,)) == [1, 5]
    assert with_special_prefix([1, 2, 5], (1, 2)) == [1, 2, 5]
    assert with_special_prefix([5], ()) == [5]
