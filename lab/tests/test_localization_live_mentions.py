"""The lab's live `mentions` refresh of cached oracle rows: only rows whose kept line records hit the cap are run
again (under it the records are every line the failing tests ran, so the backfill is the live signal), a row whose
box fails is left as it was and named in one line, and a refreshed row is scored from the live suspects. The rows
are real committed ones; a stand-in (named below) replaces the in-box run, which `live_mentions` does for real."""

from __future__ import annotations

from pathlib import Path

from pinpoint.localization.learned_fusion import MAX_RECORDS
from pinpoint.localization.suspects import Suspect
from pinpoint.swebench_eval.datasets import load_instances
from pinpoint_lab.localization import live_mentions as lm
from pinpoint_lab.localization import localize_bench as bench
from pinpoint_lab.paths import results_dir

COMMITTED = results_dir() / "localize-loro25" / f"oracle-mbfl-v{bench.ROW_VERSION}"
UNDER_CAP, CAPPED, BROKEN = "psf__requests-1142", "psf__requests-1921", "psf__requests-1724"


def as_cached_before(folder: Path, iid: str) -> dict:
    """The committed row as the bench cached it, before any live refresh."""
    row = bench.read_row(COMMITTED / f"{iid}.json.gz")
    row.pop("mentions_live", None)
    row["signals"].pop("mentions", None)
    bench.write_row(folder / f"{iid}.json.gz", row)
    return row


def test_only_capped_rows_are_run_again_and_a_failed_box_leaves_its_row(tmp_path: Path, monkeypatch) -> None:
    before = {i: as_cached_before(tmp_path, i) for i in (UNDER_CAP, CAPPED, BROKEN)}
    assert len(before[UNDER_CAP]["lines"]) < MAX_RECORDS <= min(len(before[i]["lines"]) for i in (CAPPED, BROKEN))
    gold_path, gold_lines = next(iter(before[CAPPED]["gold_lines"].items()))
    ran: list[str] = []

    def stand_in_box(instance, budget_s):  # fake: the real one traces the failing tests in the instance's box
        ran.append(instance.instance_id)
        if instance.instance_id == BROKEN:
            raise RuntimeError("the box died")
        return [Suspect(gold_path, gold_lines[0], gold_lines[0], 9.0, "mentions", "names x from the issue")], 5000

    monkeypatch.setattr(lm, "live_mentions", stand_in_box)
    logged: list[str] = []
    lm.refresh(tmp_path, [UNDER_CAP, CAPPED, BROKEN], 300.0, log=logged.append)
    assert sorted(ran) == sorted([CAPPED, BROKEN])
    assert any(BROKEN in line and "the box died" in line for line in logged)
    assert bench.read_row(tmp_path / f"{BROKEN}.json.gz") == before[BROKEN]
    assert bench.read_row(tmp_path / f"{UNDER_CAP}.json.gz") == before[UNDER_CAP]
    refreshed = bench.read_row(tmp_path / f"{CAPPED}.json.gz")
    assert refreshed["mentions_live"] == 5000
    instance = load_instances(ids=[CAPPED])[0]
    scored = bench.rescored(bench.backfilled(refreshed, instance))
    assert scored["signals"]["mentions"]["line@1"]
    lm.refresh(tmp_path, [CAPPED], 300.0, log=logged.append)  # a second run leaves a live row alone
    assert ran.count(CAPPED) == 1 and logged[-1].endswith("already live")

