"""The Ray backend on a real local Ray instance: `batch --backend ray` gives the rows `--backend local` gives, and
a task whose Ray worker process is killed mid-run is run again and written once.

One Ray instance for the module (started here with 2 CPUs and 2 `docker` slots, shut down at the end); each
`pinpoint batch` is a subprocess that joins it with `--address`, run from a folder outside the repository and
without PYTHONPATH, so the workers find pinpoint through the installed package alone. The model is the FAKE
scripted server (real HTTP), the tasks small real git repositories on LocalRuntime (tests/test_agent_batch.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from fake_llm_server import FakeScriptedLLMServer
from pinpoint.environments.errors import UsageError
from pinpoint.environments.executor import Item, LocalExecutor, executor_for
from test_agent_batch import _make_tasks, _reply, _task_of

WORKER_TITLE = "ray::pinpoint "  # a Ray worker running an item is titled `ray::pinpoint <key>`


@pytest.fixture(scope="module")
def ray_address():
    ray = pytest.importorskip("ray")
    ray.init(address="local", num_cpus=2, resources={"docker": 2}, include_dashboard=False, log_to_driver=False)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()
        deadline = time.monotonic() + 60
        while _workers() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not _workers(), "Ray workers outlived the module's instance"


def _workers(key: str = "") -> list[psutil.Process]:
    """Ray worker processes running one of our items (`key`: that item)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        line = " ".join(proc.info["cmdline"] or [])
        if line.startswith(WORKER_TITLE + key):
            found.append(proc)
    return found


def _batch(tasks: Path, out: Path, base_url: str, *backend: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "pinpoint.cli", "batch", "--tasks", str(tasks), "--output", str(out),
               "--workers", "2", "--quiet", "--set", "search.policy=none", *backend,
               "--set", f"llm.base_url={base_url}", "--set", "llm.model=fake", "--set", "llm.max_retries=0"]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RAY_ADDRESS")}
    return subprocess.run(command, cwd=tasks.parent, env=env, capture_output=True, text=True, timeout=600)


def _rows(out: Path) -> list[dict]:
    preds = out / "tasks" / "fake" / "preds.jsonl"
    return [json.loads(line) for line in preds.read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_batch_on_ray_gives_the_rows_of_the_local_backend(tmp_path, ray_address):
    tasks = _make_tasks(tmp_path, n=2)
    with FakeScriptedLLMServer(default=_reply) as fake:
        local = _batch(tasks, tmp_path / "local", fake.base_url)
        on_ray = _batch(tasks, tmp_path / "ray", fake.base_url, "--backend", "ray", "--address", ray_address)
    assert local.returncode == 0, local.stderr[-3000:]
    assert on_ray.returncode == 0, on_ray.stderr[-3000:]
    assert "to run with Ray: 1 node(s), 2 CPUs, 2 docker slot(s)" in " ".join(on_ray.stderr.split())
    by_id = {r["instance_id"]: r for r in _rows(tmp_path / "local")}
    ray_rows = _rows(tmp_path / "ray")
    assert sorted(r["instance_id"] for r in ray_rows) == ["task-0", "task-1"]  # each written once
    assert {r["instance_id"]: r for r in ray_rows} == by_id
    assert all(r["status"] == "submitted" and r["model_patch"] for r in ray_rows)


@pytest.mark.slow
def test_a_task_whose_ray_worker_is_killed_runs_again_and_is_written_once(tmp_path, ray_address):
    tasks = _make_tasks(tmp_path, n=2)
    killed: list[int] = []

    def reply(request):
        if _task_of(request) == "1" and not killed:  # task-1's first model call: kill the worker that sent it
            for proc in _workers("task-1"):
                killed.append(proc.pid)
                proc.kill()
        return _reply(request)

    with FakeScriptedLLMServer(default=reply) as fake:
        run = _batch(tasks, tmp_path / "out", fake.base_url, "--backend", "ray", "--address", ray_address)
    assert killed, "no Ray worker ran task-1"
    assert run.returncode == 0, run.stderr[-3000:]
    assert "task-1: its worker was lost; ran again (2 attempts)" in " ".join(run.stderr.split())
    rows = _rows(tmp_path / "out")
    assert sorted(r["instance_id"] for r in rows) == ["task-0", "task-1"]
    assert all(r["status"] == "submitted" and "+    return 1\n" in r["model_patch"]
               for r in rows if r["instance_id"] == "task-1")


def test_executor_bad_input_and_the_local_backend():
    with pytest.raises(UsageError, match="--address names a Ray cluster"):
        executor_for("local", "127.0.0.1:6379")
    with pytest.raises(UsageError, match="--backend 'k8s'"):
        executor_for("k8s")
    unreachable = subprocess.run([sys.executable, "-m", "pinpoint.cli", "eval", "--gold", "--backend", "ray",
                                  "--address", "127.0.0.1:1"], capture_output=True, text=True, timeout=120)
    assert unreachable.returncode == 2
    assert unreachable.stderr.strip().splitlines()[-1].startswith(
        "pinpoint eval: ClusterUnavailable: cannot reach the Ray cluster at 127.0.0.1:1")
    outcomes = {o.key: o for o in LocalExecutor(2).run(_half, [Item("a", (4,)), Item("b", (0,))])}
    assert outcomes["a"].value == 2 and outcomes["a"].error is None
    assert isinstance(outcomes["b"].error, ValueError) and outcomes["b"].value is None


def _half(n: int) -> int:
    if not n:
        raise ValueError("zero")
    return n // 2


def _eval(which: str, runs: Path, *backend: str) -> tuple:
    """`pinpoint eval --gold|--empty` on psf__requests-2931: (pinpoint's outcome, the official resolved, the
    official test statuses)."""
    command = [sys.executable, "-m", "pinpoint.cli", "eval", f"--{which}", "--instance", "psf__requests-2931",
               "--output", str(runs), *backend]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RAY_ADDRESS")}
    done = subprocess.run(command, cwd=runs.parent, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    report = json.loads((runs / which / which / "eval" / "psf__requests-2931" / "report.json").read_text())
    verdict = report["psf__requests-2931"]
    return verdict["pinpoint"]["outcome"], verdict["resolved"], verdict["tests_status"]


@pytest.mark.slow
@pytest.mark.docker
def test_eval_on_ray_gives_the_verdicts_of_the_local_backend(tmp_path, ray_address, docker_client):
    on_ray = ["--backend", "ray", "--address", ray_address]
    for which, resolved in (("gold", True), ("empty", False)):
        local = _eval(which, tmp_path / "local", "--backend", "local")
        ray_verdict = _eval(which, tmp_path / "ray", *on_ray)
        assert ray_verdict == local
        assert ray_verdict[1] is resolved, ray_verdict[:2]
