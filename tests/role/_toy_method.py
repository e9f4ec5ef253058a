"""A method written as a user would add one: this file and one registry line (``METHODS.register``)."""

import numpy as np

from adherence.role import Method, MethodResult, text_column


class ToyMethod(Method):
    """The share of the reply's words found in its role (no references, no model)."""

    name = "toy"
    needs_ground_truth = False
    needs_reference_texts = False

    def score(self, turns, config, resources):
        replies, roles = text_column(turns, "assistant"), text_column(turns, "role")
        out = []
        for reply, role in zip(replies, roles):
            words = set((reply or "").lower().split())
            out.append(len(words & set((role or "").lower().split())) / len(words) if words else np.nan)
        return MethodResult(np.asarray(out, dtype=np.float64), [None] * len(out))


class NotAMethod:
    """Registered by mistake: the registry refuses to load it."""
