"""EVAL4SIM: simulated persona corpora against a human reference, dimension by dimension, and E4s.

Every dimension yields a raw score per corpus; a simulation's *similarity* to the
reference penalises deviation in either direction (adherence: span-weighted curve
similarity of the MRR curves; consistency and naturalness: ``1 - |x - ref| / ref``);
*offset* is ``raw - raw_ref``; *rank* orders the simulations by similarity (1 = closest).
E4s is the mean of a corpus's available similarities.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from .._errors import OptionError
from .._options import comma_ints, comma_words, model_name, option
from ..data import skipped_summary
from ..models import encoder_precision_option
from ..stats import curve_similarity
from ._adherence import RETRIEVERS, adherence_curves, default_pool_sizes, get_retriever
from ._consistency import consistency, human_similarity
from ._naturalness import naturalness

__all__ = ["DIMENSIONS", "PersonaConfig", "evaluate_persona"]

DIMENSIONS = ("adherence", "consistency", "naturalness")


@dataclass
class PersonaConfig:
    """Options of an EVAL4SIM run.

    Attributes:
        dimensions: any of ``DIMENSIONS``.
        methods: adherence retrievers to run (curves for each); ``primary`` gives the adherence score.
        alpha: speaker weight, ``w = sin(alpha * pi / 2)``.
        pool_sizes: distractor counts (default: 13 geometric steps over [1, 1000], the top lowered to
            the smallest corpus's conversations - 1 when a corpus is smaller, so every corpus shares the points).
        repeats: random pools per query and pool size.
        max_queries: adherence on a seeded subset of queries per corpus (speed).
        encoder: token/sentence encoder for ``bi_encoder`` and ``late_interaction`` (default bundled MiniLM).
        encoder_precision: ``"bf16"`` or ``"int8"`` runs the ``bi_encoder``'s sentence embeddings on that CPU
            path (``Encoder(precision=...)``); token embeddings stay float32.
        nli_model: local NLI model path; without it naturalness is skipped with a note.
        limit: read only the first ``limit`` conversations of each corpus.
        strict_input: a malformed conversation is an error instead of being skipped with a
            warning (skipped records are counted under ``skipped_records`` in the results).
    """

    dimensions: Sequence[str] = option(
        DIMENSIONS,
        type=comma_words,
        help="comma-separated: adherence, consistency, naturalness (default all)",
    )
    methods: Sequence[str] = option(
        RETRIEVERS,
        type=comma_words,
        help=f"adherence retrievers, comma-separated (default {','.join(RETRIEVERS)})",
    )
    primary: str = option("late_interaction", help="retriever whose curve gives the adherence score")
    alpha: float = option(0.5, help="speaker weight w = sin(alpha*pi/2) (default 0.5)")
    pool_sizes: Optional[Sequence[int]] = option(
        None, type=comma_ints, help="comma-separated distractor counts (default 13 sizes over [1, 1000])"
    )
    repeats: int = option(10, help="random pools per query and size (default 10)")
    seed: int = option(0, help="seed of the random pools and query subsets")
    max_queries: Optional[int] = option(
        None, type=int, help="adherence on a seeded subset of persona queries per corpus"
    )
    encoder: Optional[str] = option(
        None,
        type=model_name,
        help="token/sentence encoder: local path or ColBERT checkpoint (default: bundled all-MiniLM-L6-v2)",
    )
    encoder_precision: str = encoder_precision_option()
    device: Optional[str] = option(None, help="cuda, cpu, ... (default: CUDA when available)", affects_scores=False)
    nli_model: Optional[str] = option(
        None, type=model_name, help="local NLI model for naturalness (skipped without one)"
    )
    nli_batch_size: int = 64
    k_previous: int = 5
    threshold: float = 0.7
    test_size: float = 0.2
    limit: Optional[int] = option(None, type=int, help="read only the first N conversations of each corpus")
    strict_input: bool = option(
        False, help="a malformed conversation is an error (default: skipped with a warning and counted)"
    )
    progress: bool = True

    def __post_init__(self) -> None:
        dims = [d.strip() for d in self.dimensions if d and d.strip()]
        bad = [d for d in dims if d not in DIMENSIONS]
        if bad or not dims:
            raise OptionError(f"`dimensions` must be among {', '.join(DIMENSIONS)}, got {', '.join(bad) or 'none'}")
        self.dimensions = tuple(dict.fromkeys(dims))
        methods = [m.strip() for m in self.methods if m and m.strip()]
        for m in methods:
            if m not in RETRIEVERS:
                get_retriever(m)  # raises with the available names
        if self.primary not in methods:
            methods.append(self.primary)
        self.methods = tuple(dict.fromkeys(methods))
        if not 0.0 <= self.alpha <= 1.0:
            raise OptionError(f"`alpha` must be in [0, 1], got {self.alpha}")
        if self.repeats < 1:
            raise OptionError(f"`repeats` must be >= 1, got {self.repeats}")
        if self.pool_sizes is not None:
            self.pool_sizes = [int(p) for p in self.pool_sizes]
        if self.max_queries is not None and self.max_queries < 2:
            raise OptionError(f"`max_queries` must be >= 2, got {self.max_queries}")


def _load(corpus, limit, strict=False):
    from ..data import PersonaCorpus, read_persona_corpus

    if isinstance(corpus, PersonaCorpus):
        return corpus
    return read_persona_corpus(corpus, limit=limit, strict=strict)


def _names(items: Sequence, given: Optional[Sequence[str]]) -> list[str]:
    if given is not None:
        if len(given) != len(items):
            raise OptionError(f"{len(items)} corpora but {len(given)} names")
        names = [str(n) for n in given]
    else:
        names = [Path(str(x)).stem if isinstance(x, (str, Path)) else f"corpus-{i}" for i, x in enumerate(items)]
    seen: dict = {}
    out = []
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        out.append(n if seen[n] == 1 else f"{n}-{seen[n]}")
    return out


def evaluate_persona(
    reference,
    simulations: Sequence = (),
    *,
    names: Optional[Sequence[str]] = None,
    config: Optional[PersonaConfig] = None,
    **options,
) -> dict:
    """Score a human reference corpus and simulated corpora on the EVAL4SIM dimensions.

    Args:
        reference: the human corpus: a path (PersonaChat txt, Synthetic-Persona-Chat CSV, a
            contract directory) or a ``adherence.data.PersonaCorpus``.
        simulations: simulated corpora, same forms.
        names: display names, reference first (default: file stems).
        config: a ``PersonaConfig``, or its fields as keyword options.

    Returns:
        ``{name: {"role", "adherence", "consistency", "naturalness", "e4s", "e4s_rank"}}`` with the
        reference first; each dimension holds its raw ``score``, ``similarity``, ``offset``, ``rank``
        and its details, or ``{"skipped": reason}``.

    Example::

        from adherence.persona import evaluate_persona
        res = evaluate_persona("human.csv", ["sim_a.csv", "sim_b.csv"], dimensions=["adherence", "consistency"])
        res["sim_a"]["e4s"]
    """
    cfg = config or PersonaConfig(**options)
    corpora = [reference, *simulations]
    labels = _names(corpora, names)
    say = (lambda msg: print(msg, file=sys.stderr, flush=True)) if cfg.progress else (lambda msg: None)
    loaded = [_load(c, cfg.limit, cfg.strict_input) for c in corpora]
    pool_sizes, note = cfg.pool_sizes, None
    if pool_sizes is None and "adherence" in cfg.dimensions:
        smallest = min(len(set(c.conversations.column("conversation_id").to_pylist())) for c in loaded)
        high = min(1000, smallest - 1)
        high = max(high, 2)
        pool_sizes = default_pool_sizes(high=high)
        if high < 1000:
            note = (
                f"pool sizes span D in [1, {high}]: the smallest corpus has {smallest} conversations, "
                "fewer than the 1001 that D = 1000 needs"
            )
            say(f"note: {note}")
    retrievers: dict = {}
    nli = None
    results: dict = {}
    for i, (name, corpus) in enumerate(zip(labels, loaded)):
        res: dict = {
            "role": "reference" if i == 0 else "simulation",
            "n_conversations": len(set(corpus.conversations.column("conversation_id").to_pylist())),
            "n_utterances": corpus.conversations.num_rows,
        }
        if "adherence" in cfg.dimensions:
            t = time.perf_counter()
            say(f"[{name}] adherence: {', '.join(cfg.methods)}")
            if not retrievers:
                retrievers = _retrievers(cfg)
            res["adherence"] = _guard(
                name,
                "adherence",
                say,
                lambda: adherence_curves(
                    corpus,
                    methods=cfg.methods,
                    primary=cfg.primary,
                    alpha=cfg.alpha,
                    pool_sizes=pool_sizes,
                    repeats=cfg.repeats,
                    seed=cfg.seed,
                    max_queries=cfg.max_queries,
                    retrievers=retrievers,
                ),
            )
            if note and "error" not in res["adherence"]:
                res["adherence"]["note"] = note
            res["adherence"]["seconds"] = round(time.perf_counter() - t, 2)
        if "consistency" in cfg.dimensions:
            t = time.perf_counter()
            say(f"[{name}] consistency")
            res["consistency"] = _guard(
                name, "consistency", say, lambda: consistency(corpus, seed=cfg.seed, test_size=cfg.test_size)
            )
            res["consistency"]["seconds"] = round(time.perf_counter() - t, 2)
        if "naturalness" in cfg.dimensions:
            if not cfg.nli_model:
                res["naturalness"] = {
                    "skipped": "no NLI model: pass nli_model=PATH (CLI: --nli-model PATH), a local "
                    "sequence-classification NLI model (a dialogue-NLI one is what the "
                    "method calls for)"
                }
            else:
                t = time.perf_counter()
                say(f"[{name}] naturalness")
                if nli is None:
                    from ..role import NliModel

                    nli = NliModel(cfg.nli_model, device=cfg.device, batch_size=cfg.nli_batch_size)
                res["naturalness"] = _guard(
                    name,
                    "naturalness",
                    say,
                    lambda: naturalness(corpus, nli, k_previous=cfg.k_previous, threshold=cfg.threshold),
                )
                res["naturalness"]["seconds"] = round(time.perf_counter() - t, 2)
        skipped = skipped_summary(corpus.skipped)
        if skipped is not None:
            res["skipped_records"] = skipped
        results[name] = res
    _compare(results, labels[0], cfg)
    return results


def _guard(name: str, dim: str, say, fn) -> dict:
    """A dimension that cannot be computed for one corpus (too small, no personas...) is recorded as
    ``{"error": reason}`` and the run goes on with the other corpora and dimensions."""
    try:
        return fn()
    except ValueError as exc:
        say(f"warning: [{name}] {dim}: {exc}")
        return {"error": f"{name}: {exc}"}


def _retrievers(cfg: PersonaConfig) -> dict:
    """Load each model once for every corpus; the bi-encoder shares the late-interaction encoder's model."""
    li = enc = None
    if "late_interaction" in cfg.methods or "bi_encoder" in cfg.methods:
        from ..index import LateInteractionEncoder

        li = LateInteractionEncoder(
            cfg.encoder, device=cfg.device, progress=cfg.progress, precision=cfg.encoder_precision
        )
        enc = li.encoder
    return {m: get_retriever(m, encoder=enc, li_encoder=li, device=cfg.device) for m in cfg.methods}


def _compare(results: dict, ref_name: str, cfg: PersonaConfig) -> None:
    ref = results[ref_name]
    sims = [n for n in results if n != ref_name]
    for dim in cfg.dimensions:
        r = ref.get(dim, {})
        for name in results:
            d = results[name].get(dim, {})
            if "score" not in d:
                continue
            if "score" not in r:
                d["similarity"] = d["offset"] = d["rank"] = None
                continue
            if name == ref_name:
                d["similarity"], d["offset"], d["rank"] = 1.0, 0.0, None
            elif dim == "adherence":
                for m, curve in d["curves"].items():
                    curve["similarity"] = curve_similarity(r["curves"][m]["mrr"], curve["mrr"], curve["pool_sizes"])
                d["similarity"] = d["curves"][cfg.primary]["similarity"]
            else:
                d["similarity"] = human_similarity(d["score"], r["score"])
            d["offset"] = float(d["score"] - r["score"])
        _rank([results[n].get(dim, {}) for n in sims])
    for res in results.values():
        vals = [
            res[d]["similarity"]
            for d in cfg.dimensions
            if isinstance(res.get(d), dict) and res[d].get("similarity") is not None
        ]
        res["e4s"] = float(sum(vals) / len(vals)) if vals else None
        res["e4s_dimensions"] = [
            d for d in cfg.dimensions if isinstance(res.get(d), dict) and res[d].get("similarity") is not None
        ]
    ranked = [results[n] for n in sims]
    for res in ranked:
        res["e4s_rank"] = (
            None
            if res["e4s"] is None
            else 1 + sum(1 for o in ranked if o["e4s"] is not None and o["e4s"] > res["e4s"] + 1e-12)
        )
    results[ref_name]["e4s_rank"] = None


def _rank(items: list) -> None:
    vals = [d.get("similarity") for d in items]
    for d, v in zip(items, vals):
        if v is not None and not (isinstance(v, float) and math.isnan(v)):
            d["rank"] = 1 + sum(1 for o in vals if o is not None and o > v + 1e-12)
