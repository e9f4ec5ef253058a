"""Every subcommand's --help: every option explained, defaults shown, the shared grammar present."""

import argparse

import pytest

from adherence.cli.main import COMMANDS, _parser, main


def _leaves(parser, path):
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
    for a in subs:
        for name, p in a.choices.items():
            yield from _leaves(p, path + [name])


def _all_leaves():
    for name in COMMANDS:
        yield from _leaves(_parser(name).selected_parser, [name])


LEAVES = list(_all_leaves())


@pytest.mark.parametrize("path, parser", LEAVES, ids=[" ".join(p) for p, _ in LEAVES])
def test_every_option_has_help_and_the_common_flags(path, parser, capsys):
    missing = [
        a.option_strings or a.dest
        for a in parser._actions
        if not isinstance(a, (argparse._HelpAction, argparse._VersionAction)) and not (a.help or "").strip()
    ]
    assert not missing, f"`adherence {' '.join(path)}`: options without help text: {missing}"
    flags = {s for a in parser._actions for s in a.option_strings}
    assert {"--no-progress", "--quiet"} <= flags
    with pytest.raises(SystemExit) as exit_:
        main(path + ["--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    for a in parser._actions:  # a default worth knowing is shown
        if a.option_strings and a.default not in (None, False, [], "", argparse.SUPPRESS) and a.help:
            assert "default" in a.help or f"(default: {a.default})" in " ".join(text.split()), (path, a.dest)


def test_judge_commands_share_the_judge_flags():
    judge_flags = {"--judge-model", "--backend", "--base-url", "--api-key", "--concurrency", "--request-timeout"}
    for path, parser in LEAVES:
        if path in (["score"], ["audit", "rubric"], ["audit", "run"]):
            flags = {s for a in parser._actions for s in a.option_strings}
            assert judge_flags <= flags, path
    bench_judge = dict((" ".join(p), q) for p, q in LEAVES)["bench judge"]
    assert {"--judge-model", "--model"} <= {s for a in bench_judge._actions for s in a.option_strings}


def test_quiet_leaves_only_errors_on_stderr(tmp_path, capsys):
    from adherence.data import example_path

    out = tmp_path / "q.parquet"
    assert main(["score", str(example_path("role")), "-o", str(out), "--method", "kl", "--quiet"]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and "28 turns" in captured.out
    assert main(["score", str(tmp_path / "missing.jsonl"), "-o", str(out), "--method", "kl", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("adherence score: error:")
