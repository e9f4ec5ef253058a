"""The default install's size, from the distributions installed in this environment (their RECORD files): the
closure of setup.py's ``install_requires`` and requirements-nodeps.txt, with and without the ``cpu-encoders``
extra (as the installed package declares it: ONNX Runtime, onnx, and what only they pull in).

    python benchmarks/install_size.py OUT.json
"""

import importlib.metadata as md
import json
import os
import re
import sys
import sysconfig
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _size(dist: md.Distribution, site: str) -> int:
    return sum(os.path.getsize(p) for f in dist.files or [] if os.path.isfile(p := os.path.join(site, str(f))))


def _closure(roots: list) -> dict:
    seen: dict = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        if _key(name) in seen:
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        seen[_key(name)] = dist
        for r in dist.requires or []:
            req = Requirement(r)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return seen


def main(out_path: str) -> None:
    import adherence

    site = sysconfig.get_paths()["purelib"]
    own = md.distribution("adherence")
    core = [Requirement(r).name for r in own.requires or [] if "extra ==" not in r]
    nodeps = [ln.split("==")[0].strip() for ln in (ROOT / "requirements-nodeps.txt").read_text().splitlines()
              if ln.strip() and not ln.startswith("#")]  # fmt: skip
    extra = [Requirement(r).name for r in own.requires or [] if Requirement(r).marker
             and Requirement(r).marker.evaluate({"extra": "cpu-encoders"}) and "extra ==" in r]  # fmt: skip
    now, with_extra = _closure(core + nodeps), _closure(core + nodeps + extra)
    mb = {k: round(_size(d, site) / 2**20, 1) for k, d in with_extra.items()}
    doc = {
        "bench": "install size",
        "adherence": adherence.__version__,
        "how": "sum of the installed files of each distribution (its RECORD), site-packages of this environment",
        "default_install_mb": round(sum(mb[k] for k in now), 1),
        "with_cpu_encoders_mb": round(sum(mb.values()), 1),
        "cpu_encoders_only": {k: mb[k] for k in sorted(set(with_extra) - set(now))},
        "largest": dict(sorted(((k, mb[k]) for k in now), key=lambda kv: -kv[1])[:8]),
        "distributions": len(now),
    }
    Path(out_path).write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main(sys.argv[1])
