"""The README's persona consistency table is what this machine computes, digit for digit: the numbers do not
depend on the CPU's instruction set or the thread count."""

import re
from pathlib import Path

import pytest

from adherence.data import example_path, read_persona_corpus
from adherence.persona._consistency import consistency

README = (Path(__file__).resolve().parents[2] / "docs" / "persona.md").read_text(encoding="utf-8")  # the docs' table


def _readme_table() -> dict:
    block = README[README.index("consistency (test split):") :]
    rows = {}
    for line in block.splitlines()[2:]:
        if not line.strip():
            break
        name, *values = line.split()
        rows[name] = [float(v) for v in values]
    return rows


@pytest.mark.slow
def test_readme_consistency_table_is_reproduced():
    table = _readme_table()
    assert set(table) == {"human", "sim_faithful", "sim_persona_drift", "sim_voice_swap"}
    for name, expected in table.items():
        got = consistency(read_persona_corpus(example_path("persona") / f"{name}.csv"))
        assert [round(got[k], 4) for k in ("f1", "auc", "c_at_1", "f05u", "brier", "score")] == pytest.approx(
            expected, abs=1e-12
        ), name


def test_readme_summary_rows_match_the_consistency_table():
    table = _readme_table()
    for name, values in table.items():
        m = re.search(rf"^{name}\s+(?:reference|simulation)\s+adherence.*\n\s+consistency\s+([0-9.]+)", README, re.M)
        assert m and float(m.group(1)) == values[-1], name
