"""Planning judge prompts without a model: token pieces, truncation, and packing conversations for prefix sharing.

A ``PromptPlanner`` holds only a tokenizer. It turns each request into token pieces (head: the chat template's
start and the role; history: the earlier exchanges; tail: the turn under judgment and the question), drops the
oldest history when a prompt is over the context, and groups a conversation's turns into packs whose shared
trunk is run once (``arrange``). The in-process backend runs what it plans; a dry run and the benches count
tokens with it and load no weights (``PromptPlanner.from_model``).
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from ..models import DEFAULT_JUDGE, resolve_model
from ._chat import render, special_prefix, with_special_prefix
from ._prompts import JudgeRequest

__all__ = ["Plan", "PromptPlanner"]

_SENTINEL = "\u2063ADHERENCE_CONTENT\u2063"


class Plan:
    """A request as token pieces: head, history pieces, tail (after any truncation)."""

    __slots__ = ("head", "history", "tail", "truncated", "error")

    def __init__(self, head, history, tail, truncated=False, error=None):
        self.head, self.history, self.tail, self.truncated, self.error = head, history, tail, truncated, error

    @property
    def ids(self) -> list[int]:
        out = list(self.head)
        for h in self.history:
            out.extend(h)
        return out + list(self.tail)


class PromptPlanner:
    """Token plans of judge requests for one tokenizer.

    Args:
        tokenizer: a Hugging Face tokenizer (fast or slow) with the judge's chat template.
        max_context: prompt token limit; longer prompts lose their oldest history, and one still over it is an
            error.
        prefix_sharing: pack each conversation's turns around one shared trunk (``arrange``).
        pack_tokens: longest packed sequence; longer conversations are split into several packs.
    """

    piece_cache_limit = 200_000  # prompt pieces (roles, exchanges) whose token ids are kept

    def __init__(self, tokenizer: Any, *, max_context: int, prefix_sharing: bool = True, pack_tokens: int = 4096):
        self.tokenizer = tokenizer
        self.max_context, self.prefix_sharing, self.pack_tokens = int(max_context), prefix_sharing, int(pack_tokens)
        self._templates: dict = {}
        self._piece_cache: dict[str, list[int]] = {}
        self.model_id: Optional[str] = None  # the judge it plans for, when built from one

    @classmethod
    def from_model(
        cls, model: Optional[str] = None, *, max_context: Optional[int] = None, prefix_sharing: bool = True
    ) -> PromptPlanner:
        """The planner of a judge model, from its tokenizer and config alone (no weights are loaded)."""
        from transformers import AutoConfig, AutoTokenizer

        resolved = resolve_model(model or DEFAULT_JUDGE)
        kwargs = {"gguf_file": resolved.gguf_file} if resolved.gguf_file else {}
        path = str(resolved.path)
        tokenizer = AutoTokenizer.from_pretrained(path, **kwargs)
        try:
            limit = getattr(AutoConfig.from_pretrained(path, **kwargs), "max_position_embeddings", None)
        except (OSError, ValueError):
            limit = None
        planner = cls(tokenizer, max_context=int(max_context or limit or 4096), prefix_sharing=prefix_sharing)
        planner.model_id = resolved.name + (f"::{resolved.gguf_file}" if resolved.gguf_file else "")
        return planner

    def template(self, system: Optional[str]) -> tuple[str, str]:
        """Text the chat template (or the plain fallback) puts before and after the user content."""
        if system not in self._templates:
            msgs = ([{"role": "system", "content": system}] if system else []) + [
                {"role": "user", "content": _SENTINEL}
            ]
            pre, post = render(self.tokenizer, msgs).split(_SENTINEL)
            self._templates[system] = (pre, post)
        return self._templates[system]

    def ids(self, text: str) -> list[int]:
        ids = self._piece_cache.get(text)
        if ids is None:
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            if len(self._piece_cache) < self.piece_cache_limit:
                self._piece_cache[text] = ids
        return ids

    def piece_texts(self, req: JudgeRequest) -> tuple:
        """``(head text or None, history texts, tail text)``: what each token piece of ``req`` encodes."""
        pre, post = self.template(req.system)
        pieces = req.pieces
        head = pre + pieces[0] if len(pieces) > 1 else None
        return head, pieces[1:-1], (pre if len(pieces) == 1 else "") + pieces[-1] + post

    def tokenize_all(self, requests: Sequence[JudgeRequest]) -> None:
        """Tokenise every piece not yet cached in one batched call (the fast tokenizer's per-call overhead
        dominates piece by piece: ~0.4 ms each, about a millisecond per turn)."""
        todo: dict = {}
        for r in requests:
            head, history, tail = self.piece_texts(r)
            for t in ([head] if head is not None else []) + list(history) + [tail]:
                if t not in self._piece_cache:
                    todo[t] = None
        texts = list(todo)
        room = max(0, self.piece_cache_limit - len(self._piece_cache))
        for i in range(0, min(len(texts), room), 4096):
            chunk = texts[i : i + 4096]
            for t, ids in zip(chunk, self.tokenizer(chunk, add_special_tokens=False)["input_ids"]):
                self._piece_cache[t] = ids

    def plan(self, req: JudgeRequest, reserve: int = 1) -> Plan:
        head_text, history_texts, tail_text = self.piece_texts(req)
        head = self.ids(head_text) if head_text is not None else []
        history = [self.ids(p) for p in history_texts]
        tail = self.ids(tail_text)
        prefix = special_prefix(self.tokenizer)
        if prefix:  # BOS (or any prefix the tokenizer defines) exactly once, at the very start
            if head_text is not None:
                head = with_special_prefix(head, prefix)
            else:
                tail = with_special_prefix(tail, prefix)
        limit = self.max_context - reserve
        total = len(head) + sum(map(len, history)) + len(tail)
        truncated = False
        keep = int(req.meta.get("pinned", 0))  # trailing history that must stay (a chained layout's judged exchange)
        while total > limit and len(history) > keep:
            total -= len(history.pop(0))  # oldest history first; the role and the judged turn stay
            truncated = True
        if total > limit:
            return Plan(
                head,
                history,
                tail,
                truncated,
                f"prompt of {total} tokens exceeds the judge's context of {self.max_context} even without history",
            )
        return Plan(head, history, tail, truncated)

    def packs(self, group: list) -> list:
        """Split a conversation's (index, plan) list into packs: (trunk_ids, [(index, prefix_len, tail)])."""
        group = sorted(group, key=lambda it: len(it[1].history))
        packs: list[tuple[int, list[tuple[int, Plan]]]] = []
        current: list[tuple[int, Plan]] = []
        trunk_pieces = 0
        longest = group[-1][1]
        cum = [len(longest.head)]
        for h in longest.history:
            cum.append(cum[-1] + len(h))
        for i, plan in group:
            n_hist = len(plan.history)
            prefix = cum[n_hist]
            size = prefix + sum(len(p.tail) for _, p in current) + len(plan.tail)
            if current and size > self.pack_tokens:
                packs.append((trunk_pieces, current))
                current = []
            current.append((i, plan))
            trunk_pieces = n_hist
        if current:
            packs.append((trunk_pieces, current))
        out = []
        for n_hist, members in packs:
            trunk = list(longest.head)
            for h in longest.history[:n_hist]:
                trunk.extend(h)
            out.append((trunk, [(i, cum[len(p.history)], p.tail) for i, p in members]))
        return out

    def arrange(self, requests: Sequence[JudgeRequest], plans: list) -> tuple[list, list]:
        """``(plain, packs)``: prompts run on their own row, and conversations packed with a shared trunk."""
        plain: list[tuple[int, list[int]]] = []
        groups: dict[tuple[Any, ...], list[tuple[int, Plan]]] = {}
        for i, (req, plan) in enumerate(zip(requests, plans)):
            if plan.error:
                continue
            if self.prefix_sharing and len(req.pieces) > 1 and not plan.truncated:
                groups.setdefault((req.group, req.system, req.pieces[0]), []).append((i, plan))
            else:
                plain.append((i, plan.ids))
        packs = []
        for members in groups.values():
            longest = max(members, key=lambda it: len(it[1].history))[1]
            nested = [it for it in members if it[1].history == longest.history[: len(it[1].history)]]
            plain.extend((i, p.ids) for i, p in members if all(i != j for j, _ in nested))
            if len(nested) == 1:  # nothing shared: its own row (a plain causal pass)
                plain.append((nested[0][0], nested[0][1].ids))
            else:
                packs.extend(self.packs(nested))
        return plain, packs

    def count_tokens(self, requests: Sequence[JudgeRequest], *, reserve: int = 1) -> dict:
        """Token counts of ``requests`` without running the model: ``prompt_tokens`` (each prompt's
        length), ``forward_tokens`` (what the packed forward passes would run), ``too_long`` (prompts over
        the context even without history) and ``truncated``."""
        plans = [self.plan(r, reserve=reserve) for r in requests]
        plain, packs = self.arrange(requests, plans)
        forward = sum(len(ids) for _, ids in plain) + sum(
            len(trunk) + sum(len(t) for _, _, t in branches) for trunk, branches in packs
        )
        return {
            "prompt_tokens": sum(len(p.ids) for p in plans if not p.error),
            "forward_tokens": forward,
            "too_long": sum(1 for p in plans if p.error),
            "truncated": sum(1 for p in plans if p.truncated),
        }
