"""`bench localize`'s row cache on the executor: rows computed at once come back in the instances' order, each is
written by the calling process as it comes back, a failed row is written as an error and computed again on the
next run, and a cached row is never computed again. The rows are real ones the bench committed
(lab/results/localize/oracle-v3), handed back by a stand-in for the in-box computation."""

from __future__ import annotations

import copy
import threading
from pathlib import Path

from pinpoint.environments.executor import LocalExecutor
from pinpoint.swebench_eval.datasets import load_instances
from pinpoint_lab.localization import localize_bench as bench

IDS = ["psf__requests-1142", "psf__requests-1724", "psf__requests-2931"]
COMMITTED = bench.ROWS_DIR / f"oracle-v{bench.ROW_VERSION}"


def test_rows_computed_at_once_come_back_in_order_and_a_failed_one_is_computed_again(tmp_path: Path) -> None:
    real = {i: bench.read_row(COMMITTED / f"{i}.json.gz") for i in IDS}
    instances = load_instances(ids=IDS)
    calls: list[str] = []
    failed: set[str] = set()
    lock = threading.Lock()

    def compute(instance) -> dict:
        with lock:
            calls.append(instance.instance_id)
            fail = instance.instance_id == IDS[1] and instance.instance_id not in failed
            failed.add(instance.instance_id)
        if fail:  # the first time only
            raise RuntimeError("the box died")
        return copy.deepcopy(real[instance.instance_id])

    logged: list[str] = []
    rows = bench.cached_rows(instances, "oracle", tmp_path, compute, log=logged.append, executor=LocalExecutor(2))
    assert [r["instance_id"] for r in rows] == IDS and sorted(calls) == sorted(IDS)
    assert rows[1]["error"] == "RuntimeError: the box died" and "error" not in rows[0]
    assert rows[0]["signals"]["fused"] == real[IDS[0]]["signals"]["fused"] and rows[0]["seconds"] >= 0
    assert sorted(p.name for p in (tmp_path / f"oracle-v{bench.ROW_VERSION}").iterdir()) == [f"{i}.json.gz" for i in IDS]
    assert len(logged) == 3 and any("error: RuntimeError" in line for line in logged)

    calls.clear()
    again = bench.cached_rows(instances, "oracle", tmp_path, compute, log=logged.append, executor=LocalExecutor(2))
    assert calls == [IDS[1]]  # only the failed row ran again
    assert [r["instance_id"] for r in again] == IDS and not any(r.get("error") for r in again)
    assert again[1]["signals"]["fused"] == real[IDS[1]]["signals"]["fused"]
