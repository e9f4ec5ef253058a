import os
import shutil

# Triton kernels run under the interpreter on machines without a GPU; this must be set before
# triton is first imported.
if not shutil.which("nvidia-smi"):
    os.environ.setdefault("TRITON_INTERPRET", "1")

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
