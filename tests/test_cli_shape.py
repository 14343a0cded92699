"""The shape of the `pinpoint` command line, read from its real argparse tree: a dozen commands, one name per idea,
examples in every --help, and a bug that is one line (its traceback only with --debug)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pinpoint.cli import build_parser

#: names that once meant "results root" or "these instances" beside the one name each now has
FORBIDDEN = {"--runs-dir", "--out", "--ids", "--instances", "--repos-dir", "--redo-existing", "--no-progress"}
#: the benchmarks a user runs to check their own setup; they are not counted with the product's commands
SETUP_CHECKS = "bench"


def _children(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return {name: child for action in parser._actions if isinstance(action, argparse._SubParsersAction)
            for name, child in action.choices.items()}


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(path, parser) of every command and group under `parser`."""
    for name, child in _children(parser).items():
        yield (*path, name), child
        yield from _commands(child, (*path, name))


def _flags(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings
            and not isinstance(a, (argparse._HelpAction, argparse._VersionAction))]


ROOT = build_parser()
COMMANDS = list(_commands(ROOT))


def test_at_most_twelve_commands_none_of_them_an_old_name():
    top = [action for action in ROOT._actions if isinstance(action, argparse._SubParsersAction)][0]
    assert len(top.choices) <= 12, sorted(top.choices)
    for path, parser in COMMANDS:
        text = " ".join(filter(None, [parser.description, parser.epilog]))
        text += " ".join(str(choice.help) for choice in top._choices_actions)
        for action in parser._actions:
            text += str(action.help or "")
        assert "old name" not in text.lower() and "deprecated" not in text.lower(), path


def test_the_product_commands_have_at_most_150_flags():
    product = [p for path, p in COMMANDS if path[0] != SETUP_CHECKS]
    count = sum(len(_flags(p)) for p in [ROOT, *product])
    assert 0 < count <= 150, count


def test_one_name_per_idea():
    for path, parser in COMMANDS:
        for action in _flags(parser):
            names = set(action.option_strings)
            assert not names & FORBIDDEN, (path, names)
            if "--json" in names:  # a switch everywhere: JSON on stdout, never a file to write
                assert isinstance(action, argparse._StoreTrueAction), path
            if "--output" in names:
                assert action.option_strings == ["-o", "--output"], path
            if "--instance" in names:  # the one selector: repeatable, and one flag may take several ids
                assert action.option_strings == ["-i", "--instance"] and isinstance(action, argparse._ExtendAction)
            if "--workers" in names:
                assert action.option_strings == ["-j", "--workers"], path
            if "--tasks" in names:  # a file of tasks, never a list of ids
                assert action.nargs is None and action.metavar == "FILE", path
            if "--set" in names:
                assert action.help and "SECTION.FIELD" in str(action.metavar), path
            if "--backend" in names:  # where the work runs, the same two values everywhere
                assert set(action.choices) == {"local", "ray"}, path


def test_every_command_says_what_it_does_and_shows_an_example():
    for path, parser in COMMANDS:
        assert parser.description, path
        assert parser.epilog and "examples:" in parser.epilog, path
        examples = parser.epilog.split("examples:", 1)[1]
        assert f"pinpoint {' '.join(path)}" in examples, (path, examples)
        assert isinstance(parser.formatter_class, type)
        assert issubclass(parser.formatter_class, argparse.RawDescriptionHelpFormatter), path


def test_rollout_says_where_it_runs_and_how_it_talks_to_the_model_with_two_flags():
    args = ROOT.parse_args(["rl", "rollout", "--tasks", "t.jsonl", "--policy", "embedded", "-o", "o.jsonl",
                            "--backend", "ray", "--model-backend", "vllm", "-j", "2"])
    assert (args.backend, args.model_backend, args.workers) == ("ray", "vllm", 2)
    with pytest.raises(SystemExit):
        ROOT.parse_args(["rl", "rollout", "--tasks", "t.jsonl", "--policy", "embedded", "-o", "o.jsonl",
                         "--backend", "vllm"])


def test_instance_selector_is_repeatable_and_takes_several_ids():
    args = ROOT.parse_args(["batch", "-i", "a__b-1", "c__d-2", "--instance", "e__f-3"])
    assert args.instances == ["a__b-1", "c__d-2", "e__f-3"]


BUG = """\
import sys
from pinpoint import cli
from pinpoint.agent import commands

def broken(args):
    raise KeyError("an injected bug")

commands._cmd_show = broken
sys.exit(cli.main(sys.argv[1:]))
"""


def _pinpoint_with_a_bug(*argv: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """`pinpoint show ...` whose command raises an unexpected KeyError (the bug is injected before the parser is
    built), run as a user runs it: its own process, stderr as they see it."""
    script = tmp_path / "buggy_pinpoint.py"
    script.write_text(BUG)
    return subprocess.run([sys.executable, str(script), *argv], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "120"})


def test_an_unexpected_error_is_one_line_and_debug_shows_the_traceback(tmp_path):
    quiet = _pinpoint_with_a_bug("show", "x.json", tmp_path=tmp_path)
    assert quiet.returncode == 1
    assert quiet.stderr.strip().splitlines() == [
        "pinpoint show: unexpected error: KeyError: 'an injected bug' (rerun with --debug for the traceback)"]
    for argv in (("--debug", "show", "x.json"), ("show", "x.json", "--debug")):
        loud = _pinpoint_with_a_bug(*argv, tmp_path=tmp_path)
        assert loud.returncode == 1
        assert "Traceback (most recent call last)" in loud.stderr and "in broken" in loud.stderr, loud.stderr
        assert "KeyError: 'an injected bug'" in loud.stderr


def test_an_expected_error_stays_one_line_and_exit_2(tmp_path, capsys):
    from pinpoint.cli import main

    assert main(["show", str(tmp_path / "missing.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("pinpoint show: cannot read trajectory"), err


def test_a_plain_value_error_from_a_bug_is_not_passed_off_as_bad_input(tmp_path, monkeypatch, capsys):
    from pinpoint import cli
    from pinpoint.agent import trajectory

    def broken(path):
        raise ValueError("a bug deep inside")

    monkeypatch.setattr(trajectory, "load_trajectory", broken)
    assert cli.main(["show", str(tmp_path / "t.json")]) == 1
    err = capsys.readouterr().err
    assert "unexpected error: ValueError: a bug deep inside (rerun with --debug" in err
