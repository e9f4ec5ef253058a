"""Why `estimate --score calibrated_score` reads the raw score when the labels fitted the calibration: coverage of
the 90% prediction-powered interval over random draws of labelled turns, on the two hand-written logs with on-topic
violations and the generated support log, with scope's label-free score as the judge score.

For each draw: ``n`` turns labelled at random, a calibration map (isotonic and Platt, as `adherence calibrate` fits
them) fitted on those labels, and three estimates of the log's adherent share -- PPI++ on the calibrated score (the
map fitted on the same labels: in-sample), PPI++ on the raw score (what `estimate` now reads), labels only -- each
clustered by conversation. Reported: how often each interval covers the log's true share, and its mean width.
Correctness first: one draw's PPI++ on the raw score is checked against ppi_py's ``ppi_mean_ci`` (without clusters,
where the two define the same interval).

    python benchmarks/calibrated_estimate.py benchmarks/results/2026-12-07-cpu-calibrated-estimate.json
"""

import json
import sys
import time

import numpy as np

from adherence.bench._hardware import cpu_info
from adherence.bench.own_logs import OWN_LOGS, _support, own_log_turns
from adherence.models import Encoder
from adherence.role._scope import scope_parts, scope_score
from adherence.stats import ppi_mean
from adherence.stats._calibration import _fit_map

SIZES = (100, 150)
DRAWS = 300
LEVEL = 0.9


def _check_against_ppi_py(y, s, idx, rest) -> dict:
    from ppi_py import ppi_mean_ci

    ours = ppi_mean(y[idx], s[idx], s[rest], confidence=LEVEL)
    lo, hi = ppi_mean_ci(y[idx].astype(float), s[idx], s[rest], alpha=1 - LEVEL, lam=ours["lam"])
    ok = bool(np.allclose([ours["ci_low"], ours["ci_high"]], [float(np.ravel(lo)[0]), float(np.ravel(hi)[0])],
                          atol=1e-9))  # fmt: skip
    return {"passed": ok, "ours": [ours["ci_low"], ours["ci_high"]], "ppi_py": [float(np.ravel(lo)[0]),
                                                                                float(np.ravel(hi)[0])]}  # fmt: skip


def main(out_path: str) -> int:
    enc = Encoder(progress=False)
    logs = {name: own_log_turns(name) for name in OWN_LOGS}
    logs["support"] = _support()
    result: dict = {
        "bench": "calibrated-estimate",
        "what": __doc__.split("\n\n")[0],
        "score": "scope (label-free), calibrated on the drawn labels",
        "level": LEVEL,
        "draws": DRAWS,
        "logs": {},
    }
    correct = []
    t0 = time.perf_counter()
    for name, (table, y, _kinds) in logs.items():
        a, r, u = (table.column(c).to_pylist() for c in ("assistant", "role", "user"))
        conv = np.asarray([str(c) for c in table.column("conversation_id").to_pylist()])
        s = scope_score(*scope_parts(enc, r, u, a))
        truth = float(y.mean())
        per: dict = {"turns": len(y), "true_share": truth}
        for n in SIZES:
            cover: dict = {k: [] for k in ("isotonic_in_sample", "platt_in_sample", "raw", "labels_only")}
            width: dict = {k: [] for k in cover}
            for d in range(DRAWS):
                rng = np.random.default_rng(20_000 + d)
                idx = np.sort(rng.choice(len(y), size=n, replace=False))
                if len(set(y[idx].tolist())) < 2:
                    continue
                rest = np.setdiff1d(np.arange(len(y)), idx)
                if d == 0 and n == SIZES[0]:
                    correct.append(dict(_check_against_ppi_py(y, s, idx, rest), log=name))
                kw = {"confidence": LEVEL, "clusters_labelled": conv[idx], "clusters_unlabelled": conv[rest]}
                got = {"raw": ppi_mean(y[idx], s[idx], s[rest], **kw)}
                for m in ("isotonic", "platt"):
                    cmap = _fit_map(m, y[idx], s[idx])
                    got[f"{m}_in_sample"] = ppi_mean(y[idx], cmap(s[idx]), cmap(s[rest]), **kw)
                got["labels_only"] = got["raw"]["classical"]
                for k, e in got.items():
                    cover[k].append(e["ci_low"] <= truth <= e["ci_high"])
                    width[k].append(e["ci_high"] - e["ci_low"])
            per[str(n)] = {
                "draws": len(cover["raw"]),
                "coverage": {k: float(np.mean(v)) for k, v in cover.items()},
                "mean_width": {k: float(np.mean(v)) for k, v in width.items()},
            }
        result["logs"][name] = per
    result["seconds"] = round(time.perf_counter() - t0, 1)
    result["correctness"] = correct
    result["correct"] = all(c["passed"] for c in correct)
    result["cpu"] = cpu_info()
    with open(out_path, "w") as fh:
        json.dump(result, fh, indent=1)
    print(json.dumps({k: v for k, v in result["logs"].items()}, indent=1))
    return 0 if result["correct"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
