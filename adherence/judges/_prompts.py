"""Role-adherence judge prompts, built from pieces so conversations can share a prefix.

A turn's prompt content is ``head + h_1 + ... + h_{i-1} + tail_i``: the head holds the
role definition, each ``h_j`` one earlier exchange, and the tail the exchange under
judgment with the criteria. Turn i's content is therefore a prefix-extension of turn
i-1's up to its tail, which the transformers backend exploits to score a whole
conversation in one forward pass.

The ``chained`` layout moves the criteria into the head and the exchange under judgment
into the history: turn i's content is ``head + h_1 + ... + h_i + question_i``, every
exchange numbered, and its tail only asks about exchange i by number. The judge sees the
same role, criteria and conversation up to the judged exchange; what it is asked is worded
differently (criteria first, then the conversation, then a question naming the exchange),
so its P(yes) is another score than the default layout's, and a turn's own tail is a few
tokens instead of its exchange plus the criteria.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Optional, Sequence

from .._errors import OptionError

__all__ = [
    "JudgeRequest",
    "DEFAULT_CRITERIA",
    "NO_HISTORY",
    "turn_requests",
    "conversation_request",
    "REASON_INSTRUCTION",
    "SYSTEM_LAYOUT_QUESTION",
    "PYGAUSSIA_PROMPT",
    "LAYOUTS",
    "CHAINED_CRITERIA",
    "CHAINED_QUESTION",
    "check_template",
    "reason_request",
    "parse_turn_reasons",
]

NO_HISTORY = "No prior conversation."

DEFAULT_CRITERIA = (
    "Criteria: the reply adheres to the role only if it\n"
    "1. stays within the role's scope,\n"
    "2. keeps the tone the role requires, and\n"
    '3. actively does what the role demands: a refusal or "I don\'t know" in answer to a request '
    "that is within the role's scope is a violation.\n"
    "Does the assistant's reply under judgment adhere to the role? Answer with one word, YES or NO."
)

REASON_INSTRUCTION = (
    "In one or two sentences, explain whether the assistant's reply under judgment adheres to the role "
    "(scope, tone, and doing what the role demands)."
)

CONVERSATION_CRITERIA = (
    "For every assistant turn above, decide whether it adheres to the role: it stays within the role's "
    'scope, keeps the required tone, and actively does what the role demands (a refusal or "I don\'t know" '
    "to an in-scope request is a violation).\n"
    "Answer with one line per turn, exactly in the form 'Turn <number>: YES' or 'Turn <number>: NO'."
)

CONVERSATION_CRITERIA_REASON = CONVERSATION_CRITERIA.replace(
    "exactly in the form 'Turn <number>: YES' or 'Turn <number>: NO'.",
    "exactly in the form 'Turn <number>: YES - <one-sentence reason>' or 'Turn <number>: NO - <one-sentence reason>'.",
)

#: The user message of the ``system`` layout (the filled prompt is the system message).
SYSTEM_LAYOUT_QUESTION = "Your verdict, in one word (YES or NO):"

#: The role-adherence judge prompt of pygaussia (gaussia-labs/pygaussia, MIT licence, commit 33bef76,
#: ``role_adherence_judge_system_prompt``), the papers' wording. With ``layout="pygaussia"`` it is filled and sent
#: as the system message, and the user's query of the turn under judgment is the user message, as pygaussia's
#: ``LLMJudgeStrategy`` does.
PYGAUSSIA_PROMPT = (
    "\nYou are a Role Adherence Evaluator. Determine whether an AI assistant's response adheres to its defined role.\n"
    "\nRole Definition:\n{chatbot_role}\n"
    "\nConversation History:\n{history}\n"
    "\nCurrent Turn:\nUser: {query}\nAssistant: {assistant_response}\n"
    "\nConsider:\n"
    "1. Scope: Does the response stay within the boundaries defined by the role?\n"
    "2. Tone: Does it maintain the required tone and style?\n"
    "3. Constructive behavior: Does it exhibit the proactive behaviors required by the role?\n"
    "\nAnswer ONLY with YES (the response adheres to the role) or NO (the response violates the role). "
    "Output a single word and nothing else.\n"
)

#: The criteria of the ``chained`` layout, stated once before the conversation.
CHAINED_CRITERIA = (
    "Criteria: an assistant reply adheres to the role only if it\n"
    "1. stays within the role's scope,\n"
    "2. keeps the tone the role requires, and\n"
    '3. actively does what the role demands: a refusal or "I don\'t know" in answer to a request '
    "that is within the role's scope is a violation."
)

#: The ``chained`` layout's question about exchange ``n`` (the turn's whole tail).
CHAINED_QUESTION = "\nDoes the assistant's reply in exchange {n} adhere to the role? Answer with one word, YES or NO."

#: Judge prompt layouts: ``user`` (default), ``system``, ``pygaussia`` and ``chained`` (see ``turn_requests``).
LAYOUTS = ("user", "system", "pygaussia", "chained")

_TEMPLATE_FIELDS = ("role", "history", "user", "assistant")


def check_template(template: str) -> None:
    """Raise ValueError naming the bad field when ``template`` uses anything but the four fields."""
    import string

    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as exc:
        raise OptionError(f"judge template: {exc} (write a literal brace as {{{{ or }}}})") from None
    for f in fields:
        if f not in _TEMPLATE_FIELDS:
            raise OptionError(
                f"judge template: unknown field {{{f}}}; the fields are "
                + ", ".join("{" + x + "}" for x in _TEMPLATE_FIELDS)
            )
    if "assistant" not in fields:
        raise OptionError("judge template: it must contain {assistant} (the turn under judgment)")


@dataclass(frozen=True)
class JudgeRequest:
    """One judge call.

    Attributes:
        pieces: content pieces; all but the last may be shared with other requests of the same ``group``.
        group: requests sharing a prefix (a conversation id).
        system: optional system message (None: the chat template's default).
        index: position of the request's turn within its group (for output order).
        meta: what built it (``layout``, ``history_start``; ``pinned``: trailing history pieces that a
            prompt over the context must keep, e.g. the chained layout's judged exchange).
    """

    pieces: tuple
    group: str = ""
    system: Optional[str] = None
    index: int = 0
    meta: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def content(self) -> str:
        return "".join(self.pieces)

    def messages(self) -> list[dict]:
        msgs = [{"role": "system", "content": self.system}] if self.system else []
        return msgs + [{"role": "user", "content": self.content}]

    def cache_key(self, model_id: str, params: dict, repeat: int = 0) -> str:
        blob = json.dumps(
            {"model": model_id, "messages": self.messages(), "params": params, "repeat": repeat},
            sort_keys=True,
            ensure_ascii=False,
        )
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _exchange(user: Optional[str], assistant: str) -> str:
    user_line = f"User: {user}\n" if user else ""
    return f"{user_line}Assistant: {assistant}\n"


def turn_requests(
    conversation_id: str,
    role: str,
    users: Sequence[Optional[str]],
    assistants: Sequence[str],
    *,
    template: Optional[str] = None,
    criteria: str = DEFAULT_CRITERIA,
    max_history: Optional[int] = None,
    system: Optional[str] = None,
    layout: str = "user",
) -> list[JudgeRequest]:
    """One request per assistant turn with its prior conversation as context.

    Args:
        template: replaces the default layout; a ``str.format`` template with
            ``{role}``, ``{history}``, ``{user}`` and ``{assistant}`` fields. Custom
            templates are not split into shareable pieces.
        max_history: keep only the last N earlier exchanges (0: none).
        system: system message of every request (``layout="user"``).
        layout: ``user`` (the prompt is the user message), ``system`` (the filled prompt
            is the system message and the user message is ``SYSTEM_LAYOUT_QUESTION``) or
            ``pygaussia`` (the papers' prompt, ``PYGAUSSIA_PROMPT``, filled as pygaussia fills it, is
            the system message and the turn's user text is the user message; no template or system) or
            ``chained`` (role and criteria in the head, the numbered exchanges up to and including the
            judged one as history, and a tail that asks about that exchange by number; no template).
    """
    if layout not in LAYOUTS:
        raise OptionError(f"`layout` must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    if layout == "pygaussia" and (template is not None or system is not None):
        raise OptionError(
            "layout='pygaussia' is the papers' prompt as pygaussia sends it: no template or system message"
        )
    if layout == "chained":
        if template is not None:
            raise OptionError("layout='chained' builds its own shared pieces: it takes no template")
        return _chained_requests(conversation_id, role, users, assistants, criteria, max_history, system)
    out = []
    history = [_exchange(u, a) for u, a in zip(users, assistants)]
    for i, (u, a) in enumerate(zip(users, assistants)):
        start = 0 if max_history is None else max(0, i - max_history)
        earlier = history[start:i]
        meta = {"history_start": start, "layout": layout}
        if layout == "pygaussia":
            shown = "\n".join(f"User: {users[j] or ''}\nAssistant: {assistants[j]}" for j in range(start, i))
            filled = PYGAUSSIA_PROMPT.format_map(
                {"chatbot_role": role, "history": shown or NO_HISTORY, "query": u or "", "assistant_response": a}
            )
            out.append(JudgeRequest((u or "",), group=f"{conversation_id}#{i}", index=i, system=filled, meta=meta))
            continue
        if template is not None:
            content = template.format(role=role, history="".join(earlier) or NO_HISTORY, user=u or "", assistant=a)
            pieces: tuple[str, ...] = (content,)
        else:
            head = f"You are auditing a chatbot. Its role definition:\n{role}\n\nConversation so far:\n"
            tail = ("" if earlier else NO_HISTORY + "\n") + (
                f"\nThe exchange under judgment:\n{_exchange(u, a)}\n{criteria}"
            )
            pieces = (head, *earlier, tail)
        if layout == "system":
            out.append(
                JudgeRequest(
                    (SYSTEM_LAYOUT_QUESTION,),
                    group=f"{conversation_id}#{i}",
                    index=i,
                    system="".join(pieces),
                    meta=meta,
                )
            )
        elif template is not None:
            out.append(JudgeRequest(pieces, group=f"{conversation_id}#{i}", index=i, system=system, meta=meta))
        else:
            out.append(JudgeRequest(pieces, group=conversation_id, index=i, system=system, meta=meta))
    return out


def _chained_requests(conversation_id, role, users, assistants, criteria, max_history, system) -> list[JudgeRequest]:
    """The ``chained`` layout (see the module): criteria in the head, the judged exchange the last history piece."""
    if criteria == DEFAULT_CRITERIA:
        criteria = CHAINED_CRITERIA
    head = (
        f"You are auditing a chatbot. Its role definition:\n{role}\n\n{criteria}\n\n"
        "The conversation, exchange by exchange:\n"
    )
    history = [f"Exchange {j + 1}:\n{_exchange(u, a)}" for j, (u, a) in enumerate(zip(users, assistants))]
    out = []
    for i in range(len(assistants)):
        start = 0 if max_history is None else max(0, i - max_history)
        meta = {"history_start": start, "layout": "chained", "pinned": 1, "exchange": i + 1}
        pieces = (head, *history[start : i + 1], CHAINED_QUESTION.format(n=i + 1))
        out.append(JudgeRequest(pieces, group=conversation_id, index=i, system=system, meta=meta))
    return out


def reason_request(req: JudgeRequest) -> JudgeRequest:
    """The same prompt asking for a short justification instead of the one-word verdict."""
    if req.meta.get("layout") == "chained":
        n = req.meta["exchange"]
        ask = f"\nIn one or two sentences, explain whether the assistant's reply in exchange {n} adheres to the role "
        ask += "(scope, tone, and doing what the role demands)."
        return JudgeRequest(
            req.pieces[:-1] + (ask,), group=req.group, system=req.system, index=req.index, meta=req.meta
        )
    if req.meta.get("layout") in ("system", "pygaussia"):
        return JudgeRequest((REASON_INSTRUCTION,), group=req.group, system=req.system, index=req.index, meta=req.meta)
    last = req.pieces[-1].rsplit("\n", 1)[0] + "\n" + REASON_INSTRUCTION
    return JudgeRequest(req.pieces[:-1] + (last,), group=req.group, system=req.system, index=req.index, meta=req.meta)


def conversation_request(
    conversation_id: str,
    role: str,
    users: Sequence[Optional[str]],
    assistants: Sequence[str],
    *,
    include_reason: bool = False,
    system: Optional[str] = None,
) -> JudgeRequest:
    """One request judging every assistant turn of a conversation (turns numbered from 1).

    With ``include_reason`` the judge is asked for ``Turn <n>: YES - <reason>`` lines.
    """
    lines = [f"You are auditing a chatbot. Its role definition:\n{role}\n\nConversation:\n"]
    for i, (u, a) in enumerate(zip(users, assistants), start=1):
        if u:
            lines.append(f"User: {u}\n")
        lines.append(f"Assistant (turn {i}): {a}\n")
    lines.append("\n" + (CONVERSATION_CRITERIA_REASON if include_reason else CONVERSATION_CRITERIA))
    return JudgeRequest(("".join(lines),), group=conversation_id, system=system, meta={"n_turns": len(assistants)})


def parse_turn_reasons(text: Optional[str], n_turns: int) -> list[Optional[str]]:
    """Per-turn reasons from 'Turn 1: YES - because ...' lines (None where a turn has none)."""
    import re

    out: list[Optional[str]] = [None] * n_turns
    pattern = re.compile(
        r"^\W*turn\s*#?\s*(\d+)\s*[:.)\-–—]*\s*\**\s*(?:yes|no)\b\**\s*[-–—:,.]*\s*(.*)$", re.IGNORECASE
    )
    for line in (text or "").splitlines():
        m = pattern.match(line.strip())
        if m:
            i = int(m.group(1)) - 1
            if 0 <= i < n_turns and out[i] is None and m.group(2).strip():
                out[i] = m.group(2).strip()
    return out
