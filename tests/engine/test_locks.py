"""Locks: never written through a symlink, never held by two processes at once, the sessions output locked too."""

import os
import subprocess
import sys
import textwrap

import pytest

from adherence.data import DataError
from adherence.engine._commit import PathLock
from adherence.engine._executors import EngineError

_HAMMER = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from adherence.engine._executors import EngineError
    from adherence.engine._commit import PathLock
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


@pytest.mark.slow
def test_four_processes_never_hold_the_same_lock(tmp_path):
    lock, inside = tmp_path / ".o.parquet.lock", tmp_path / "inside"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _HAMMER, str(lock), str(inside), "250"], stdout=subprocess.PIPE, text=True
        )
        for _ in range(4)
    ]
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
    code = (
        "import sys; from pathlib import Path; from adherence._atomic import temp_path\n"
        "for a in sys.argv[1:]:\n    p = temp_path(Path(a)); p.write_text('partial'); print(p)"
    )
    made = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            str(out),
            str(tmp_path / "o.sessions.parquet"),
            str(tmp_path / "o.parquet.meta.json"),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    dead = [line for line in made.stdout.splitlines()]
    live = tmp_path / f".o.parquet.{os.getpid()}-0123abcd.tmp"  # a live process's: not ours to touch
    user = tmp_path / ".o.parquet.notes.tmp"  # a user's file of a similar name
    for p in (live, user):
        p.write_text("keep")
    assert all(os.path.exists(p) for p in dead)
    Engine(method="kl", progress=False).run(synthetic(2), out)
    assert not any(os.path.exists(p) for p in dead)
    assert live.read_text() == "keep" and user.read_text() == "keep"


def test_a_work_dir_is_ours_by_its_marker_never_by_file_names(tmp_path, capsys):
    """A user's directory holding an input.parquet and a job.json (the engine's own file names) is never
    cleared or removed, whether it is the job's work dir or holds the job's own input."""
    from adherence.cli.main import main
    from adherence.data import example_path, read_turns, write_table

    e = tmp_path / "E"
    e.mkdir()
    src = write_table(read_turns(example_path("role")), e / "input.parquet")
    (e / "job.json").write_text('{"mine": true}')
    before = {p.name: p.read_bytes() for p in e.iterdir()}
    code = main(
        [
            "score",
            str(src),
            "-o",
            str(tmp_path / "o.parquet"),
            "--method",
            "kl",
            "--work-dir",
            str(e),
            "--no-progress",
            "--bootstrap",
            "0",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "refusing to use or clear it" in err and len(err.strip().splitlines()) == 1
    assert {p.name: p.read_bytes() for p in e.iterdir()} == before and not (tmp_path / "o.parquet").exists()
    # an empty directory the user made is used, emptied again, and kept
    d = tmp_path / "D"
    d.mkdir()
    assert (
        main(
            [
                "score",
                str(example_path("role")),
                "-o",
                str(tmp_path / "o.parquet"),
                "--method",
                "kl",
                "--work-dir",
                str(d),
                "--no-progress",
                "--bootstrap",
                "0",
            ]
        )
        == 0
    )
    assert d.is_dir() and list(d.iterdir()) == []
    # a work dir an adherence job made (kept for resume) is reused, then removed
    w = tmp_path / "W"
    args = [
        "score",
        str(example_path("role")),
        "-o",
        str(tmp_path / "p.parquet"),
        "--method",
        "kl",
        "--work-dir",
        str(w),
        "--no-progress",
        "--bootstrap",
        "0",
    ]
    assert main(args + ["--keep-work-dir"]) == 0 and (w / ".adherence-work.json").exists()
    for q in tmp_path.glob("p*"):
        q.unlink()
    assert main(args + ["--resume"]) == 0 and not w.exists()


def _run_with_midrun(monkeypatch, tmp_path, out, action, *extra):
    """Score with the CLI, running ``action`` after every shard is scored and before the publish."""
    from adherence.cli.main import main
    from adherence.data import example_path
    from adherence.engine import _schedule

    original = _schedule.Scheduler.run

    def execute(self, *a, **k):
        res = original(self, *a, **k)
        action()
        return res

    monkeypatch.setattr(_schedule.Scheduler, "run", execute)
    return main(
        [
            "score",
            str(example_path("role")),
            "-o",
            str(out),
            "--method",
            "kl",
            "--no-progress",
            "--bootstrap",
            "0",
            *extra,
        ]
    )


@pytest.mark.parametrize("where", ["output", "sessions-dir", "metadata"])
def test_what_appears_at_a_target_during_the_run_is_never_replaced(tmp_path, capsys, monkeypatch, where):
    out = tmp_path / "o.parquet"
    target = {
        "output": out,
        "sessions-dir": tmp_path / "o.sessions.parquet",
        "metadata": tmp_path / "o.parquet.meta.json",
    }[where]

    def appear():
        if where == "sessions-dir":
            target.mkdir()
            (target / "mine.txt").write_text("mine")
        else:
            target.write_text("mine")

    assert _run_with_midrun(monkeypatch, tmp_path, out, appear) == 1
    err = capsys.readouterr().err
    assert "changed while the job ran" in err and "nothing was published" in err
    mine = target / "mine.txt" if where == "sessions-dir" else target
    assert mine.read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "o.parquet.work") == sorted({target.name})
    # the scored shards were kept: once the path is free, --resume publishes without scoring again
    (mine.unlink(), target.rmdir()) if where == "sessions-dir" else target.unlink()
    monkeypatch.undo()
    from adherence.cli.main import main
    from adherence.data import example_path

    assert (
        main(
            [
                "score",
                str(example_path("role")),
                "-o",
                str(out),
                "--method",
                "kl",
                "--no-progress",
                "--bootstrap",
                "0",
                "--resume",
            ]
        )
        == 0
    )
    assert "1 resumed" in capsys.readouterr().out


def test_an_output_directory_swapped_for_a_symlink_mid_run_is_not_written_through(tmp_path, capsys, monkeypatch):
    d, elsewhere = tmp_path / "d", tmp_path / "elsewhere"
    d.mkdir()
    elsewhere.mkdir()
    (elsewhere / "o.parquet").write_text("someone else's")

    def swap():
        d.rename(tmp_path / "d_old")
        d.symlink_to(elsewhere)

    assert _run_with_midrun(monkeypatch, tmp_path, d / "o.parquet", swap, "--work-dir", str(tmp_path / "w")) == 1
    assert "changed while the job ran" in capsys.readouterr().err
    assert sorted(p.name for p in elsewhere.iterdir()) == ["o.parquet"]
    assert (elsewhere / "o.parquet").read_text() == "someone else's"


def test_a_users_folder_named_like_a_part_in_a_directory_output_is_kept(tmp_path, capsys):
    from adherence.cli.main import main
    from adherence.data import example_path

    out = tmp_path / "scores"
    args = ["score", str(example_path("role")), "-o", str(out), "--method", "kl", "--no-progress", "--bootstrap", "0"]
    assert main(args) == 0
    mine = out / "part-00007.parquet"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    assert main(args) == 2
    assert "holding files adherence did not write ('part-00007.parquet'" in capsys.readouterr().err
    assert (mine / "notes.txt").read_text() == "mine"
