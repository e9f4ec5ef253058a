from ._text import BM25, TfidfVectorizer, split_sentences, word_tokens
__all__ = ["BM25", "TfidfVectorizer", "split_sentences", "word_tokens"]
