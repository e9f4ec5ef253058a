"""A late-interaction index: document token embeddings (fp16, contiguous, with offsets) on disk.

Exact MaxSim scores small pools directly (``LateInteractionIndex.score``); for a
query against the whole corpus (``LateInteractionIndex.search``) FAISS finds the
nearest document tokens of every query token, the documents they belong to become
candidates, and exact MaxSim reranks the candidates.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence, Union

import numpy as np

from .._atomic import atomic_path, write_json_atomic
from .._errors import OptionError
from .._optional import require
from ._encoder import LateInteractionEncoder, TokenBatch

if TYPE_CHECKING:
    import torch

__all__ = ["LateInteractionIndex", "SearchResult"]

FORMAT_VERSION = 1


class SearchResult:
    """Top-k documents per query: ``scores`` ``[nq, k]`` float32 and ``indices`` ``[nq, k]`` (-1 = none),
    ``ids`` the matching document ids, ``n_candidates`` ``[nq]`` documents reranked exactly."""

    def __init__(self, scores, indices, ids, n_candidates) -> None:
        self.scores, self.indices, self.ids, self.n_candidates = scores, indices, ids, n_candidates

    def __repr__(self) -> str:
        return f"SearchResult(queries={len(self.scores)}, k={self.scores.shape[1] if len(self.scores) else 0})"


class LateInteractionIndex:
    """Documents' token embeddings for exact MaxSim and FAISS candidate generation.

    Args:
        encoder: a ``LateInteractionEncoder``, a model name/path for one, or ``None``
            (the bundled all-MiniLM-L6-v2). Not needed to score precomputed query tokens.
        device: where scoring runs (default: the encoder's device, else CPU).
        backend: MaxSim implementation, ``"auto"`` (Triton on CUDA, torch otherwise), ``"triton"``, ``"torch"``.

    Example::

        index = LateInteractionIndex()
        index.add(["first conversation ...", "second conversation ..."], ids=["c1", "c2"])
        index.score(["I love hiking."])            # float32 [1, 2] MaxSim scores
        index.search(["I love hiking."], k=1).ids  # [["c1"]]
        index.save("my_index"); LateInteractionIndex.load("my_index")
    """

    def __init__(
        self,
        encoder: Union[None, str, LateInteractionEncoder] = None,
        *,
        device: Optional[str] = None,
        backend: str = "auto",
        _lazy_encoder: bool = False,
    ) -> None:
        import torch

        if backend not in ("auto", "triton", "torch"):
            raise OptionError(f"`backend` must be 'auto', 'triton' or 'torch', got {backend!r}")
        self._encoder_spec = encoder
        self._encoder: Optional[LateInteractionEncoder] = None
        if isinstance(encoder, LateInteractionEncoder):
            self._encoder = encoder
        elif not _lazy_encoder:
            self._encoder = LateInteractionEncoder(encoder)
        self.backend = backend
        from ..models import pick_device

        self.device = torch.device(device) if device else (self._encoder.device if self._encoder else pick_device(None))
        self.embeddings = torch.zeros(0, self._encoder.dim if self._encoder else 0, dtype=torch.float16)
        self.offsets = torch.zeros(1, dtype=torch.int64)
        self.ids: list[str] = []
        self.n_chunks = np.zeros(0, dtype=np.int64)
        self.meta: dict = {"encoder": self._encoder.describe() if self._encoder else None}
        self._faiss: Any = None
        self._on_device: Optional[tuple[torch.Tensor, torch.Tensor]] = None

    # -- building -----------------------------------------------------------------------------
    @property
    def encoder(self) -> LateInteractionEncoder:
        if self._encoder is None:
            given = self._encoder_spec if isinstance(self._encoder_spec, str) else None
            spec = given or (self.meta.get("encoder") or {}).get("model")
            self._encoder = LateInteractionEncoder(spec)
            if self._encoder.dim != self.dim:
                raise OptionError(f"encoder {self._encoder.name!r} has dim {self._encoder.dim}, the index {self.dim}")
        return self._encoder

    @property
    def dim(self) -> int:
        return int(self.embeddings.shape[1])

    def __len__(self) -> int:
        return len(self.ids)

    def add(self, texts: Sequence[str], ids: Optional[Sequence[str]] = None) -> LateInteractionIndex:
        """Encode documents (chunked when long) and append them."""
        texts = list(texts)
        ids = [str(len(self.ids) + i) for i in range(len(texts))] if ids is None else [str(i) for i in ids]
        if len(ids) != len(texts):
            raise OptionError(f"{len(texts)} texts but {len(ids)} ids")
        return self.add_tokens(self.encoder.encode_documents(texts), ids)

    def add_tokens(self, batch: TokenBatch, ids: Sequence[str]) -> LateInteractionIndex:
        """Append precomputed document token embeddings (any float dtype; stored as float16)."""
        import torch

        ids = [str(i) for i in ids]
        if len(ids) != len(batch):
            raise OptionError(f"{len(batch)} documents but {len(ids)} ids")
        if len(self.ids) and batch.embeddings.shape[1] != self.dim:
            raise OptionError(f"document dim {batch.embeddings.shape[1]} != index dim {self.dim}")
        seen = Counter(self.ids)
        seen.update(ids)
        dup = next((i for i in ids if seen[i] > 1), None)
        if dup is not None:
            raise OptionError(f"document id {dup!r} is already in the index")
        emb = batch.embeddings.detach().to("cpu", torch.float16)
        base = int(self.offsets[-1])
        kept = self.embeddings if len(self.ids) else emb.new_zeros(0, emb.shape[1])
        self.embeddings = torch.cat([kept, emb]).contiguous()
        self.offsets = torch.cat([self.offsets, batch.offsets[1:].to(torch.int64) + base])
        self.ids += ids
        self.n_chunks = np.concatenate([self.n_chunks, batch.n_chunks])
        self._faiss = None
        self._on_device = None
        return self

    # -- scoring --------------------------------------------------------------------------------
    def encode_queries(self, queries: Union[Sequence[str], TokenBatch]) -> TokenBatch:
        if isinstance(queries, TokenBatch):
            return queries
        return self.encoder.encode_queries(list(queries))

    def _device_tensors(self):
        if self._on_device is None:
            emb = self.embeddings.to(self.device)
            if self.device.type == "cpu":
                emb = emb.float()  # CPU matmuls are fastest (and exact) in float32
            self._on_device = (emb, self.offsets.to(self.device))
        return self._on_device

    def score(self, queries: Union[Sequence[str], TokenBatch], documents: Optional[Sequence[int]] = None):
        """Exact MaxSim of every query against every document (or the given document indices).

        Returns:
            float32 numpy array ``[n_queries, n_documents]``.
        """
        import torch

        from ..kernels.maxsim import maxsim

        q = self.encode_queries(queries)
        emb, off = self._device_tensors()
        q_emb = q.embeddings.to(self.device, emb.dtype)
        q_off = q.offsets.to(self.device)
        if documents is None:
            return maxsim(q_emb, q_off, emb, off, backend=self.backend).cpu().numpy()
        d = torch.as_tensor(np.asarray(documents, dtype=np.int64), device=self.device)
        nq = len(q)
        qi = torch.arange(nq, device=self.device).repeat_interleave(len(d))
        di = d.repeat(nq)
        return maxsim(q_emb, q_off, emb, off, qi, di, backend=self.backend).view(nq, len(d)).cpu().numpy()

    def score_pairs(self, queries: Union[Sequence[str], TokenBatch], query_index, doc_index):
        """Exact MaxSim for pairs ``(query_index[p], doc_index[p])``; float32 numpy ``[n_pairs]``."""
        import torch

        from ..kernels.maxsim import maxsim

        q = self.encode_queries(queries)
        emb, off = self._device_tensors()
        qi = torch.as_tensor(np.asarray(query_index, dtype=np.int64), device=self.device)
        di = torch.as_tensor(np.asarray(doc_index, dtype=np.int64), device=self.device)
        return (
            maxsim(
                q.embeddings.to(self.device, emb.dtype),
                q.offsets.to(self.device),
                emb,
                off,
                qi,
                di,
                backend=self.backend,
            )
            .cpu()
            .numpy()
        )

    # -- corpus search --------------------------------------------------------------------------
    def build_faiss(self, *, nlist: Optional[int] = None, nprobe: int = 16, use_gpu: Optional[bool] = None):
        """Index every document token in FAISS (inner product; exact ``IndexFlatIP``, or ``IndexIVFFlat``
        with ``nlist`` lists for large corpora). GPU FAISS is used when installed and ``use_gpu`` allows."""
        faiss = require("faiss", "index", "corpus-scale candidate generation")
        vectors = self.embeddings.float().numpy()
        if nlist:
            quantizer = faiss.IndexFlatIP(self.dim)
            index = faiss.IndexIVFFlat(quantizer, self.dim, int(nlist), faiss.METRIC_INNER_PRODUCT)
            index.train(vectors)
            index.nprobe = int(nprobe)
        else:
            index = faiss.IndexFlatIP(self.dim)
        gpus = faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0
        if gpus and use_gpu is not False:
            index = faiss.index_cpu_to_all_gpus(index)
        index.add(vectors)
        self._faiss = index
        self.meta["faiss"] = {
            "type": type(index).__name__,
            "nlist": nlist,
            "nprobe": nprobe if nlist else None,
            "gpus": int(gpus if use_gpu is not False else 0),
        }
        return index

    def search(
        self,
        queries: Union[Sequence[str], TokenBatch],
        k: int = 10,
        *,
        k_tokens: int = 32,
        max_candidates: Optional[int] = None,
    ) -> SearchResult:
        """Top-``k`` documents of the whole index for each query.

        Every query token fetches its ``k_tokens`` nearest document tokens from FAISS; the
        documents owning them are the candidates (the ``max_candidates`` most hit, when
        given), and exact MaxSim ranks the candidates.
        """
        if k < 1 or k_tokens < 1:
            raise OptionError("`k` and `k_tokens` must be >= 1")
        if not len(self):
            raise OptionError("the index is empty")
        q = self.encode_queries(queries)
        faiss_index = self._faiss if self._faiss is not None else self.build_faiss()
        _, tok = faiss_index.search(q.embeddings.float().cpu().numpy(), min(k_tokens, int(self.offsets[-1])))
        owner = np.searchsorted(self.offsets.numpy(), np.where(tok < 0, 0, tok), side="right") - 1
        owner = np.where(tok < 0, -1, owner)
        q_off = q.offsets.numpy()
        scores = np.full((len(q), k), -np.inf, dtype=np.float32)
        indices = np.full((len(q), k), -1, dtype=np.int64)
        n_cand = np.zeros(len(q), dtype=np.int64)
        for i in range(len(q)):
            hits = owner[q_off[i] : q_off[i + 1]].ravel()
            docs, counts = np.unique(hits[hits >= 0], return_counts=True)
            if max_candidates is not None and len(docs) > max_candidates:
                docs = docs[np.argsort(-counts, kind="stable")[:max_candidates]]
            n_cand[i] = len(docs)
            if not len(docs):
                continue
            s = self.score_pairs(_one(q, i), np.zeros(len(docs), dtype=np.int64), docs)
            top = np.argsort(-s, kind="stable")[:k]
            scores[i, : len(top)], indices[i, : len(top)] = s[top], docs[top]
        ids = [[self.ids[j] for j in row if j >= 0] for row in indices]
        return SearchResult(scores, indices, ids, n_cand)

    # -- persistence ----------------------------------------------------------------------------
    def save(self, directory: Union[str, Path]) -> Path:
        """Write ``embeddings.npy`` (float16), ``offsets.npy``, ``ids.json`` and ``meta.json`` (atomically per file)."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        arrays = {
            "embeddings.npy": self.embeddings.numpy(),
            "offsets.npy": self.offsets.numpy(),
            "n_chunks.npy": self.n_chunks,
        }
        for name, arr in arrays.items():
            with atomic_path(d / name) as tmp, open(tmp, "wb") as fh:
                np.save(fh, arr)
        meta = dict(
            self.meta,
            format_version=FORMAT_VERSION,
            n_documents=len(self),
            n_tokens=int(self.offsets[-1]),
            dim=self.dim,
        )
        meta.pop("faiss", None)
        for name, obj in (("ids.json", self.ids), ("meta.json", meta)):
            write_json_atomic(d / name, obj, indent=None if name == "ids.json" else 2)
        return d

    @classmethod
    def load(
        cls,
        directory: Union[str, Path],
        *,
        encoder: Union[None, str, LateInteractionEncoder] = None,
        device: Optional[str] = None,
        backend: str = "auto",
        mmap: bool = True,
    ) -> LateInteractionIndex:
        """Open a saved index; the encoder (the saved one unless given) loads when queries need encoding."""
        import torch

        d = Path(directory)
        missing = [n for n in ("embeddings.npy", "offsets.npy", "ids.json", "meta.json") if not (d / n).exists()]
        if missing:
            raise FileNotFoundError(f"{d}: not a late-interaction index (missing {', '.join(missing)})")
        meta = json.loads((d / "meta.json").read_text())
        if meta.get("format_version") != FORMAT_VERSION:
            raise OptionError(f"{d}: index format {meta.get('format_version')!r}, this version reads {FORMAT_VERSION}")
        index = cls(encoder, device=device, backend=backend, _lazy_encoder=encoder is None)
        emb = np.load(d / "embeddings.npy", mmap_mode="c" if mmap else None)
        index.embeddings = torch.from_numpy(np.ascontiguousarray(emb))
        index.offsets = torch.from_numpy(np.load(d / "offsets.npy")).to(torch.int64)
        index.ids = [str(i) for i in json.loads((d / "ids.json").read_text())]
        nc = d / "n_chunks.npy"
        index.n_chunks = np.load(nc) if nc.exists() else np.ones(len(index.ids), dtype=np.int64)
        index.meta = meta
        if len(index.ids) != index.offsets.numel() - 1 or int(index.offsets[-1]) != index.embeddings.shape[0]:
            raise OptionError(
                f"{d}: ids, offsets and embeddings disagree ({len(index.ids)} ids, "
                f"{index.offsets.numel() - 1} offsets, {index.embeddings.shape[0]} token rows)"
            )
        return index


def _one(batch: TokenBatch, i: int) -> TokenBatch:
    import torch

    a, b = int(batch.offsets[i]), int(batch.offsets[i + 1])
    return TokenBatch(batch.embeddings[a:b], torch.tensor([0, b - a], dtype=torch.int64))
