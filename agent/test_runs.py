"""Test outcomes as the agent handles them: run a test command on the working tree, noting the patch it tested."""

from __future__ import annotations

import dataclasses

from pinpoint.agent.config import Config
from pinpoint.environments.runtime import Runtime
from pinpoint.swebench_eval.metrics import edited_lines
from pinpoint.tools.run_tests import TestRun, hang_bound, run_tests


def run_test_command(runtime: Runtime, command: str, timeout: float) -> TestRun:
    """Run the tests on the working tree, noting the size of the patch they tested (the tie-break between runs)."""
    run = run_tests(runtime, command, timeout)
    run.patch_edited_lines = edited_lines(runtime.diff())["total"]
    return run


def first_run_timeout(config: Config) -> float:
    """The limit of the test command's first run, when nothing is known of how long the suite takes."""
    return min(config.agent.test_timeout_s, config.agent.first_test_timeout_s)


def bounded_by(config: Config, first: TestRun) -> tuple[Config, str | None]:
    """`config` with every later test run bounded by what the first one took (`hang_bound`), and the line that
    says so when the first run hung (None when it finished)."""
    bound = hang_bound(first, config.agent.test_timeout_s)
    agent = dataclasses.replace(config.agent, test_timeout_s=bound)
    note = None
    if first.timed_out:
        note = (f"the tests did not finish in {first.timeout:g} s on HEAD: taken as a hang (a failing test); each "
                f"later run stops after {bound:g} s (raise agent.first_test_timeout_s for a slower suite)")
    return dataclasses.replace(config, agent=agent), note
