"""Every option a command declares as a file resolves beside a job file that gives it: path-ness is part of the
option's declaration (``type=file_path`` / ``type=model_name``), never a list kept apart."""

import argparse

from adherence.cli._jobfile import names_a_file
from adherence.cli.main import COMMANDS, _parser

FILE_METAVARS = {"FILE", "PATH", "OUT", "DIR", "CAL.json", "SIM", "JOB.yaml"}
# Flags whose value is a file by their meaning, whatever their metavar.
FILE_FLAGS = {"--output", "--sessions-output", "--work-dir", "--judge-cache", "--html", "--rubric", "--artifacts",
              "--system-prompt", "--reference", "--persona-csv", "--ground-truth", "--calibration"}  # fmt: skip


def _actions():
    out = []

    def walk(parser, where):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{where} {name}")
            elif action.dest not in ("help", "config_file"):
                out.append((where, action))

    for name in COMMANDS:
        walk(_parser(name), "adherence")
    return out


def test_every_option_that_names_a_file_is_declared_as_one():
    actions = _actions()
    looks_like_a_file = [
        (where, a)
        for where, a in actions
        if (a.metavar in FILE_METAVARS or set(a.option_strings) & FILE_FLAGS)
        and not isinstance(a, (argparse._StoreTrueAction, argparse._StoreFalseAction))
    ]
    assert len(looks_like_a_file) >= 30  # the walk sees every command's flags, subcommands included
    missing = [f"{where} {a.option_strings or a.dest}" for where, a in looks_like_a_file if not names_a_file(a)]
    assert not missing, missing
    positionals = {a.dest for _, a in actions if not a.option_strings and names_a_file(a)}
    assert {"input", "reference", "benchmark"} <= positionals


def test_an_option_that_names_no_file_is_not_resolved_as_one():
    counts = [a for where, a in _actions() if "--corpus" in a.option_strings]
    assert counts and not any(names_a_file(a) for a in counts)  # bench maxsim --corpus N is a count
