"""The README cannot drift: every `adherence ...` command in it names options that exist, its extras are
setup.py's, and its fast commands run as written."""

import ast
import re
import shlex
from pathlib import Path

import pytest

from adherence.cli.main import _parser, main

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
# The README and the documentation site's pages: every command either shows is checked.
DOCS = README + "\n" + "\n".join(p.read_text(encoding="utf-8") for p in sorted((ROOT / "docs").rglob("*.md")))


def _commands():
    for block in re.findall(r"```[a-z]*\n(.*?)```", DOCS, re.S):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            for part in re.split(r"&&|;", line):
                part = part.split("  #")[0].strip()
                words = part.split()
                if len(words) > 1 and words[0] == "adherence" and not words[1].endswith(":"):
                    yield part


COMMANDS = list(dict.fromkeys(_commands()))


def _leaf(words):
    parser = _parser(words[0]).selected_parser
    path = [words[0]]
    for w in words[1:]:
        subs = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
        if not subs or w not in subs[0].choices:
            break
        parser = subs[0].choices[w]
        path.append(w)
    return path, parser


def test_the_readme_has_commands_to_check():
    assert len(COMMANDS) >= 15
    assert {c.split()[1] for c in COMMANDS} == {
        "score",
        "evaluate",
        "calibrate",
        "estimate",
        "cascade",
        "view",
        "compare",
        "export",
        "audit",
        "persona",
        "bench",
        "classifier",
    }


@pytest.mark.parametrize("command", COMMANDS)
def test_every_readme_option_exists(command):
    words = command.split()[1:]
    path, parser = _leaf(words)
    known = {s for a in parser._actions for s in a.option_strings}
    used = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*|-o|-q)(?![\w-])", command))
    unknown = sorted(used - known)
    assert not unknown, f"README: `adherence {' '.join(path)}` has no {unknown}"


def test_readme_extras_are_setup_py_extras():
    tree = ast.parse((ROOT / "setup.py").read_text())
    extras = next(
        ast.literal_eval(n.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "EXTRAS"
    )
    para = DOCS[DOCS.index("Optional parts are extras:") :]
    para = para[: para.index("\n- ")]
    listed = set(re.findall(r"`\[([a-z-]+)\]`", para))
    assert listed == set(extras)


@pytest.mark.slow
def test_the_readme_main_job_and_its_fast_commands_run(tmp_path, monkeypatch):
    """The set-up command's cosine job and evaluation, the dry run and the role-paper table, verbatim."""
    setup_cmd = next(
        c for c in re.findall(r"```bash\n(pip install -c constraints.txt -e \"\.\[report\]\".*?)\n```", README, re.S)
    )
    setup_cmd = re.sub(r"\\\n\s*", " ", setup_cmd)  # lines continued with a backslash
    parts = [p.strip() for p in setup_cmd.split("&&") if p.strip().startswith("adherence ")]
    fast = [p for p in parts if any(k in p for k in ("--method cosine", "out/cosine.parquet", "scope"))]
    assert len(fast) == 4
    monkeypatch.chdir(ROOT)
    for p in fast:
        args = shlex.split(p)[1:]
        args = [str(tmp_path / a) if a.startswith("out/") else a for a in args]
        assert main(args + ["--no-progress"]) == 0, p
    assert (tmp_path / "out" / "cosine.html").exists() and (tmp_path / "out" / "scope.html").exists()
    role_paper = next(c for c in COMMANDS if c.startswith("adherence bench role-paper"))
    args = shlex.split(re.sub(r"\[[^]]*\]", "", role_paper))[1:]
    assert main(args) == 0
