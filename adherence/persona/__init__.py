"""EVAL4SIM: persona adherence, consistency and naturalness of simulated conversations vs a human corpus."""

from ._adherence import RETRIEVERS, adherence_curves, build_adherence_data, default_pool_sizes, get_retriever, mrr_curve
from ._consistency import consistency, fit_thresholds, human_similarity, pan_rescale
from ._evaluate import DIMENSIONS, PersonaConfig, evaluate_persona
from ._naturalness import classify_nli, naturalness
from ._text import BM25, TfidfVectorizer, split_sentences, word_tokens

__all__ = [
    "BM25",
    "DIMENSIONS",
    "PersonaConfig",
    "RETRIEVERS",
    "TfidfVectorizer",
    "adherence_curves",
    "build_adherence_data",
    "classify_nli",
    "consistency",
    "default_pool_sizes",
    "evaluate_persona",
    "fit_thresholds",
    "get_retriever",
    "human_similarity",
    "mrr_curve",
    "naturalness",
    "pan_rescale",
    "split_sentences",
    "word_tokens",
]
