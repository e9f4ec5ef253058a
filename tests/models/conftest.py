"""Fixtures shared by the encoder tests."""

import os

import numpy as np
import pytest


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """A fresh ``$ADHERENCE_CACHE_DIR`` for one test module (exports land there), the old value restored after."""
    path = tmp_path_factory.mktemp("adherence-cache")
    old = os.environ.get("ADHERENCE_CACHE_DIR")
    os.environ["ADHERENCE_CACHE_DIR"] = str(path)
    yield path
    if old is None:
        os.environ.pop("ADHERENCE_CACHE_DIR")
    else:
        os.environ["ADHERENCE_CACHE_DIR"] = old


def cosines_to_float32(exact, fast, texts):
    """Each text's cosine between ``fast``'s embedding and ``exact``'s, after checking ``fast`` returns
    float32 unit rows of the same shape."""
    a = exact.encode(texts).numpy()
    b = fast.encode(texts).numpy()
    assert b.shape == a.shape and b.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(b, axis=1), 1.0, atol=1e-5)
    return (a * b).sum(1), a, b
