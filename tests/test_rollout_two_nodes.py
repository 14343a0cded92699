"""`pinpoint rl rollout --backend ray` on the two-node cluster of tests/two_nodes.py (the second node on a second
dockerd): one episode worker (a Ray actor holding 2 `docker` units) per node, so the two tasks' boxes run on the
two engines. The second node's processes are SIGKILLed once its engine holds a box of the run, and the node is
restarted: the run still completes with the rows `--backend local` writes, every (task, sample) once, each task's
boxes on one engine, and no box of the run left on either engine (the lost worker's included).

The policy is the scripted gold (a FAKE that replays the reference patch); the tasks are real SWE-bench rows in
their real instance images (moved to the second engine with `docker save | docker load`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from test_node_loss import _boxes, _wait
from two_nodes import INSTANCES, RAY_ENV, SecondEngine, TwoNodeCluster, cluster_on, creates_on

pytestmark = [pytest.mark.slow, pytest.mark.docker]


def _command(tasks: Path, out: Path, address: str | None) -> list[str]:
    ray = ["--backend", "ray", "--address", address] if address else []
    return [sys.executable, "-m", "pinpoint.cli", "rl", "rollout", "--tasks", str(tasks), "--policy", "scripted-gold",
            "--samples-per-task", "2", "--workers", "2", "--containers-per-worker", "2", "--reward", "precise",
            "--output", str(out), *ray]


def _env(run_id: str) -> dict[str, str]:
    drop = ("PYTHONPATH", "RAY_ADDRESS", "DOCKER_HOST")
    return {**{k: v for k, v in os.environ.items() if k not in drop}, **RAY_ENV, "PINPOINT_RUN_ID": run_id}


def _lines(out: Path) -> list[dict]:
    return [json.loads(line) for line in out.read_text().splitlines()]


def _stable(rows: list[dict]) -> list[tuple]:
    return sorted((r["task_id"], r["sample"], r["status"], r["reward"], r["patch"]) for r in rows)


def _rollout_with_node_loss(tmp_path: Path, tasks: Path, cluster: TwoNodeCluster, engine: SecondEngine,
                            images: dict[str, str]) -> list[dict]:
    """The rollout on the cluster, its second node killed mid-run and restarted: its rows, after checking each
    task's boxes ran on one engine, both engines used, and no box of the run is left on either."""
    run_id, log, out = uuid.uuid4().hex[:12], tmp_path / "ray.log", tmp_path / "ray.jsonl"
    with creates_on((None, engine.host), run_id, tmp_path) as watch:
        with log.open("wb") as sink:
            proc = subprocess.Popen(_command(tasks, out, cluster.address), cwd=tmp_path, env=_env(run_id),
                                    stdout=sink, stderr=subprocess.STDOUT)
        try:
            _wait(lambda: _boxes(engine.host, run_id), "a box on the second engine", proc, log)
            assert cluster.kill_second(), "no process of the second node to kill"
            # the lost worker's box goes now, by the reaper it started (a separate process on this machine, so
            # it outlives the node's), or when the node comes back: at the end none may be left
            cluster.start_second()  # back under a new node id, on the same engine
            assert proc.wait(timeout=900) == 0, log.read_text(errors="replace")[-3000:]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            main, second = (w.stop() for w in watch)
    rows = _lines(out)
    failed = [r for r in rows if r["status"] == "infra_failure"]
    assert not failed, (failed, log.read_text(errors="replace")[-3000:])
    assert main | second == set(images.values()), (main, second)
    assert main and second and not main & second, (main, second)  # each task's boxes on one engine
    assert _boxes(None, run_id) == [], "a box of the run is left on the main engine"
    assert _boxes(engine.host, run_id) == [], "the lost worker's boxes were not reaped when its node came back"
    return rows


def test_rollout_on_two_nodes_gives_the_local_rows_and_survives_losing_a_node(
        tmp_path: Path, instance_engine: SecondEngine) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"instance_id": i}) + "\n" for i in INSTANCES))
    local = subprocess.run(_command(tasks, tmp_path / "local.jsonl", None), cwd=tmp_path,
                           env=_env(uuid.uuid4().hex[:12]), capture_output=True, text=True, timeout=900)
    assert local.returncode == 0, (local.stdout + local.stderr)[-3000:]
    expected = _stable(_lines(tmp_path / "local.jsonl"))
    assert [row[:2] for row in expected] == [(i, s) for i in sorted(INSTANCES) for s in range(2)]
    with cluster_on(instance_engine, cpus=2, docker=2) as cluster:
        images = {i: instance for i, (*_, instance) in instance_engine.tags.items()}
        rows = _rollout_with_node_loss(tmp_path, tasks, cluster, instance_engine, images)
        assert _stable(rows) == expected  # every (task, sample) written once, with the rows of the local backend
