"""Late-interaction index: contiguous fp16 token embeddings, exact MaxSim, FAISS candidate generation."""

from ._encoder import LateInteractionEncoder, TokenBatch, token_windows
from ._index import LateInteractionIndex, SearchResult

__all__ = ["LateInteractionEncoder", "LateInteractionIndex", "SearchResult", "TokenBatch", "token_windows"]
