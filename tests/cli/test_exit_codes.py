"""Exit codes an orchestrator can trust: 130/143 for signals from the first moment, 1 for the job's own
failures, 0 when the output was published before a signal arrived."""

import os
import signal
import subprocess
import sys
import time

import pytest

from adherence.cli.main import Terminated, main
from adherence.data import example_path


def _handler_installed(pid: int, sig: int) -> bool:
    with open(f"/proc/{pid}/status") as fh:
        caught = next(int(line.split()[1], 16) for line in fh if line.startswith("SigCgt:"))
    return bool(caught >> (sig - 1) & 1)


@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_in_the_first_moments_exits_130_or_143_without_a_traceback(tmp_path, sig, code):
    if not os.path.exists("/proc/self/status"):
        pytest.skip("needs /proc to see when the handler is in place")
    cmd = [
        sys.executable,
        "-m",
        "adherence",
        "score",
        str(example_path("role")),
        "-o",
        str(tmp_path / "o.parquet"),
        "--method",
        "cosine",
        "--no-progress",
    ]
    t0 = time.perf_counter()
    # SIGINT as a terminal delivers it: a test run started in the background inherits it ignored (a shell's
    # background job), and a process that inherits SIGINT ignored keeps ignoring it, as Unix tools do.
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    while not _handler_installed(proc.pid, signal.SIGTERM):
        assert proc.poll() is None
        time.sleep(0.001)
    installed = time.perf_counter() - t0
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == code, err
    assert "Traceback" not in err and "nothing partial was published" in err
    assert not (tmp_path / "o.parquet").exists()
    assert installed < 5.0  # the handlers are in before the package's heavy imports (measured ~0.05 s)


def test_a_file_vanishing_mid_job_is_a_job_failure_not_bad_input(tmp_path, capsys, monkeypatch):
    from adherence.engine import _schedule

    def vanish(self, *a, **k):
        raise FileNotFoundError(2, "No such file or directory", str(tmp_path / "gone.parquet"))

    monkeypatch.setattr(_schedule.Scheduler, "run", vanish)
    assert (
        main(["score", str(example_path("role")), "-o", str(tmp_path / "o.parquet"), "--method", "kl", "--no-progress"])
        == 1
    )
    assert "gone.parquet" in capsys.readouterr().err


@pytest.mark.parametrize("exc,word", [(Terminated, "terminated"), (KeyboardInterrupt, "interrupted")])
def test_a_signal_right_after_the_publish_exits_0_and_says_the_output_is_complete(
    tmp_path, capsys, monkeypatch, exc, word
):
    from adherence.engine import _commit

    original = _commit.Publisher.publish

    def publish_then_signal(self):
        original(self)
        raise exc()  # what the held-back signal does the moment the publish unblocks it

    monkeypatch.setattr(_commit.Publisher, "publish", publish_then_signal)
    out = tmp_path / "o.parquet"
    assert (
        main(
            ["score", str(example_path("role")), "-o", str(out), "--method", "kl", "--no-progress", "--bootstrap", "0"]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert f"{word} after the output was published" in err and str(out) in err
    assert out.exists() and (tmp_path / "o.parquet.meta.json").exists()


def test_the_command_line_starts_before_any_heavy_import():
    """`adherence` installs its signal handlers after importing only the command line itself: not pyarrow,
    numpy or the engine (what used to take the first ~0.3 s, during which a signal killed it raw)."""
    code = (
        "import sys, adherence.cli.main\n"
        "print(sorted(m for m in ('pyarrow', 'numpy', 'adherence.data', 'adherence.engine') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize(
    "url,message",
    [
        (
            "ftp://127.0.0.1:1/v1",
            "--base-url must be an http:// or https:// URL with a host, got 'ftp://127.0.0.1:1/v1'",
        ),
        ("http:///v1", "--base-url must be an http:// or https:// URL with a host"),
        ("@EMPTY", "the list of base URLs is empty"),
    ],
)
def test_a_base_url_that_cannot_be_a_server_is_bad_input(tmp_path, capsys, url, message):
    # a bad option is exit 2 in one line before anything runs, not a job failure (exit 1) after it started
    empty = tmp_path / "urls.txt"
    empty.write_text("# none yet\n\n")
    url = url.replace("EMPTY", str(empty))
    out = tmp_path / "x.parquet"
    args = ["score", str(example_path("role")), "-o", str(out), "--backend", "openai", "--judge-model", "m"]
    assert main([*args, "--base-url", url, "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and not out.exists()
    if url.startswith("@"):
        assert str(empty) in err


def test_a_bug_is_exit_1_with_one_line_and_a_debug_hint_not_bad_input(tmp_path, capsys, monkeypatch):
    """A ValueError adherence did not raise as bad input is a bug: exit 1 (2 would tell the orchestrator to
    fix its input), one line naming the cause, and --debug shows the traceback."""
    from adherence.engine import _schedule

    def bug(self, *a, **k):
        raise ValueError("operands could not be broadcast together")  # what a bug in a method looks like

    monkeypatch.setattr(_schedule.Scheduler, "run", bug)
    argv = ["score", str(example_path("role")), "-o", str(tmp_path / "o.parquet"), "--method", "kl", "--no-progress"]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "internal error: ValueError: operands could not be broadcast together" in err and "--debug" in err
    with pytest.raises(ValueError, match="broadcast"):
        main(argv + ["--debug"])


@pytest.mark.parametrize(
    "flags,says",
    [(["--threshold", "1.5"], "`threshold` must be in [0, 1]"), (["--shard-size", "0"], "shard_size")],
)
def test_an_option_out_of_range_is_bad_input(tmp_path, capsys, flags, says):
    argv = ["score", str(example_path("role")), "-o", str(tmp_path / "o.parquet"), "--method", "kl", "--no-progress"]
    assert main(argv + flags) == 2
    err = capsys.readouterr().err
    assert says in err and "internal error" not in err


@pytest.mark.slow
@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupt_with_stderr_piped_to_a_reader_that_is_gone_still_exits_130_or_143(tmp_path, sig, code):
    """`adherence score ... 2>&1 | tee log` and Ctrl-C: tee dies with the same keystroke, so every later write to
    stderr meets a broken pipe. The exit code stays the interrupt's (it was 1, with no message)."""
    from adherence.data import write_table
    from tests.engine.conftest import synthetic_turns

    src = write_table(synthetic_turns(300), tmp_path / "in.parquet")
    out = tmp_path / "o.parquet"
    r, w = os.pipe()
    cmd = [sys.executable, "-m", "adherence", "score", str(src), "-o", str(out), "--method", "cosine",
           "--shard-size", "100"]  # fmt: skip
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=w, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)
    )
    os.close(w)
    os.set_blocking(r, False)
    done = tmp_path / "o.parquet.work" / "out"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and not (done.exists() and any(done.glob("*.done.json"))):
        try:
            os.read(r, 65536)  # the reader (tee) keeps up until it dies
        except BlockingIOError:
            time.sleep(0.02)
    assert proc.poll() is None, "the job ended before it could be interrupted"
    os.close(r)  # tee is gone
    proc.send_signal(sig)
    assert proc.wait(timeout=300) == code
    assert not out.exists()
    assert any(done.glob("*.done.json"))  # the finished shards are kept for --resume
