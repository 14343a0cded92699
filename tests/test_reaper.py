"""Nothing left behind: every command that starts a box says its run id first, and when its driver is interrupted
(Ctrl-C: SIGINT to its process group) or killed (SIGKILL: no cleanup of its own runs) no container of the run is
left 10 s later, through the real CLI and real containers (the pallets__flask-5014 instance image). The one
mechanism under test is environments/reaper.py, started by the first box a process labels.

Also: a process that dies together with its reaper leaves boxes that the next box-starting process on the engine
removes (a resumed `fix`, a node back after a loss); another machine's boxes are left alone; the line naming the
boxes a lost node still holds; a PINPOINT_RUN_ID that is not a run id is one line, not silently replaced."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_llm_server import FakeScriptedLLMServer, delay

INSTANCE = "pallets__flask-5014"
#: what the issue asks: a run's boxes are gone this long after its driver was interrupted or killed
GONE_WITHIN_S = 10.0
CLI = [sys.executable, "-m", "pinpoint.cli"]


def _containers(run_id: str) -> list:
    from pinpoint.environments.engine import client
    from pinpoint.environments.labels import RUN_LABEL

    return client().containers.list(all=True, filters={"label": f"{RUN_LABEL}={run_id}"})


def _wait_for(check, deadline_s: float, what: str) -> None:
    deadline = time.monotonic() + deadline_s
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


@pytest.fixture(scope="module")
def instance_image() -> str:
    """The instance image the CLI runs on (built once when missing)."""
    from pinpoint.swebench_eval.datasets import load_instances
    from pinpoint.swebench_eval.images import build_instance_image

    return build_instance_image(load_instances(ids=[INSTANCE])[0]).tag


class Driver:
    """A pinpoint command in a session of its own, its stderr in a file (a pipe could fill and block it)."""

    def __init__(self, argv: list[str], folder: Path, env: dict[str, str] | None = None) -> None:
        self.err = folder / "stderr.txt"
        folder.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen([*CLI, *argv], cwd=folder, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=self.err.open("w"), env={**os.environ, **(env or {})},
                                     start_new_session=True)

    def run_id(self) -> str:
        """The run id the command says first (its first stderr line)."""
        _wait_for(lambda: "\n" in self.err.read_text() or self.proc.poll() is not None, 120, "no first line")
        first = self.err.read_text().splitlines()[0]
        assert first.startswith("run id: "), self.err.read_text()[-2000:]
        return first.removeprefix("run id: ").strip()

    def wait_for_box(self, run_id: str) -> None:
        _wait_for(lambda: self.proc.poll() is not None or _containers(run_id), 300, "no box of the run appeared")
        assert self.proc.poll() is None, f"the command ended before it could be stopped:\n{self.err.read_text()}"

    def stop(self, how: str) -> None:
        """Ctrl-C as a terminal sends it (to the whole foreground group), or SIGKILL of the driver alone."""
        if how == "sigint":
            os.killpg(self.proc.pid, signal.SIGINT)
        else:
            os.kill(self.proc.pid, signal.SIGKILL)

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # whatever of the command outlived it (Ray's processes)
        self.proc.wait()


def _nothing_left(driver: Driver, how: str, run_id: str) -> None:
    driver.stop(how)
    stopped = time.monotonic()
    _wait_for(lambda: not _containers(run_id), GONE_WITHIN_S + 5,
              f"boxes of run {run_id} left after {how}: {[c.status for c in _containers(run_id)]}")
    took = time.monotonic() - stopped
    assert took <= GONE_WITHIN_S, f"the run's boxes took {took:.1f} s to go after {how}"


@pytest.mark.docker
@pytest.mark.parametrize("how", ["sigint", "sigkill"])
def test_eval_interrupted_or_killed_leaves_no_box(instance_image, tmp_path, how) -> None:
    driver = Driver(["eval", "--gold", "-i", INSTANCE, "-o", str(tmp_path / "runs")], tmp_path / "cwd")
    try:
        run_id = driver.run_id()
        driver.wait_for_box(run_id)
        _nothing_left(driver, how, run_id)
    finally:
        driver.close()


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize("how", ["sigint", "sigkill"])
def test_eval_on_ray_interrupted_or_killed_leaves_no_box(instance_image, tmp_path, how) -> None:
    """The boxes are a Ray worker's (their pinpoint.pid): the worker's own reaper removes them."""
    driver = Driver(["eval", "--gold", "-i", INSTANCE, "--backend", "ray", "-o", str(tmp_path / "runs")],
                    tmp_path / "cwd", env={"RAY_AUTH_MODE": "disabled"})
    try:
        run_id = driver.run_id()
        driver.wait_for_box(run_id)
        assert {c.labels["pinpoint.pid"] for c in _containers(run_id)} != {str(driver.proc.pid)}
        _nothing_left(driver, how, run_id)
    finally:
        driver.close()


def _model_hangs() -> FakeScriptedLLMServer:
    """A FAKE model server whose every call hangs for minutes: the box is up while the command waits."""
    return FakeScriptedLLMServer([delay(600)], default=delay(600))


@pytest.mark.docker
@pytest.mark.parametrize("how", ["sigint", "sigkill"])
def test_batch_interrupted_or_killed_leaves_no_box(instance_image, tmp_path, how) -> None:
    with _model_hangs() as fake:
        driver = Driver(["batch", "-i", INSTANCE, "--base-url", fake.base_url, "--model", "fake", "-o",
                         str(tmp_path / "runs"), "--set", "search.policy=none", "--set", "agent.execution=false"],
                        tmp_path / "cwd")
        try:
            run_id = driver.run_id()
            driver.wait_for_box(run_id)
            _wait_for(lambda: fake.chat_requests or driver.proc.poll() is not None, 300, "no model call")
            _nothing_left(driver, how, run_id)
        finally:
            driver.close()


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize("how", ["sigint", "sigkill"])
def test_rl_rollout_interrupted_or_killed_leaves_no_box(instance_image, tmp_path, how) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"instance_id": INSTANCE}) + "\n")
    out = tmp_path / "episodes.jsonl"
    driver = Driver(["rl", "rollout", "--tasks", str(tasks), "--policy", "scripted-gold", "--samples-per-task", "50",
                     "--concurrency", "2", "--reward", "localization", "--output", str(out)], tmp_path / "cwd")
    try:
        run_id = driver.run_id()
        driver.wait_for_box(run_id)
        _nothing_left(driver, how, run_id)
    finally:
        driver.close()


def _fix_argv(repo: Path, issue: Path, out: Path, base_url: str) -> list[str]:
    return ["fix", str(repo), "--issue", str(issue), "--test-cmd", "python -m pytest -q tests", "--output", str(out),
            "--base-url", base_url, "--set", "search.policy=none", "--set", "agent.execution=false"]


def _reapers_of(pid: int, launchers: bool = False) -> list[int]:
    """The reaper processes watching `pid` (found by their command line); with `launchers`, the `--detach`
    launchers instead, which exit once they have started the reaper itself."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            words = cmdline.read_bytes().split(b"\0")
            if (b"pinpoint.environments.reaper" in words and str(pid).encode() in words
                    and (b"--detach" in words) == launchers):
                found.append(int(cmdline.parent.name))
    return found


@pytest.mark.docker
@pytest.mark.slow
def test_fix_killed_leaves_no_agent_box_and_a_resumed_fix_removes_a_stale_one(tmp_path) -> None:
    from test_fix_own_repo import ISSUE, make_team_repo

    repo = make_team_repo(tmp_path / "team-app")
    issue = tmp_path / "issue.md"
    issue.write_text(ISSUE)
    with _model_hangs() as fake:
        argv = _fix_argv(repo, issue, tmp_path / "out", fake.base_url)
        driver = Driver(argv, tmp_path / "one")
        try:
            run_id = driver.run_id()
            driver.wait_for_box(run_id)
            _nothing_left(driver, "sigkill", run_id)
        finally:
            driver.close()
        # killed together with its reaper (a machine's crash): the box stays until the next run of the command
        driver = Driver(argv, tmp_path / "two")
        try:
            stale_run = driver.run_id()
            driver.wait_for_box(stale_run)
            # the reaper itself, its launcher gone: a launcher killed after it forked would leave a live reaper
            _wait_for(lambda: _reapers_of(driver.proc.pid) and not _reapers_of(driver.proc.pid, launchers=True), 30,
                      "no reaper watches the fix")
            for pid in _reapers_of(driver.proc.pid):
                os.kill(pid, signal.SIGKILL)
            driver.stop("sigkill")
            driver.proc.wait()
            for pid in _reapers_of(driver.proc.pid) + _reapers_of(driver.proc.pid, launchers=True):
                os.kill(pid, signal.SIGKILL)  # one started since (a box of its own) dies with the machine too
            time.sleep(2 * GONE_WITHIN_S / 5)
            assert _containers(stale_run), "the stale box was removed though no reaper was left to remove it"
        finally:
            driver.close()
        resumed = Driver(argv, tmp_path / "three")
        try:
            resumed.wait_for_box(resumed.run_id())
            _wait_for(lambda: not _containers(stale_run), GONE_WITHIN_S, "the resumed fix left the stale box")
        finally:
            resumed.close()


@pytest.mark.docker
def test_a_dead_processs_boxes_go_when_the_next_process_starts_one_but_another_machines_stay(instance_image):
    """The sweep every reaper does first: this user's boxes whose process (on this host) is gone."""
    from pinpoint.environments.engine import client
    from pinpoint.environments.labels import HOST_LABEL, PID_LABEL, container_labels

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = gone.stdout.strip()
    engine = client()
    here = engine.containers.create(instance_image, ["sleep", "600"],
                                    labels={**container_labels(), PID_LABEL: dead_pid})
    elsewhere = engine.containers.create(instance_image, ["sleep", "600"], labels={
        **container_labels(), PID_LABEL: dead_pid, HOST_LABEL: f"not-{socket.gethostname()}"})
    try:
        starter = ("from pinpoint.environments.engine import client; from pinpoint.environments.labels import "
                   f"container_labels; client().containers.create({instance_image!r}, ['true'], "
                   "labels=container_labels())")
        subprocess.run([sys.executable, "-c", starter], check=True)
        ids = lambda: {c.id for c in engine.containers.list(all=True)}  # noqa: E731
        _wait_for(lambda: here.id not in ids(), 30, "the dead process's box was not swept")
        assert elsewhere.id in ids(), "another machine's box was taken for an orphan"
    finally:
        for box in (here, elsewhere):
            with contextlib.suppress(Exception):
                box.remove(force=True)


def test_a_bad_run_id_is_one_line_and_nothing_runs(tmp_path) -> None:
    done = subprocess.run([*CLI, "eval", "--gold", "-i", INSTANCE, "-o", str(tmp_path / "runs")], cwd=tmp_path,
                          capture_output=True, text=True, env={**os.environ, "PINPOINT_RUN_ID": "my-run"})
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0, done.stderr
    assert "PINPOINT_RUN_ID='my-run' is not a run id" in done.stderr
    assert not (tmp_path / "runs").exists()


def test_boxes_a_lost_node_still_holds_are_named_with_the_command_that_removes_them() -> None:
    from pinpoint.environments.executor import unreaped_lines

    lines = unreaped_lines([(("10.0.0.2", "unix:///var/run/docker.sock"), "0123456789ab", 4242),
                            (("10.0.0.2", "unix:///var/run/docker.sock"), "0123456789ab", 4343),
                            (("10.0.0.3", "unix:///srv/e2/docker.sock"), "0123456789ab", 77)])
    assert len(lines) == 2
    assert "node 10.0.0.2" in lines[0] and "4242, 4343" in lines[0]
    assert "`pinpoint env prune --label 0123456789ab`" in lines[0]
    assert "`DOCKER_HOST=unix:///srv/e2/docker.sock pinpoint env prune --label 0123456789ab`" in lines[1]


@pytest.mark.docker
@pytest.mark.slow
def test_eval_on_ray_says_a_row_was_lost_and_graded_again_and_reaps_the_lost_box(instance_image, tmp_path) -> None:
    """The Ray worker grading the row is SIGKILLed (the box's pinpoint.pid): the row is graded again, written
    once, the run says so, and the lost worker's box goes with it."""
    driver = Driver(["eval", "--gold", "-i", INSTANCE, "--backend", "ray", "-o", str(tmp_path / "runs")],
                    tmp_path / "cwd", env={"RAY_AUTH_MODE": "disabled"})
    try:
        run_id = driver.run_id()
        driver.wait_for_box(run_id)
        [box] = _containers(run_id)
        os.kill(int(box.labels["pinpoint.pid"]), signal.SIGKILL)
        assert driver.proc.wait(timeout=600) == 0, driver.err.read_text()[-3000:]
        err = driver.err.read_text()
        assert f"{INSTANCE}: its worker was lost; graded again (2 attempts)" in err
        [summary] = (tmp_path / "runs").glob("*/summary.json")
        assert json.loads(summary.read_text())["resolved_instances"] == 1
        assert not any(c.id == box.id for c in _containers(run_id))
        assert not _containers(run_id)
    finally:
        driver.close()
