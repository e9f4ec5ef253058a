"""Locks: never written through a symlink, never held by two processes at once, the sessions output locked too."""

import os
import subprocess
import sys
import textwrap

import pytest

from adherence.data import DataError
from adherence.engine._executors import EngineError
from adherence.engine._safety import PathLock

_HAMMER = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from adherence.engine._executors import EngineError
    from adherence.engine._safety import PathLock
    lock_path, inside, n = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    held = overlaps = 0
    while held < n:
        try:
            lock = PathLock(lock_path, "the output").acquire()
        except EngineError:
            continue
        try:
            fd = os.open(inside, os.O_CREAT | os.O_EXCL | os.O_WRONLY)  # fails if another holder is inside
            os.close(fd)
        except FileExistsError:
            overlaps += 1
        else:
            time.sleep(0.0005)
            os.unlink(inside)
        lock.release()
        held += 1
    print(overlaps)
""")


def test_four_processes_never_hold_the_same_lock(tmp_path):
    lock, inside = tmp_path / ".o.parquet.lock", tmp_path / "inside"
    procs = [subprocess.Popen([sys.executable, "-c", _HAMMER, str(lock), str(inside), "250"], stdout=subprocess.PIPE,
                              text=True) for _ in range(4)]
    overlaps = [int(p.communicate(timeout=600)[0].strip()) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert overlaps == [0, 0, 0, 0]  # 1,000 acquisitions, never two holders at once
    assert not lock.exists()


def test_a_symlinked_lock_file_is_refused_and_its_target_untouched(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    (tmp_path / "t").mkdir()
    link = tmp_path / "t" / ".out.parquet.lock"
    link.symlink_to(notes)
    with pytest.raises(DataError, match="symbolic link; refusing to follow it"):
        PathLock(link, "the output").acquire()
    assert notes.read_text() == "my notes\n" and link.is_symlink()
    fifo = tmp_path / "t" / ".fifo.lock"
    os.mkfifo(fifo)
    with pytest.raises(DataError, match="not a regular file"):
        PathLock(fifo, "the output").acquire()


def test_a_lock_removed_and_recreated_under_a_holder_is_not_shared(tmp_path):
    path = tmp_path / ".o.lock"
    a = PathLock(path, "the output").acquire()
    with pytest.raises(EngineError, match="in use by another adherence job"):
        PathLock(path, "the output").acquire()
    a.release()
    b = PathLock(path, "the output").acquire()  # free again once released
    b.release()
    assert not path.exists()


def test_the_sessions_output_is_locked_too(tmp_path, synthetic):
    from adherence.engine import Engine

    b = tmp_path / "b"
    # another job is writing b/a.sessions.parquet as its turn output: it holds that path's lock
    other = PathLock(b / ".a.sessions.parquet.lock", "the output").acquire()
    try:
        with pytest.raises(EngineError, match="the sessions output .* is in use by another adherence job"):
            Engine(method="kl", progress=False).run(synthetic(2), b / "a.parquet")
        assert not (b / "a.parquet").exists() and not (b / "a.sessions.parquet").exists()
    finally:
        other.release()
    Engine(method="kl", progress=False).run(synthetic(2), b / "a.parquet")
    assert (b / "a.sessions.parquet").exists() and not list(b.glob(".*.lock"))


def test_temporaries_of_a_dead_job_are_removed_by_the_next_run_and_nothing_else(tmp_path, synthetic):
    from adherence.engine import Engine

    out = tmp_path / "o.parquet"
    # a job that died mid-publish: its temporaries, named by the engine, its process gone
    code = ("import sys; from pathlib import Path; from adherence.engine._plan import temp_path\n"
            "for a in sys.argv[1:]:\n    p = temp_path(Path(a)); p.write_text('partial'); print(p)")
    made = subprocess.run([sys.executable, "-c", code, str(out), str(tmp_path / "o.sessions.parquet"),
                           str(tmp_path / "o.parquet.meta.json")], capture_output=True, text=True, check=True)
    dead = [line for line in made.stdout.splitlines()]
    live = tmp_path / f".o.parquet.{os.getpid()}-0123abcd.tmp"  # a live process's: not ours to touch
    user = tmp_path / ".o.parquet.notes.tmp"  # a user's file of a similar name
    for p in (live, user):
        p.write_text("keep")
    assert all(os.path.exists(p) for p in dead)
    Engine(method="kl", progress=False).run(synthetic(2), out)
    assert not any(os.path.exists(p) for p in dead)
    assert live.read_text() == "keep" and user.read_text() == "keep"
