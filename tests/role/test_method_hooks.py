"""What used to be tested by a method's name outside it is asked of the method: whether it scores through a judge,
and whether its scale depends on the job's turns (a threshold or a cascade stage cannot carry over then)."""

import pytest

from adherence.role import RoleConfig
from adherence.role._base import METHODS, get_method


@pytest.mark.parametrize("name", sorted(METHODS))
def test_every_method_answers_the_hooks(name):
    m = get_method(name)
    assert m.uses_judge == (name == "llm_judge")
    for alpha, expect in (("median", name in ("mahalanobis", "pca_mahalanobis")), (1.0, False)):
        cfg = RoleConfig.__new__(RoleConfig)  # the hook reads the options it needs, nothing else
        object.__setattr__(cfg, "alpha", alpha)
        object.__setattr__(cfg, "method", name)
        assert m.scale_depends_on_job(cfg) == expect


@pytest.mark.slow
def test_a_calibration_is_refused_where_the_scale_depends_on_the_job(tmp_path, capsys):
    from adherence.cli.main import main
    from adherence.data import example_path

    out, cal = tmp_path / "m.parquet", tmp_path / "cal.json"
    assert main(["score", str(example_path("role")), "-o", str(out), "--method", "mahalanobis", "-q"]) == 0
    assert main(["calibrate", str(out), "-o", str(cal), "-q"]) == 0
    capsys.readouterr()
    code = main(["score", str(example_path("role")), "-o", str(tmp_path / "again.parquet"), "--method",
                 "mahalanobis", "--calibration", str(cal)])  # fmt: skip
    assert code == 2 and "needs a fixed --alpha" in capsys.readouterr().err
    assert main(["score", str(example_path("role")), "-o", str(tmp_path / "fixed.parquet"), "--method",
                 "mahalanobis", "--alpha", "1.0", "--calibration", str(cal), "-q"]) == 0  # fmt: skip
