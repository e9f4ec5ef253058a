"""BERTScore: greedy token matching between a turn and its ground truth.

Matches the ``bert-score`` package's definition: token embeddings of one
hidden layer (tokenised with the model's special tokens), cosine similarity,
each candidate token matched to its most similar reference token (precision)
and vice versa (recall), averaged with idf weights (uniform without idf) in
which the CLS and SEP tokens weigh 0; F1 = 2PR / (P + R). Texts are truncated at
the model's token limit (512 for all-MiniLM-L6-v2), as ``bert-score`` does. With idf, the
weights are log((M + 1) / (df + 1)) over the M ground truths of the scored set.
A baseline b rescales F1 to (F1 - b) / (1 - b). The score is F1 clipped to [0, 1].
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import torch

from ._base import Method, MethodResult, dataset_references, text_column

__all__ = ["BertScoreMethod", "bertscore_pairs"]


def _weights(ids: list[int], idf: dict | None, default: float, special: set[int]) -> torch.Tensor:
    w = [0.0 if t in special else (idf.get(t, default) if idf is not None else 1.0) for t in ids]
    return torch.tensor(w, dtype=torch.float32)


def bertscore_pairs(cand_emb, cand_ids, ref_emb, ref_ids, *, idf=None, idf_default=1.0, special=frozenset()):
    """(P, R, F1) arrays for aligned lists of token embeddings and ids."""
    P, R, F = [], [], []
    for ce, ci, re_, ri in zip(cand_emb, cand_ids, ref_emb, ref_ids):
        c = torch.nn.functional.normalize(ce.float(), dim=-1)
        r = torch.nn.functional.normalize(re_.float(), dim=-1)
        sim = c @ r.T
        wc = _weights(ci, idf, idf_default, special).to(sim.device)
        wr = _weights(ri, idf, idf_default, special).to(sim.device)
        p = float((sim.max(dim=1).values * wc).sum() / wc.sum()) if wc.sum() > 0 else 0.0
        rr = float((sim.max(dim=0).values * wr).sum() / wr.sum()) if wr.sum() > 0 else 0.0
        P.append(p)
        R.append(rr)
        F.append(2 * p * rr / (p + rr) if p + rr != 0 else 0.0)
    return np.array(P), np.array(R), np.array(F)


class BertScoreMethod(Method):
    name = "bertscore"

    def uses_dataset_references(self, config):
        return config.bertscore_idf

    def prepare(self, config, resources):
        resources.encoder  # noqa: B018 - load early

    def score(self, turns, config, resources):
        errors = self.row_errors(turns, config)
        ok = np.array([e is None for e in errors])
        n = turns.num_rows
        score = np.full(n, np.nan)
        cols = {k: np.full(n, np.nan) for k in ("precision", "recall", "f1")}
        if ok.any():
            idx = np.flatnonzero(ok)
            a = text_column(turns, "assistant")
            g = text_column(turns, "ground_truth_assistant")
            enc = resources.encoder
            limit = enc.token_limit  # the model's limit, like bert-score (not the 256 sentence-embedding limit)
            ce, ci = enc.encode_tokens([a[i] for i in idx], layer=config.bertscore_layer, max_length=limit)
            re_, ri = enc.encode_tokens([g[i] for i in idx], layer=config.bertscore_layer, max_length=limit)
            tok = enc.tokenizer
            special = {t for t in (tok.cls_token_id, tok.sep_token_id) if t is not None}
            idf, default = None, 1.0
            if config.bertscore_idf:
                refs = dataset_references(turns, config)
                _, ids = enc.encode_tokens(refs, layer=0, max_length=limit)
                df = Counter(t for seq in ids for t in set(seq))
                m = len(refs)
                idf = {t: math.log((m + 1) / (c + 1)) for t, c in df.items()}
                default = math.log(m + 1)
            p, r, f = bertscore_pairs(ce, ci, re_, ri, idf=idf, idf_default=default, special=special)
            b = config.bertscore_baseline
            if b is not None:
                p, r, f = ((v - b) / (1 - b) for v in (p, r, f))
            cols["precision"][idx], cols["recall"][idx], cols["f1"][idx] = p, r, f
            score[idx] = np.clip(f, 0.0, 1.0)
        return MethodResult(score, errors, {k: v.tolist() for k, v in cols.items()})
