"""What the viewer's browser tests share: Debian's Chromium (or the one ADHERENCE_CHROMIUM names)."""

import os
import shutil

import pytest


@pytest.fixture(scope="session")
def chromium() -> str:
    """The browser Playwright drives (``executable_path``): its own download does not work offline."""
    found = os.environ.get("ADHERENCE_CHROMIUM") or next(
        (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None
    )
    if not found:
        pytest.fail("the browser tests need Chromium (Debian: apt install chromium; or set ADHERENCE_CHROMIUM)")
    return found
