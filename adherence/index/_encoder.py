"""Token-embedding encoder for late interaction: any Hugging Face encoder, or a ColBERT checkpoint.

Queries and documents are encoded the same way: the last layer's token vectors
(special tokens included), passed through the checkpoint's linear projection when it
has one (a sentence-transformers/PyLate ``1_Dense`` module), then L2-normalised so
a dot product is a cosine. A document longer than the encoder's token limit is cut
into consecutive windows at token boundaries; its token set is the union of its
windows' tokens, so MaxSim over it is the max over its chunks.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

__all__ = ["LateInteractionEncoder", "TokenBatch", "token_windows"]


class TokenBatch:
    """Token embeddings of ``n`` texts stored contiguously: ``embeddings[offsets[i]:offsets[i+1]]`` is text ``i``.

    Attributes:
        embeddings: ``[n_tokens, dim]`` tensor (float16 once stored in an index).
        offsets: ``[n + 1]`` int64 tensor, rising from 0 to ``n_tokens``.
        n_chunks: ``[n]`` int numpy array, windows each text was cut into.
    """

    def __init__(self, embeddings, offsets, n_chunks=None) -> None:
        self.embeddings = embeddings
        self.offsets = offsets
        self.n_chunks = np.ones(len(offsets) - 1, dtype=np.int64) if n_chunks is None else np.asarray(n_chunks)

    def __len__(self) -> int:
        return int(self.offsets.numel() - 1)

    def lengths(self):
        return self.offsets[1:] - self.offsets[:-1]

    @classmethod
    def from_list(cls, tensors: Sequence, dim: int, n_chunks=None, dtype=None) -> TokenBatch:
        import torch

        lens = torch.tensor([len(t) for t in tensors], dtype=torch.int64)
        offsets = torch.zeros(len(tensors) + 1, dtype=torch.int64)
        offsets[1:] = torch.cumsum(lens, 0)
        emb = torch.cat(list(tensors)) if len(tensors) else torch.zeros(0, dim)
        if dtype is not None:
            emb = emb.to(dtype)
        return cls(emb.contiguous(), offsets, n_chunks)


def _dense_layer(path: Path):
    """The checkpoint's projection (``1_Dense``/``2_Dense``... of a sentence-transformers layout), if any."""
    import torch

    for cfg in sorted(path.glob("*_Dense/config.json")):
        conf = json.loads(cfg.read_text())
        layer = torch.nn.Linear(int(conf["in_features"]), int(conf["out_features"]), bias=bool(conf.get("bias", True)))
        weights = cfg.parent / "model.safetensors"
        if weights.exists():
            from safetensors.torch import load_file

            state = load_file(str(weights))
        else:
            state = torch.load(str(cfg.parent / "pytorch_model.bin"), map_location="cpu", weights_only=True)
        layer.load_state_dict({k.split(".", 1)[-1] if k.startswith("linear.") else k: v for k, v in state.items()})
        return layer.eval()
    return None


def _prefixes(path: Path) -> tuple[str, str]:
    cfg = path / "config_sentence_transformers.json"
    if cfg.exists():
        conf = json.loads(cfg.read_text())
        return str(conf.get("query_prefix") or ""), str(conf.get("document_prefix") or "")
    return "", ""


def token_windows(tokenizer, text: str, max_length: int, *, prefix: str = "") -> list[str]:
    """``text`` cut at token boundaries into consecutive pieces of at most ``max_length`` tokens
    once the tokenizer's special tokens and ``prefix`` are added."""
    budget = max_length - tokenizer.num_special_tokens_to_add(pair=False)
    if prefix:
        budget -= len(tokenizer(prefix, add_special_tokens=False)["input_ids"])
    budget = max(budget, 8)
    spans = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)["offset_mapping"]
    if len(spans) <= budget:
        return [text]
    out = []
    for s in range(0, len(spans), budget):
        start = spans[s][0]
        end = spans[s + budget][0] if s + budget < len(spans) else len(text)
        piece = text[start:end].strip()
        if piece:
            out.append(piece)
    return out or [text]


class LateInteractionEncoder:
    """Encode queries and documents into L2-normalised token embeddings.

    Args:
        model: local path (a ColBERT/PyLate checkpoint or any encoder), ``bundled:all-MiniLM-L6-v2``
            (default) or a cached hub id.
        query_prefix: prepended to queries before encoding (default: the checkpoint's
            ``config_sentence_transformers.json``, e.g. PyLate's ``"[Q] "``).
        document_prefix: prepended to documents the same way (e.g. ``"[D] "``).
        encoder_options: the token encoder's (``adherence.models.Encoder``): ``device``, ``dtype``,
            ``batch_size``, ``max_length`` (a window's token limit; default: the checkpoint's
            ``max_seq_length``), ``progress``.

    Example::

        enc = LateInteractionEncoder()
        docs = enc.encode_documents(["a long conversation ...", "another one"])
        len(docs), docs.embeddings.shape      # 2, [n_tokens, 384]
    """

    def __init__(
        self,
        model: Optional[str] = None,
        *,
        query_prefix: Optional[str] = None,
        document_prefix: Optional[str] = None,
        **encoder_options: Any,
    ) -> None:
        from ..models import Encoder

        if encoder_options.get("precision", "float32") == "float32":
            # token embeddings run on torch: no sentence runtime (OpenVINO) to convert and compile
            encoder_options.setdefault("runtime", "torch")
        self.encoder = Encoder(model, **encoder_options)
        path = self.encoder.resolved.path
        self.dense = _dense_layer(path)
        if self.dense is not None:
            self.dense = self.dense.to(self.encoder.device)
        qp, dp = _prefixes(path)
        self.query_prefix = qp if query_prefix is None else query_prefix
        self.document_prefix = dp if document_prefix is None else document_prefix
        self.dim = int(self.dense.out_features if self.dense is not None else self.encoder.dim)
        self.max_length = self.encoder.max_length

    @property
    def name(self) -> str:
        return self.encoder.name

    @property
    def device(self):
        return self.encoder.device

    def describe(self) -> dict:
        return {
            "model": self.name,
            "dim": self.dim,
            "max_length": self.max_length,
            "projection": self.dense is not None,
            "query_prefix": self.query_prefix,
            "document_prefix": self.document_prefix,
        }

    def _project(self, tensors: list) -> list:
        import torch

        out = []
        with torch.inference_mode():
            for t in tensors:
                if self.dense is not None:
                    t = self.dense(t.to(self.dense.weight.dtype))
                out.append(torch.nn.functional.normalize(t.float(), dim=-1))
        return out

    def chunks(self, text: str) -> list[str]:
        """``text`` cut into windows that each fit the encoder's limit (special tokens and prefix included)."""
        return token_windows(self.encoder.tokenizer, text, self.max_length, prefix=self.document_prefix)

    def _encode(self, texts: list[str], prefix: str) -> list:
        embs, _ = self.encoder.encode_tokens([prefix + t for t in texts])
        return self._project(embs)

    def encode_queries(self, texts: Sequence[str]) -> TokenBatch:
        """One token matrix per query (truncated at the encoder's limit, as queries are short)."""
        texts = [t if isinstance(t, str) else "" for t in texts]
        return TokenBatch.from_list([e.cpu() for e in self._encode(texts, self.query_prefix)], self.dim)

    def encode_documents(self, texts: Sequence[str]) -> TokenBatch:
        """One token matrix per document: the union of its windows' tokens (see ``chunks``)."""
        import torch

        texts = [t if isinstance(t, str) else "" for t in texts]
        pieces, owner = [], []
        for i, t in enumerate(texts):
            for c in self.chunks(t) if t.strip() else []:
                pieces.append(c)
                owner.append(i)
        embs = self._encode(pieces, self.document_prefix) if pieces else []
        per_doc: list[list] = [[] for _ in texts]
        for o, e in zip(owner, embs):
            per_doc[o].append(e.cpu())
        n_chunks = np.array([len(p) for p in per_doc], dtype=np.int64)
        mats = [torch.cat(p) if p else torch.zeros(0, self.dim) for p in per_doc]
        return TokenBatch.from_list(mats, self.dim, n_chunks=n_chunks)
