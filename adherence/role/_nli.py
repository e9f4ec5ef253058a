"""NLI method: does the turn contradict its ground truth? Contradiction -> 0, otherwise 1."""

from __future__ import annotations

import numpy as np

from .._errors import OptionError
from ._base import Method, MethodResult, text_column

__all__ = ["NliMethod", "NliModel"]


class NliModel:
    """A sequence-classification NLI model from a local path (premise, hypothesis) -> label probabilities."""

    def __init__(self, path: str, *, device=None, batch_size: int = 32, max_length: int = 512) -> None:
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        from ..models import pick_device, resolve_model

        self.resolved = resolve_model(path)
        self.device = pick_device(device)
        self.tokenizer = AutoTokenizer.from_pretrained(str(self.resolved.path))
        self.model = AutoModelForSequenceClassification.from_pretrained(str(self.resolved.path)).eval().to(self.device)
        labels = {int(k): str(v).lower() for k, v in self.model.config.id2label.items()}
        self.labels = [labels[i] for i in range(len(labels))]
        if not any("contradict" in lab for lab in self.labels):
            raise OptionError(
                f"NLI model {path!r} has no contradiction label (labels: {', '.join(self.labels)}); "
                "pass a model whose config.id2label names entailment/neutral/contradiction"
            )
        self.contradiction = next(i for i, lab in enumerate(self.labels) if "contradict" in lab)
        self.batch_size = batch_size
        self.max_length = max_length
        self._torch = torch

    def probabilities(self, premises: list[str], hypotheses: list[str]) -> np.ndarray:
        torch = self._torch
        out = []
        with torch.inference_mode():
            for s in range(0, len(premises), self.batch_size):
                batch = self.tokenizer(
                    premises[s : s + self.batch_size],
                    hypotheses[s : s + self.batch_size],
                    padding=True,
                    truncation=True,
                    max_length=self.max_length,
                    return_tensors="pt",
                ).to(self.device)
                out.append(torch.softmax(self.model(**batch).logits.float(), dim=-1).cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, len(self.labels)))


class NliMethod(Method):
    name = "nli"

    def prepare(self, config, resources):
        self._model(config, resources)

    def _model(self, config, resources) -> NliModel:
        if not config.nli_model:
            raise OptionError(
                "method 'nli' needs an NLI model: pass nli_model=PATH (CLI: --nli-model PATH) pointing to a local "
                "sequence-classification checkpoint with entailment/neutral/contradiction labels"
            )
        model = getattr(resources, "_nli", None)
        if model is None:
            model = resources._nli = NliModel(
                config.nli_model, device=config.device, batch_size=config.batch_size or 32
            )
        return model

    def score(self, turns, config, resources):
        model = self._model(config, resources)
        errors = self.row_errors(turns, config)
        ok = np.array([e is None for e in errors])
        n = turns.num_rows
        score = np.full(n, np.nan)
        probs = {lab: np.full(n, np.nan) for lab in model.labels}
        if ok.any():
            idx = np.flatnonzero(ok)
            a = text_column(turns, "assistant")
            g = text_column(turns, "ground_truth_assistant")
            p = model.probabilities([g[i] for i in idx], [a[i] for i in idx])
            score[idx] = (p.argmax(axis=1) != model.contradiction).astype(np.float64)
            for j, lab in enumerate(model.labels):
                probs[lab][idx] = p[:, j]
        return MethodResult(score, errors, {f"p_{lab}": v.tolist() for lab, v in probs.items()})
