"""Under pytest-xdist (``python -m pytest -n 2``), every file with a Ray test runs in one worker, one test after
another (``ray.init()`` joins the machine's latest Ray instance when there is one), and each other file's
tests stay together in one worker, in order. Checked on a small tree run the same way, with this suite's hook."""

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
    with open(os.path.join(os.environ["SEEN_DIR"], "seen-{name}-{k}.json"), "w") as f:
        json.dump(os.environ.get("PYTEST_XDIST_WORKER"), f)
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
    files = {"ray_a": True, "ray_b": True, "plain_a": False, "plain_b": False, "plain_c": False}
    for name, ray in files.items():
        body = "".join(
            # one Ray test per Ray file: the file's other tests go with it
            textwrap.dedent(_TEST).format(mark="@pytest.mark.ray" if ray and k == 0 else "", k=k, name=name)
            for k in range(4)
        )
        (tree / f"test_{name}.py").write_text(body)
    p = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "-q", "-p", "no:cacheprovider",
         str(tree)],
        capture_output=True, text=True, timeout=300, cwd=tree, env={**os.environ, "SEEN_DIR": str(tmp_path)},
    )  # fmt: skip
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    seen = {f.stem[5:]: json.loads(f.read_text()) for f in tmp_path.glob("seen-*.json")}
    assert len(seen) == 20 and all(w in ("gw0", "gw1") for w in seen.values())
    ray_workers = {w for k, w in seen.items() if k.startswith("ray_")}
    assert len(ray_workers) == 1  # both Ray files, all 8 tests, in one worker
    for name in files:
        assert len({seen[f"{name}-{k}"] for k in range(4)}) == 1, name  # each file whole in one worker
