from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
SHARED = REPO.parent / "shared"


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES
