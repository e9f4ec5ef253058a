"""Every option a command declares as a file resolves beside a job file that gives it."""

import argparse

from adherence.cli._jobfile import MODEL_OPTIONS, PATH_OPTIONS
from adherence.cli.main import COMMANDS, _parser

FILE_METAVARS = {"FILE", "PATH", "OUT", "DIR", "CAL.json", "SIM"}


def _options():
    out = {}

    def walk(parser):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    walk(sub)
            elif action.option_strings:
                out.setdefault(action.dest, set()).add(action.metavar)

    for name in COMMANDS:
        walk(_parser(name))
    return out


def test_every_option_declared_as_a_file_is_a_path_option_of_job_files():
    options = _options()
    declared_files = {dest for dest, metavars in options.items() if metavars & FILE_METAVARS} - {"config_file"}
    assert "calibration" in declared_files  # the walk sees every command's flags
    assert declared_files <= PATH_OPTIONS | MODEL_OPTIONS, declared_files - PATH_OPTIONS - MODEL_OPTIONS
    # and the lists name no option that no command has
    assert (PATH_OPTIONS | MODEL_OPTIONS) - set(options) <= {"input", "reference", "benchmark"}  # positionals
