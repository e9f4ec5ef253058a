"""Judge throughput with and without prefix sharing on synthetic growing conversations.

Correctness first: P(yes) from packed passes must equal separate passes
(within ``tolerance``) on the same requests. Then each mode is timed over
``repeats`` runs: turns/s, prompt tokens/s (the tokens of every turn's own
prompt, i.e. the work a non-sharing engine does) and forward tokens actually
computed. On CUDA the FLOP utilisation is 2 x non-embedding parameters x
forward tokens / time / the device's dense bf16 peak.
"""

from __future__ import annotations

import platform
import statistics
import time
from typing import Optional

import numpy as np

from ..judges import p_yes_from_logprobs, turn_requests

__all__ = ["bench_judge", "synthetic_conversations", "RANDOM_CONFIGS"]

# Dense bf16 peak (FLOP/s) of common accelerators.
_PEAK_BF16 = {"H100": 989e12, "H200": 989e12, "A100": 312e12, "L4": 121e12}

# Random-weight configs of real architectures (no download): name -> LlamaConfig kwargs.
RANDOM_CONFIGS = {
    "llama-tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2),
    "llama-3-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                       num_key_value_heads=8, rope_theta=500000.0),
}

_WORDS = ("account card transfer fee balance refund loan rate branch savings payment limit statement deposit "
          "question answer please thanks help order delivery reset password laptop network recipe oven salt "
          "minutes steps policy support service today tomorrow weekly monthly online mobile secure verify").split()


def synthetic_conversations(n: int, turns: int, words_per_turn: int, seed: int = 0) -> list:
    """``n`` conversations of ``turns`` (user, assistant) exchanges of random words (seeded)."""
    rng = np.random.default_rng(seed)
    out = []
    for c in range(n):
        users = [" ".join(rng.choice(_WORDS, words_per_turn // 2)) + "?" for _ in range(turns)]
        assistants = [" ".join(rng.choice(_WORDS, words_per_turn)) + "." for _ in range(turns)]
        out.append((f"conv-{c}", "You are a support assistant for a bank. Stay on banking topics, be polite.", users, assistants))
    return out


def _backend(model: Optional[str], random_config: Optional[str], device, dtype):
    from ..judges._transformers import TransformersBackend

    if random_config is None:
        return TransformersBackend(model, device=device, dtype=dtype, progress=False)
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from ..models import resolve_model

    if random_config not in RANDOM_CONFIGS:
        raise ValueError(f"unknown random config {random_config!r}; available: {', '.join(RANDOM_CONFIGS)}")
    tok_src = resolve_model("bundled:all-MiniLM-L6-v2")
    tok = AutoTokenizer.from_pretrained(str(tok_src.path))
    tok.chat_template = ("{% for m in messages %}[{{ m['role'] }}]\n{{ m['content'] }}\n{% endfor %}"
                         "{% if add_generation_prompt %}[assistant]\n{% endif %}")
    cfg = LlamaConfig(vocab_size=tok.vocab_size, max_position_embeddings=8192, pad_token_id=tok.pad_token_id,
                      **RANDOM_CONFIGS[random_config])
    torch.manual_seed(0)
    with torch.device("cuda" if (device or "").startswith("cuda") or (device is None and torch.cuda.is_available()) else "cpu"):
        model = LlamaForCausalLM(cfg)
    return TransformersBackend(loaded=(model, tok, f"random:{random_config}"), device=device, dtype=dtype, progress=False)


def bench_judge(
    *, model: Optional[str] = None, random_config: Optional[str] = None, conversations: int = 8, turns: int = 8,
    words_per_turn: int = 40, repeats: int = 3, device: Optional[str] = None, dtype: Optional[str] = None,
    tolerance: float = 1e-3, seed: int = 0,
) -> dict:
    """Benchmark dict: arguments, device, versions, correctness, and per mode timings and throughput."""
    import torch

    backend = _backend(model, random_config, device, dtype)
    reqs = []
    for cid, role, users, assistants in synthetic_conversations(conversations, turns, words_per_turn, seed):
        reqs += turn_requests(cid, role, users, assistants)
    prompt_tokens = sum(len(backend._plan(r).ids) for r in reqs)

    def run(shared: bool):
        backend.prefix_sharing = shared
        before = backend.stats["forward_tokens"]
        if backend.device.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        out = backend.first_token_logprobs(reqs)
        if backend.device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t, out, backend.stats["forward_tokens"] - before

    _, packed, _ = run(True)  # also warms up
    _, separate, _ = run(False)
    p1 = np.array([p_yes_from_logprobs(o.top_logprobs)[0] for o in packed])
    p2 = np.array([p_yes_from_logprobs(o.top_logprobs)[0] for o in separate])
    err = float(np.abs(p1 - p2).max())
    if err > tolerance:
        raise RuntimeError(f"prefix-shared P(yes) differs from separate passes by {err} > {tolerance}")
    n_params = sum(p.numel() for p in backend.model.parameters())
    n_embed = backend.model.get_input_embeddings().weight.numel()
    dev_name = torch.cuda.get_device_name(backend.device) if backend.device.type == "cuda" else (
        f"cpu ({platform.machine()}, {torch.get_num_threads()} threads)")
    peak = next((v for k, v in _PEAK_BF16.items() if k in dev_name), None)
    result = {
        "args": {"model": backend.model_id, "conversations": conversations, "turns": turns,
                 "words_per_turn": words_per_turn, "repeats": repeats, "dtype": str(backend.dtype)},
        "device": dev_name,
        "versions": {"torch": torch.__version__, "python": platform.python_version()},
        "correctness": {"max_abs_p_yes_difference": err, "tolerance": tolerance, "passed": True},
        "n_turns": len(reqs),
        "prompt_tokens": prompt_tokens,
        "non_embedding_parameters": n_params - n_embed,
        "modes": {},
    }
    for name, shared in (("prefix_sharing", True), ("separate", False)):
        times, fwd = [], 0
        for _ in range(repeats):
            t, _, fwd = run(shared)
            times.append(t)
        med = statistics.median(times)
        entry = {"median_s": med, "min_s": min(times), "max_s": max(times), "turns_per_s": len(reqs) / med,
                 "prompt_tokens_per_s": prompt_tokens / med, "forward_tokens": fwd}
        if backend.device.type == "cuda" and peak:
            entry["flop_utilisation"] = 2.0 * (n_params - n_embed) * fwd / med / peak
        result["modes"][name] = entry
    result["speedup"] = result["modes"]["separate"]["median_s"] / result["modes"]["prefix_sharing"]["median_s"]
    return result
