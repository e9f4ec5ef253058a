"""A job's progress: rows scored within shards as workers go, shards done, rows reused from an earlier run.

On a terminal it is one bar (turns/s and the ETA count only rows scored by this run), redrawn every second;
anywhere else (a scheduler's captured log, ``2>&1 | tee``) it is a plain line every ``every`` seconds and one at
the end, never a carriage-return bar. Both keep their cadence between workers' reports (which come with
checkpoints): a thread of their own draws them, so a long first checkpoint is never a silent minute.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Optional, TextIO

from ._messages import ShardProgress

__all__ = ["JobProgress", "format_duration"]


def format_duration(seconds: float) -> str:
    seconds = int(round(max(0.0, seconds)))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class JobProgress:
    """Progress of one job.

    Args:
        desc: what is done (``scoring (llm_judge)``).
        total: rows of the job.
        shards: shards of the job.
        reused_rows, reused_shards: finished by an earlier run (counted apart, never in the rate).
        enabled: False: nothing is shown.
        every: seconds between lines when the stream is not a terminal.
        stream: where it goes (standard error).
    """

    def __init__(
        self,
        desc: str,
        *,
        total: int,
        shards: int,
        reused_rows: int = 0,
        reused_shards: int = 0,
        enabled: bool = True,
        every: float = 30.0,
        stream: Optional[TextIO] = None,
    ) -> None:
        self.desc, self.total, self.shards = desc, total, shards
        self.reused = reused_rows
        self.shards_done = reused_shards
        self.enabled = enabled
        self.every = every
        self.stream = stream if stream is not None else sys.stderr
        self._within: dict[int, int] = {}  # rows this run scored so far in each unfinished shard
        self._checkpointed: dict[int, int] = {}  # rows of each unfinished shard an earlier try committed
        self._finished: set[int] = set()
        self._scored = 0  # rows this run scored in the shards it finished
        self._start = time.monotonic()
        self._last_line = 0.0
        self._bar = None
        self._lock = threading.RLock()  # reports come from the executor's thread, the cadence from ours
        self._stop = threading.Event()
        self._ticker: Optional[threading.Thread] = None
        if not enabled:
            return
        if _is_terminal(self.stream):
            from tqdm.auto import tqdm

            self._bar = tqdm(
                total=total,
                initial=reused_rows,
                unit="turn",
                desc=desc,
                dynamic_ncols=True,
                file=self.stream,
            )
            self._postfix()
        else:
            self._line()
        self._ticker = threading.Thread(target=self._tick, name="adherence-progress", daemon=True)
        self._ticker.start()

    def _tick(self) -> None:
        """Redraw the bar every second, or write the line once ``every`` seconds pass with no report."""
        while True:
            with self._lock:
                wait = 1.0 if self._bar is not None else max(0.05, self._last_line + self.every - time.monotonic())
            if self._stop.wait(wait):
                return
            with self._lock:
                if not self.enabled or self._stop.is_set():
                    return
                if self._bar is not None:
                    self._bar.refresh()
                elif time.monotonic() - self._last_line >= self.every:
                    self._line()

    # ---------------------------------------------------------------- updates

    def note(self, text: str) -> None:
        """A line of its own (models loading, a warning): above the bar on a terminal."""
        with self._lock:
            if not self.enabled:
                return
            if self._bar is not None:
                self._bar.write(text, file=self.stream)
            else:
                self._write(text)

    def within(self, progress: ShardProgress) -> None:
        """A worker has ``progress.rows`` of its shard done, ``progress.reused`` of them from an earlier try's
        checkpoints."""
        with self._lock:
            self._within_locked(progress.shard_id, progress.rows, progress.reused)

    def _within_locked(self, shard_id: int, rows: int, reused: int) -> None:
        if shard_id in self._finished:
            return  # a late report of a shard already counted
        if shard_id not in self._within:
            self._within[shard_id] = 0
            self._checkpointed[shard_id] = reused
            self.reused += reused
            if self._bar is not None and reused:
                # done, but not by this run: moved without an update, so tqdm's rate and ETA never count them
                self._bar.n += reused
                self._bar.last_print_n += reused
                self._bar.initial += reused
        scored = rows - self._checkpointed[shard_id]
        if scored > self._within[shard_id]:
            n = scored - self._within[shard_id]
            self._within[shard_id] = scored
            self._advance(n)

    def shard_done(self, shard_id: int, rows: int, reused: int = 0) -> None:
        """Shard ``shard_id`` is finished and committed (``rows`` in all, ``reused`` from checkpoints)."""
        with self._lock:
            if shard_id in self._finished:
                return
            self._within_locked(shard_id, rows, reused)
            self._scored += self._within.pop(shard_id)
            self._checkpointed.pop(shard_id)
            self._finished.add(shard_id)
            self.shards_done += 1
            self._advance(0)

    def close(self) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
            self._ticker = None
        with self._lock:
            if not self.enabled:
                return
            if self._bar is not None:
                self._postfix()
                self._bar.close()
                self._bar = None
            else:
                self._line()

    # ---------------------------------------------------------------- reading

    @property
    def scored(self) -> int:
        """Rows this run scored (reused rows left out)."""
        return self._scored + sum(self._within.values())

    @property
    def done(self) -> int:
        """Rows done: reused, and scored by this run."""
        return self.reused + self.scored

    def rate(self) -> float:
        """Turns per second scored by this run."""
        elapsed = time.monotonic() - self._start
        return self.scored / elapsed if elapsed > 0 else 0.0

    def status(self) -> str:
        done, total = self.done, self.total
        pct = 100.0 * done / total if total else 100.0
        rate = self.rate()
        parts = [f"{self.desc}: {done:,}/{total:,} turns ({pct:.1f}%)"]
        if self.reused:
            parts.append(f"{self.reused:,} reused")
        parts.append(f"shards {self.shards_done}/{self.shards} done")
        parts.append(f"{rate:,.1f} turns/s")
        if done < total:
            parts.append(f"ETA {format_duration((total - done) / rate)}" if rate > 0 else "ETA unknown")
        parts.append(f"elapsed {format_duration(time.monotonic() - self._start)}")
        return ", ".join(parts)

    # ---------------------------------------------------------------- output

    def _advance(self, n: int) -> None:
        if not self.enabled:
            return
        if self._bar is not None:
            if n:
                self._bar.update(n)
            self._postfix()
        elif time.monotonic() - self._last_line >= self.every:
            self._line()

    def _postfix(self) -> None:
        extra = f"shards {self.shards_done}/{self.shards}"
        if self.reused:
            extra += f", {self.reused:,} reused"
        assert self._bar is not None
        self._bar.set_postfix_str(extra, refresh=False)

    def _line(self) -> None:
        self._last_line = time.monotonic()
        self._write(self.status())

    def _write(self, text: str) -> None:
        try:
            print(text, file=self.stream, flush=True)
        except (BrokenPipeError, ValueError, OSError):
            self.enabled = False  # nobody reads it any more; the job goes on


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
