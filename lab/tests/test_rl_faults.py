"""A GRPO-style rollout against the real embedded model (its own llama.cpp server process) through the recording
gateway, with one box `docker kill`ed from outside and the model server restarted mid-run; then a second rollout
SIGKILLed mid-run (pinpoint_lab/faults.py, scaled down from `pinpoint-lab bench faults`' 16 tasks x 4)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from pinpoint_lab.faults import FaultPlan, run_faults

pytestmark = [pytest.mark.slow, pytest.mark.docker,
              pytest.mark.skipif(importlib.util.find_spec("xllamacpp") is None, reason="needs xllamacpp")]


def test_a_faulted_rollout_completes_every_group_and_a_killed_driver_leaves_no_box(tmp_path: Path) -> None:
    plan = FaultPlan(tasks=4, samples=2, docker_tasks=2, on_failure="retry", retries=3, concurrency=2)
    figures = run_faults(tmp_path, plan)
    run = figures["faulted"]
    assert run["exit_code"] == 0, run["log_tail"]
    assert run["box_killed"] is not None and run["server_restarted"] is not None
    assert run["episodes"] == 8 and run["groups_complete"] == 4
    # under retry a failure met is retried; whatever still failed after its tries is masked, never lost (a fault
    # can land between requests and be met by no episode: then nothing is retried either)
    assert (run["retried"] + run["masked"] >= 1) == (run["infra_failures_met"] >= 1)
    assert run["rewarded"] + run["masked"] == run["episodes"]
    assert run["containers_left"] == 0
    killed = figures["killed_driver"]
    assert killed["containers_at_kill"] >= 1
    assert killed["containers_left"] == 0
