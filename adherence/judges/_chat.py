"""A judge prompt as the model should see it: its chat template (or a plain fallback) and its special prefix.

Prompts are tokenised with ``add_special_tokens=False`` so that nothing is appended after the generation
prompt (a tokenizer that appends EOS or SEP would end the prompt before the answer). What the tokenizer puts
*before* a text -- Llama's and Gemma's BOS -- must still be there, exactly once: a chat template usually
writes it itself (``{{ bos_token }}``), the plain fallback for checkpoints without a template never does,
and a base model prompted without its BOS degrades (Gemma 3 270M: "France. The The The").
``prompt_ids`` adds the prefix where the rendered prompt lacks it and drops a repeated one.
"""

from __future__ import annotations

from typing import Optional

__all__ = ["has_template", "render", "special_prefix", "with_special_prefix", "prompt_ids"]

_PROBE = "Hello"


def has_template(tokenizer) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def render(tokenizer, messages: list[dict]) -> str:
    """The chat-templated prompt text with the generation prompt; without a template, the system message,
    a blank line and the user message, then a newline."""
    if has_template(tokenizer):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    system = "".join(m["content"] for m in messages if m["role"] == "system")
    user = "".join(m["content"] for m in messages if m["role"] != "system")
    return (system + "\n\n" if system else "") + user + "\n"


def special_prefix(tokenizer) -> tuple:
    """The token ids the tokenizer puts before any text (e.g. ``(bos_id,)``), () when none."""
    cached = getattr(tokenizer, "_adherence_special_prefix", None)
    if cached is not None:
        return cached
    plain = list(tokenizer(_PROBE, add_special_tokens=False)["input_ids"])
    full = list(tokenizer(_PROBE, add_special_tokens=True)["input_ids"])
    prefix: tuple = ()
    for k in range(len(full) - len(plain) + 1):
        if full[k : k + len(plain)] == plain:
            prefix = tuple(full[:k])
            break
    try:
        tokenizer._adherence_special_prefix = prefix
    except Exception:  # noqa: BLE001 - a tokenizer that takes no attributes is only asked again
        pass
    return prefix


def with_special_prefix(ids: list, prefix: tuple) -> list:
    """``ids`` starting with ``prefix`` exactly once."""
    if not prefix:
        return list(ids)
    n = len(prefix)
    start = 0
    while tuple(ids[start : start + n]) == prefix:
        start += n
    return list(prefix) + list(ids[start:])


def prompt_ids(tokenizer, messages: list[dict], prefix: Optional[tuple] = None) -> list:
    """Token ids of the rendered prompt, special prefix present once, nothing appended."""
    ids = tokenizer(render(tokenizer, messages), add_special_tokens=False)["input_ids"]
    return with_special_prefix(ids, special_prefix(tokenizer) if prefix is None else prefix)
