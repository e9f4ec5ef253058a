"""transformers' weight-loading bar held off while a model loads, for callers that show their own progress or none."""

from __future__ import annotations

__all__ = ["quiet_loading"]


class quiet_loading:
    """transformers' weight-loading bar off inside the block (restored after, where it was on)."""

    def __enter__(self):
        self._hf = None
        try:
            from transformers.utils import logging as hf_logging
        except ImportError:
            return self
        if hf_logging.is_progress_bar_enabled():
            self._hf = hf_logging
            hf_logging.disable_progress_bar()
        return self

    def __exit__(self, *_) -> None:
        if self._hf is not None:
            self._hf.enable_progress_bar()
