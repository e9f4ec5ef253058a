"""Embedding methods: cosine, kNN, diagonal Mahalanobis and PCA + Mahalanobis.

All four go through the fused scoring kernel (``adherence.kernels``).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import torch

from .._errors import OptionError
from ..kernels import fused_scores
from ._base import Method, MethodResult, RoleConfig, _blank, dataset_references, text_column

__all__ = ["CosineMethod", "KnnMethod", "MahalanobisMethod", "PcaMahalanobisMethod"]


def _scored_rows(errors: list) -> np.ndarray:
    return np.array([e is None for e in errors], dtype=bool)


class _EncoderMethod(Method):
    def prepare(self, config, resources):
        resources.encoder  # noqa: B018 - loads the encoder once, failing early on a bad model
        if self.uses_dataset_references(config) and config.reference_file:
            self._check_pool(dataset_references(None, config))

    def _check_pool(self, pool: list) -> None:
        if not pool:
            raise OptionError(f"method {self.name!r} needs ground_truth_assistant texts for its reference pool")


class CosineMethod(_EncoderMethod):
    """Cosine similarity of the turn to its ground truth, clipped to [0, 1]."""

    name = "cosine"

    def score(self, turns, config, resources):
        errors = self.row_errors(turns, config)
        ok = _scored_rows(errors)
        score = np.full(turns.num_rows, np.nan)
        if ok.any():
            idx = np.flatnonzero(ok)
            a = text_column(turns, "assistant")
            g = text_column(turns, "ground_truth_assistant")
            enc = resources.encoder
            x = enc.encode([a[i] for i in idx])
            y = enc.encode([g[i] for i in idx])
            cos = fused_scores(x, paired=y)[:, 0].cpu().numpy()
            score[idx] = np.clip(cos, 0.0, 1.0)
        return MethodResult(score, errors)


class KnnMethod(_EncoderMethod):
    """Maximum cosine over references: the turn's own list, or every ground truth of the set."""

    name = "knn"

    def uses_dataset_references(self, config):
        return config.reference_pool == "dataset"

    def has_reference(self, truth, references, config):
        """A ground truth, or with ``reference_pool="per_turn"`` the turn's own list of references."""
        return not _blank(truth) or (config.reference_pool == "per_turn" and bool(references))

    def score(self, turns, config, resources):
        errors = self.row_errors(turns, config)
        a = text_column(turns, "assistant")
        n = turns.num_rows
        if config.reference_pool == "dataset":
            pool = dataset_references(turns, config)
            if not pool:
                raise OptionError("knn with reference_pool='dataset' needs at least one ground_truth_assistant")
            ref_lists = [pool] * n
        else:
            g = text_column(turns, "ground_truth_assistant")
            r = text_column(turns, "references")
            ref_lists = []
            for i in range(n):
                refs = [t for t in (r[i] or []) if not _blank(t)] or ([g[i]] if not _blank(g[i]) else [])
                if not refs and errors[i] is None:
                    errors[i] = "no references and no ground_truth_assistant for knn"
                ref_lists.append(refs)
        ok = _scored_rows(errors)
        score = np.full(n, np.nan)
        if ok.any():
            idx = np.flatnonzero(ok)
            enc = resources.encoder
            x = enc.encode([a[i] for i in idx])
            if config.reference_pool == "dataset":
                refs = enc.encode(ref_lists[0])
                out = fused_scores(x, refs=refs)[:, 1]
            else:
                flat: list[str] = []
                starts: list[int] = []
                ends: list[int] = []
                for i in idx.tolist():
                    starts.append(len(flat))
                    flat.extend(ref_lists[i])
                    ends.append(len(flat))
                refs = enc.encode(flat)
                out = fused_scores(
                    x,
                    refs=refs,
                    ref_start=torch.tensor(starts, device=x.device),
                    ref_end=torch.tensor(ends, device=x.device),
                )[:, 1]
            score[idx] = np.clip(out.cpu().numpy(), 0.0, 1.0)
        return MethodResult(score, errors, {"n_references": [len(r) for r in ref_lists]})


def _alpha(config: RoleConfig, distances: np.ndarray) -> float:
    if config.alpha != "median":
        return float(config.alpha)
    finite = distances[np.isfinite(distances)]
    med = float(np.median(finite)) if len(finite) else 0.0
    return 1.0 / med if med > 0 else 1.0


class MahalanobisMethod(_EncoderMethod):
    """exp(-alpha * D), D the diagonal-covariance Mahalanobis distance to the reference embeddings.

    The references are the ground truths of the scored set; their per-dimension
    variance (ddof = 1) plus ``lam`` forms the diagonal covariance.
    """

    name = "mahalanobis"
    # Distances are to the reference distribution, so a row needs only its own turn.
    needs_ground_truth = False

    def uses_dataset_references(self, config):
        return True

    def scale_depends_on_job(self, config):
        return config.alpha == "median"  # 1 / the median distance over the job's turns

    def job_rescaler(self, config, column):
        """With ``alpha="median"`` the scale is 1 / the median distance over the whole job, not over one shard:
        every shard's scores and predictions are made again from its distances."""
        if config.alpha != "median":
            return None
        col = f"{self.name}_distance"
        alpha = _alpha(config, column(col).astype(np.float64))

        def apply(t: pa.Table) -> pa.Table:
            dist = t.column(col).to_numpy(zero_copy_only=False).astype(np.float64)
            ok = np.array([s == "ok" for s in t.column("status").to_pylist()])
            score = np.exp(-alpha * dist)
            new_score = pa.array([float(v) if k else None for v, k in zip(score, ok)], pa.float64())
            pred = pa.array([int(v >= config.threshold) if k else None for v, k in zip(score, ok)], pa.int8())
            t = t.set_column(t.column_names.index("score"), "score", new_score)
            return t.set_column(t.column_names.index("prediction"), "prediction", pred)

        return apply

    def _check_pool(self, pool: list) -> None:
        if len(pool) < 2:
            raise OptionError(
                f"method {self.name!r} needs at least 2 reference texts (ground truths) to estimate a covariance; "
                f"found {len(pool)}"
            )

    def _reference_embeddings(self, turns, config, resources) -> torch.Tensor:
        pool = dataset_references(turns, config)
        if len(pool) < 2:
            raise OptionError(
                f"method {self.name!r} needs at least 2 reference texts (ground truths) to estimate a covariance; "
                f"found {len(pool)}"
            )
        return resources.encoder.encode(pool)

    def _project(self, x: torch.Tensor, refs: torch.Tensor, config: RoleConfig):
        mu = refs.mean(dim=0)
        var = refs.var(dim=0, unbiased=True)
        return x, mu, 1.0 / (var + config.lam)

    def score(self, turns, config, resources):
        errors = self.row_errors(turns, config)
        ok = _scored_rows(errors)
        refs = self._reference_embeddings(turns, config, resources)
        score = np.full(turns.num_rows, np.nan)
        dist = np.full(turns.num_rows, np.nan)
        if ok.any():
            idx = np.flatnonzero(ok)
            a = text_column(turns, "assistant")
            x = resources.encoder.encode([a[i] for i in idx])
            xp, mu, inv_var = self._project(x, refs, config)
            d = fused_scores(xp.contiguous(), mu=mu, inv_var=inv_var)[:, 2].cpu().numpy().astype(np.float64)
            dist[idx] = d
            score[idx] = np.exp(-_alpha(config, d) * d)
        return MethodResult(score, errors, {"distance": dist.tolist()})


class PcaMahalanobisMethod(MahalanobisMethod):
    """PCA to ``min(pca_components, n_refs - 1)`` components fitted on the references, then Mahalanobis."""

    name = "pca_mahalanobis"

    def _project(self, x, refs, config):
        n = refs.shape[0]
        k = min(config.pca_components, n - 1)
        mu = refs.mean(dim=0)
        centred = (refs - mu).double()
        _, s, vt = torch.linalg.svd(centred, full_matrices=False)
        comps = vt[:k].to(x.dtype)
        var = (s[:k] ** 2 / (n - 1)).to(x.dtype)
        xp = (x - mu) @ comps.T
        return xp, torch.zeros(k, dtype=x.dtype, device=x.device), 1.0 / (var + config.lam)
