"""One-off measurement (not part of the suite), for docs/rl.md "Oracle suspects": what `RepairEnv.reset()` costs on
real SWE-bench rows with `EnvSettings.suspects` off, on for the first time (computed: the failing tests traced,
mutants and switches run) and on again (read from the cache), each reset in a fresh env (so each starts its
container), and whether the listed top 10 holds a gold file and a gold line.

    .venv/bin/python lab/scripts/bench_rl_suspects.py psf__requests-1142 psf__requests-1921 pallets__flask-5014

Point $PINPOINT_CACHE at a folder without `mbfl/`, `predicates/` and `rl-suspects/` for a cold first reset.
"""

from __future__ import annotations

import subprocess
import sys
import time

from pinpoint.agent.config import Config
from pinpoint.rl.env import EnvSettings, RepairEnv
from pinpoint.rl.suspects import LineSuspect, cache_path
from pinpoint.rl.tasks import RlTask
from pinpoint.swebench_eval.datasets import load_instances
from pinpoint.swebench_eval.metrics import gold_locations


def timed_reset(task: RlTask, suspects: str) -> tuple[float, dict]:
    with RepairEnv(EnvSettings(suspects=suspects)) as env:
        started = time.monotonic()
        _, info = env.reset(options={"task": task})
        return time.monotonic() - started, info


def hits(task: RlTask, shown: list[LineSuspect]) -> tuple[bool, bool]:
    """(a gold file among the lines, a gold line among them)."""
    gold = gold_locations(task.gold_patch)
    lines = any(s.path in gold and any(a - 0.5 <= s.line <= b + 0.5 for a, b in gold[s.path]) for s in shown)
    return any(s.path in gold for s in shown), lines


def main(ids: list[str]) -> None:
    print("| row | reset, suspects off (s) | first reset, on (s) | of which suspects (s) | cached reset, on (s) "
          "| gold file in top 10 | gold line in top 10 |")
    print("|---|---|---|---|---|---|---|")
    for instance in load_instances(ids=ids):
        task = RlTask.swebench(instance)
        off, _ = timed_reset(task, "none")
        with RepairEnv() as env:
            cache_path(task, env._box(task).image, Config()).unlink(missing_ok=True)
        first, info = timed_reset(task, "oracle")
        again, cached = timed_reset(task, "oracle")
        assert cached["suspects_cached"] and cached["suspects"] == info["suspects"], "the cache was not used"
        file_hit, line_hit = hits(task, info["suspects"])
        failure = info.get("suspects_failure", "")
        print(f"| {task.task_id} | {off:.1f} | {first:.1f} | {info['suspects_s']:.1f} | {again:.1f} | "
              f"{'yes' if file_hit else 'no'} | {'yes' if line_hit else 'no'}{' ' + failure if failure else ''} |")
    print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main(sys.argv[1:])
