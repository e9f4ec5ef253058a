"""Under pytest-xdist (``python -m pytest -n 3``), every file with a Ray test runs in one worker, one test after
another and before that worker's other files (several Ray instances at once did more work), and each other file's
tests stay together in one worker, in order. Checked on a small tree run the same way,
with this suite's hook."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("xdist")

_TEST = """
import json, os, pytest

{mark}
def test_{k}():
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    with open(os.path.join(os.environ["SEEN_DIR"], "seen-{name}-{k}.json"), "w") as f:
        json.dump(worker, f)
    with open(os.path.join(os.environ["SEEN_DIR"], f"order-{{worker}}.txt"), "a") as f:
        f.write("{name}\\n")
"""


@pytest.mark.slow
def test_ray_files_share_one_worker_and_other_files_stay_whole(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    repo = str(Path(__file__).resolve().parents[1])
    (tree / "conftest.py").write_text(
        f"import sys\nsys.path.insert(0, {repo!r})\nfrom tests.conftest import pytest_collection_modifyitems, pytest_xdist_make_scheduler  # noqa\n"
    )
    (tree / "pytest.ini").write_text("[pytest]\nmarkers =\n    ray: a Ray test\n    slow: slow\n")
    # the plain files hold more tests than both Ray files together: by xdist's own order (most tests first) they
    # would run before them
    files = {"ray_a": 4, "ray_b": 4, "plain_a": 10, "plain_b": 10, "plain_c": 10}
    for name, n in files.items():
        body = "".join(
            # one Ray test per Ray file: the file's other tests go with it
            textwrap.dedent(_TEST).format(
                mark="@pytest.mark.ray" if name.startswith("ray") and k == 0 else "", k=k, name=name
            )
            for k in range(n)
        )
        (tree / f"test_{name}.py").write_text(body)
    p = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "-q", "-p", "no:cacheprovider",
         str(tree)],
        capture_output=True, text=True, timeout=300, cwd=tree, env={**os.environ, "SEEN_DIR": str(tmp_path)},
    )  # fmt: skip
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    seen = {f.stem[5:]: json.loads(f.read_text()) for f in tmp_path.glob("seen-*.json")}
    assert len(seen) == 38 and all(w in ("gw0", "gw1") for w in seen.values())
    ray_workers = {w for k, w in seen.items() if k.startswith("ray_")}
    assert len(ray_workers) == 1  # both Ray files, all 8 tests, in one worker
    for name, n in files.items():
        assert len({seen[f"{name}-{k}"] for k in range(n)}) == 1, name  # each file whole in one worker
    order = (tmp_path / f"order-{ray_workers.pop()}.txt").read_text().split()
    assert all(name.startswith("ray_") for name in order[:8]), order  # the Ray files first
