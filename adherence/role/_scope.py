"""Reference-free methods: ``scope`` (no labels) and ``classifier`` (a linear model trained on the user's labels).

Both read only what every log has -- the role (the system prompt), the user message and the reply -- and run
on the bundled encoder at encoder speed, so a user without reference replies, labels or a GPU gets a score.

``scope`` (higher = the reply stays in its role)::

    scope = clip(0.5 * cos(reply, role) + 0.5 * min_s max(cos(s, role), cos(s, user)), 0, 1)

where ``s`` runs over the reply's sentences. The first term is how close the reply as a whole stays to the role;
the second is its least on-role sentence: a reply is only as adherent as its worst sentence, and a sentence is in
scope when it is close to the role or answers the user. The combination was chosen on a generated multi-role
support log (``tools/make_support_log.py``; docs/labels.md has the measured AUCs of each part): the whole-reply
term alone misses rude sentences wrapped around an on-topic answer, the sentence term alone is noisier on short
courtesies ("Of course.").
"""

from __future__ import annotations

import re

import numpy as np

from ._base import Method, MethodResult, _blank, text_column

__all__ = ["ScopeMethod", "reply_sentences", "scope_parts", "scope_score"]

_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def reply_sentences(text: str) -> list[str]:
    """The sentences of ``text``: split after ``.``, ``!`` or ``?`` followed by white space (the whole text when it
    has no such break)."""
    parts = [s.strip() for s in _SENTENCE.split(text or "") if s.strip()]
    return parts or [text]


def scope_parts(encoder, roles: list, users: list, replies: list) -> tuple:
    """``(cos(reply, role), min over sentences of max(cos(sentence, role), cos(sentence, user)))`` per row, as
    float64 arrays; a row without a user message compares its sentences with the role only. Each distinct role is
    encoded once."""
    uniq = {r: i for i, r in enumerate(dict.fromkeys(roles))}
    role_emb = encoder.encode(list(uniq)).float()
    ri = np.array([uniq[r] for r in roles])
    reply_emb = encoder.encode(list(replies)).float()
    has_user = np.array([not _blank(u) for u in users])
    user_emb = encoder.encode([u for u, h in zip(users, has_user) if h]).float() if has_user.any() else None
    sents = [reply_sentences(a) for a in replies]
    owner = np.repeat(np.arange(len(replies)), [len(s) for s in sents])
    sent_emb = encoder.encode([s for ss in sents for s in ss]).float()
    whole = (reply_emb * role_emb[ri]).sum(-1).cpu().numpy().astype(np.float64)
    sent_role = (sent_emb * role_emb[ri[owner]]).sum(-1).cpu().numpy().astype(np.float64)
    sent_best = sent_role.copy()
    if user_emb is not None:
        u_index = np.cumsum(has_user) - 1
        with_user = has_user[owner]
        rows = owner[with_user]
        su = (sent_emb[with_user] * user_emb[u_index[rows]]).sum(-1).cpu().numpy().astype(np.float64)
        sent_best[with_user] = np.maximum(sent_best[with_user], su)
    worst = np.full(len(replies), np.inf)
    np.minimum.at(worst, owner, sent_best)
    return whole, worst


def scope_score(whole: np.ndarray, worst: np.ndarray) -> np.ndarray:
    """The module docs' formula on ``scope_parts``' two arrays."""
    return np.clip(0.5 * whole + 0.5 * worst, 0.0, 1.0)


class ScopeMethod(Method):
    """How close the reply stays to its role and to the user's message (see the module docs); no references."""

    name = "scope"
    # a similarity, not a probability: its best cut was 0.10 on the generated support log and 0.26-0.28 on the
    # persona and paper-style sets (docs/labels.md), so it decides nothing until labels give it a threshold
    default_threshold = None
    needs_ground_truth = False
    needs_reference_texts = False

    def prepare(self, config, resources):
        resources.encoder  # noqa: B018 - loads the encoder once, failing early on a bad model

    def row_errors(self, turns, config):
        out = super().row_errors(turns, config)
        for i, r in enumerate(text_column(turns, "role")):
            if out[i] is None and _blank(r):
                out[i] = (
                    f"no role: method {self.name!r} compares the reply with the role (the system prompt); give a role "
                    "column, a system message, or --role-file"
                )
        return out

    def score(self, turns, config, resources):
        errors = self.row_errors(turns, config)
        ok = np.array([e is None for e in errors], dtype=bool)
        n = turns.num_rows
        score, whole, worst = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
        if ok.any():
            idx = np.flatnonzero(ok)
            a, r, u = (text_column(turns, c) for c in ("assistant", "role", "user"))
            w, s = scope_parts(resources.encoder, [r[i] for i in idx], [u[i] for i in idx], [a[i] for i in idx])
            whole[idx], worst[idx] = w, s
            score[idx] = scope_score(w, s)
        return MethodResult(score, errors, {"role_similarity": whole.tolist(), "worst_sentence": worst.tolist()})
