"""`mentions`: of the lines the failing tests ran, those spelling a name the issue names, a rarer name first."""

from __future__ import annotations

import gzip
import json

from pinpoint.localization.mentions import MentionsLocalizer, issue_names
from pinpoint.localization.suspects import LocalizationRequest

SOURCE = {
    "app/config.py": "\n".join([
        "def load(path):",  # 1
        "    options = read(path)",  # 2
        "    if options.get('strict_mode'):",  # 3: names strict_mode (rare)
        "        options = validate(options)",  # 4
        "    return options",  # 5: names options (every other line does too)
        "def unused_strict_mode():",  # 6: names strict_mode, but no failing test ran it
    ]),
}
ISSUE = ("Setting `strict_mode` in the options file is ignored: `load()` returns the `options` unvalidated "
         "when strict_mode is on.")


def test_executed_lines_naming_the_issues_names_rank_rarer_names_first_and_unexecuted_lines_never():
    ran = [("app/config.py", n) for n in (1, 2, 3, 4, 5)]
    found = MentionsLocalizer(ran, SOURCE.get).localize(LocalizationRequest(problem_statement=ISSUE))
    lines = [s.start_line for s in found]
    assert lines[0] == 3  # strict_mode (one executed line spells it) and options
    assert 6 not in lines  # the failing tests never ran it
    assert set(lines) == {1, 2, 3, 4, 5}  # load / options: every executed line names one
    assert found[0].score > found[-1].score and "strict_mode" in found[0].evidence
    assert all(s.start_line == s.end_line and s.signal == "mentions" for s in found)


def test_no_names_or_no_executed_lines_give_nothing():
    ran = [("app/config.py", 3)]
    assert MentionsLocalizer(ran, SOURCE.get).localize(LocalizationRequest(problem_statement="")) == []
    assert MentionsLocalizer([], SOURCE.get).localize(LocalizationRequest(problem_statement=ISSUE)) == []
    assert MentionsLocalizer([("gone.py", 3)], SOURCE.get).localize(LocalizationRequest(problem_statement=ISSUE)) == []
    assert "the" not in issue_names("the the the `options` the")  # stop words are not names


def test_a_cached_bench_row_gets_mentions_from_its_records_and_the_offline_repository():
    from pinpoint_lab.localization.localize_bench import dataset_rows, with_mentions
    from pinpoint_lab.paths import results_dir

    path = results_dir() / "localize-loro25/oracle-mbfl-v3/psf__requests-1142.json.gz"
    row = json.loads(gzip.decompress(path.read_bytes()))
    row["signals"].pop("mentions", None)
    instance = dataset_rows({row["instance_id"]})[row["instance_id"]]
    found = with_mentions(row, instance)["signals"]["mentions"]["suspects"]
    records = {(r["path"], r["line"]) for r in row["lines"]}
    assert found and all((s["path"], s["start_line"]) in records for s in found)
    assert row["mentions_from_cache"]
