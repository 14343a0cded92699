"""`pinpoint-lab` holds the benches and trainers, and `pinpoint` none of them."""

from __future__ import annotations

import argparse

from pinpoint.cli import build_parser as product_parser
from pinpoint_lab.cli import build_parser as lab_parser
from pinpoint_lab.cli import main as lab

LAB_BENCHES = {"lines", "diagnostic", "retrieval", "localize", "fusion", "soak", "faults", "inspector", "harness"}


def _group(parser: argparse.ArgumentParser, name: str) -> set[str]:
    """The subcommands of `parser`'s group `name` (empty when there is no such group)."""
    top = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    group = top.choices.get(name)
    if group is None:
        return set()
    return set(next(a for a in group._actions if isinstance(a, argparse._SubParsersAction)).choices)


def test_the_lab_registers_its_benches_and_trainers_and_the_product_none_of_them():
    assert _group(lab_parser(), "bench") >= LAB_BENCHES
    assert _group(lab_parser(), "train") == {"diagnostic", "fusion-data"}
    assert not _group(product_parser(), "bench") & LAB_BENCHES
    assert not _group(product_parser(), "train")


def test_bad_input_is_one_line_and_debug_is_accepted_anywhere(tmp_path, capsys):
    assert lab(["bench", "lines", "--sets", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "nope" in err
    assert lab(["bench", "lines", "--sets", "nope", "--debug"]) == 2
