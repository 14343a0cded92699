"""`pinpoint-lab bench faults`: a GRPO-style rollout that meets faults from outside, and a driver killed mid-run.

The harness is the outside world: it builds the tasks (small local git repositories with a pytest test and a
one-line bug, and SWE-bench rows whose boxes are docker containers), serves the embedded SmolLM2 from its own
process on a fixed port (a real llama.cpp server, xllamacpp), and runs `pinpoint rl rollout` as a child process
against it through the recording gateway. While the rollout runs it `docker kill`s one of the run's boxes and
restarts the model server (SIGKILL, then a new server on the same port). Then it checks what a trainer needs:
every group complete (each task's G rows, each a real episode or a masked failure), the failures retried or
masked as configured, and no container of the run left once it ended. A second rollout is SIGKILLed mid-run and
the run's containers are counted for 60 s after.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pinpoint.environments.labels import RUN_ID_ENV, RUN_LABEL

#: SWE-bench dev rows whose instance images this machine builds (the docker part of the task set)
DOCKER_ROWS = ("psf__requests-1142", "psf__requests-1724", "psf__requests-1921", "psf__requests-2931")


def make_local_tasks(root: Path, n: int) -> list[dict[str, Any]]:
    """`n` small real git repositories, each with a pytest test and a one-line bug, as tasks-file rows."""
    rows = []
    for i in range(n):
        repo = root / f"repo{i}"
        (repo / "pkg").mkdir(parents=True, exist_ok=True)
        (repo / "pkg" / "__init__.py").write_text("")
        (repo / "pkg" / "limits.py").write_text(f"def limit_{i}():\n    return {i} - 1\n")
        (repo / "test_limits.py").write_text(f"from pkg.limits import limit_{i}\n\n\ndef test_limit():\n"
                                              f"    assert limit_{i}() == {i}\n")
        git = "git -c user.email=t@t -c user.name=t"
        subprocess.run(f"git init -q && git add -A && {git} commit -qm base", shell=True, cwd=repo, check=True)
        (repo / "pkg" / "limits.py").write_text(f"def limit_{i}():\n    return {i}\n")
        gold = subprocess.run(["git", "diff"], cwd=repo, check=True, capture_output=True, text=True).stdout
        subprocess.run(["git", "checkout", "-q", "."], cwd=repo, check=True)
        rows.append({"task_id": f"local-{i}", "repo_path": str(repo), "gold_patch": gold,
                     "problem_statement": f"`limit_{i}` in pkg/limits.py returns {i} - 1; it must return {i}.",
                     "test_command": f"{sys.executable} -m pytest -q -p no:cacheprovider test_limits.py"})
    return rows


def task_rows(root: Path, tasks: int, docker: int) -> list[dict[str, Any]]:
    """`tasks` rows: `docker` SWE-bench rows spread evenly among local ones (so boxes run mid-rollout)."""
    docker = min(docker, len(DOCKER_ROWS), tasks)
    local = iter(make_local_tasks(root, tasks - docker))
    boxed = iter({"instance_id": i} for i in DOCKER_ROWS[:docker])
    at = {int((k + 0.5) * tasks / docker) for k in range(docker)} if docker else set()
    return [next(boxed) if i in at else next(local) for i in range(tasks)]


class ModelServer:
    """The embedded SmolLM2 served by llama.cpp (xllamacpp) in its own process on a fixed port: killable and
    restartable from outside, as a model server is."""

    def __init__(self, port: int) -> None:
        self.port, self.process = port, None
        self.base_url = f"http://127.0.0.1:{port}/v1"

    def start(self, timeout_s: float = 120.0) -> ModelServer:
        self.process = subprocess.Popen([sys.executable, "-m", "pinpoint_lab.faults", "serve", str(self.port)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as reply:
                    if reply.status == 200:
                        return self
            except OSError:
                time.sleep(0.3)
        raise RuntimeError(f"the model server on port {self.port} did not get ready in {timeout_s:.0f} s")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()
        self.process = None


def serve(port: int) -> None:
    """Serve the embedded model on `port` until killed (the child process ModelServer starts)."""
    import xllamacpp
    from pinpoint.agent.embedded_model import DEFAULT_CTX, MODEL_NAME, default_threads, find_gguf

    params = xllamacpp.CommonParams()
    params.model.path = str(find_gguf())
    params.model_alias = {MODEL_NAME}
    params.n_ctx = DEFAULT_CTX
    params.n_parallel = 1
    params.port = port
    params.cpuparams.n_threads = params.cpuparams_batch.n_threads = default_threads()
    params.use_jinja = True
    params.verbosity = 0
    server = xllamacpp.Server(params)  # noqa: F841 (serves on its own threads while referenced)
    while True:
        time.sleep(3600)


@dataclass
class FaultPlan:
    """The rollout and its faults: sizes, the failure policy, and when each fault happens."""

    tasks: int = 16
    samples: int = 4
    docker_tasks: int = 4
    on_failure: str = "retry"
    retries: int = 3
    max_steps: int = 2
    max_tokens: int = 64
    concurrency: int = 4
    #: the model server is restarted once this share of the episodes has rows
    restart_at: float = 0.5
    restart_gap_s: float = 3.0
    kill_grace_s: float = 60.0


def _child_env() -> dict[str, str]:
    """This environment without a run id: each rollout makes its own."""
    return {k: v for k, v in os.environ.items() if k != RUN_ID_ENV}


def rollout_command(tasks: Path, out: Path, url: str, plan: FaultPlan) -> list[str]:
    """`pinpoint rl rollout` against the model server at `url` through the recording gateway."""
    return [str(Path(sys.executable).with_name("pinpoint")), "rl", "rollout", "--tasks", str(tasks), "--policy", url,
            "--model", "SmolLM2-135M-Instruct", "--model-backend", "llama.cpp", "--output", str(out),
            "--samples-per-task", str(plan.samples), "--concurrency", str(plan.concurrency),
            "--containers-per-worker", str(plan.concurrency + 2), "--reward", "unit",
            "--max-steps", str(plan.max_steps), "--set", "llm.temperature=1.0", "--seed", "0",
            "--on-failure", plan.on_failure, "--retries", str(plan.retries),
            "--set", f"llm.max_tokens={plan.max_tokens}", "--set", "llm.constrain_actions=true",
            "--set", "llm.tool_mode=text", "--set", "llm.timeout_s=300"]


def run_containers(run_id: str) -> list[str]:
    """Ids of the run's containers (any state)."""
    out = subprocess.run(["docker", "ps", "-aq", "--filter", f"label={RUN_LABEL}={run_id}"],
                         capture_output=True, text=True, check=True).stdout
    return out.split()


def _run_id(log: Path, process: subprocess.Popen, timeout_s: float = 120.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        for line in log.read_text().splitlines() if log.exists() else []:
            if line.startswith("run id: "):
                return line.removeprefix("run id: ").strip()
        time.sleep(0.2)
    raise RuntimeError(f"pinpoint rl rollout printed no run id: {log.read_text()[-500:] if log.exists() else ''}")


def _rows(out: Path) -> list[dict[str, Any]]:
    from pinpoint.rl.rollout import read_rows

    return read_rows(out)


def _load() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


class _Faults:
    """The faults injected into one rollout from outside, each when its moment comes (`tick` is polled)."""

    def __init__(self, server: ModelServer, run_id: str, out: Path, total: int, plan: FaultPlan) -> None:
        self.server, self.run_id, self.out, self.total, self.plan = server, run_id, out, total, plan
        self.killed: dict[str, Any] | None = None
        self.restarted: dict[str, Any] | None = None
        self.loads: list[float] = []

    def tick(self, started: float) -> None:
        self.loads.append(_load())
        done = len(_rows(self.out))
        if self.killed is None and self.plan.docker_tasks:
            boxes = _running(self.run_id)
            if boxes and done >= 1:  # a box of a docker task in use (the newest: an episode's, not an idle one)
                subprocess.run(["docker", "kill", boxes[0]], capture_output=True, check=False)
                self.killed = {"container": boxes[0][:12], "at_s": round(time.monotonic() - started, 1),
                               "rows_before": done}
        if self.restarted is None and done >= self.plan.restart_at * self.total:
            at = time.monotonic()
            self.server.kill()
            time.sleep(self.plan.restart_gap_s)
            self.server.start()
            self.restarted = {"at_s": round(at - started, 1), "down_s": round(time.monotonic() - at, 1),
                              "rows_before": done}


def _running(run_id: str) -> list[str]:
    """The run's running containers, newest first."""
    out = subprocess.run(["docker", "ps", "-q", "--filter", f"label={RUN_LABEL}={run_id}"],
                         capture_output=True, text=True, check=True).stdout
    return out.split()


def faulted_rollout(root: Path, server: ModelServer, plan: FaultPlan) -> dict[str, Any]:
    """Run the rollout with a box killed and the model server restarted mid-run; its figures and checks."""
    tasks = root / "tasks.jsonl"
    rows = task_rows(root / "repos", plan.tasks, plan.docker_tasks)
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out, log = root / "faulted.jsonl", root / "faulted.log"
    load_before, started = _load(), time.monotonic()
    with log.open("w") as sink:
        process = subprocess.Popen(rollout_command(tasks, out, server.base_url, plan), stdout=sink,
                                   stderr=subprocess.STDOUT, env=_child_env())
    run_id = _run_id(log, process)
    faults = _Faults(server, run_id, out, plan.tasks * plan.samples, plan)
    while process.poll() is None:
        faults.tick(started)
        time.sleep(1.0)
    wall = time.monotonic() - started
    time.sleep(2.0)
    return {"run_id": run_id, "exit_code": process.returncode, "wall_s": round(wall, 1),
            "load_before": load_before, "load_mean": round(sum(faults.loads) / max(len(faults.loads), 1), 2),
            "load_max": max(faults.loads, default=0.0), "box_killed": faults.killed,
            "server_restarted": faults.restarted, "containers_left": len(run_containers(run_id)),
            **summarize(_rows(out), [r.get("task_id") or r["instance_id"] for r in rows], plan.samples),
            "log_tail": log.read_text()[-400:]}


def summarize(rows: list[dict[str, Any]], task_ids: list[str], samples: int) -> dict[str, Any]:
    """Episodes, complete groups (a task's G samples each with a row: a real episode or a masked failure),
    masked and retried episodes, and the reasons of the failures met."""
    by_task: dict[str, set[int]] = {}
    for row in rows:
        by_task.setdefault(row["task_id"], set()).add(row["sample"])
    complete = sum(by_task.get(t, set()) >= set(range(samples)) for t in task_ids)
    failures = [f for r in rows for f in r.get("failures") or []]
    return {"episodes": len(rows), "groups": len(task_ids), "groups_complete": complete,
            "masked": sum(bool(r.get("masked")) for r in rows),
            "retried": sum((r.get("tries") or 1) > 1 for r in rows),
            "infra_failures_met": len(failures),
            "failure_kinds": sorted({_kind(f) for f in failures}),
            "rewarded": sum(r.get("reward") is not None for r in rows),
            "mean_reward": round(sum(r["reward"] for r in rows if r.get("reward") is not None)
                                 / max(sum(r.get("reward") is not None for r in rows), 1), 3)}


def _kind(reason: str) -> str:
    if any(s in reason for s in ("killed from outside", "RuntimeBroken", "not usable", "lost contact")):
        return "box killed"
    if reason.startswith("policy:"):
        return "model server down"
    return reason[:80]


def killed_driver(root: Path, server: ModelServer, plan: FaultPlan) -> dict[str, Any]:
    """A second rollout SIGKILLed once its boxes run: the run's containers counted every second until none is left,
    or for `kill_grace_s` at the most."""
    out, log = root / "killed.jsonl", root / "killed.log"
    with log.open("w") as sink:
        process = subprocess.Popen(rollout_command(root / "tasks.jsonl", out, server.base_url, plan),
                                   stdout=sink, stderr=subprocess.STDOUT, env=_child_env())
    run_id = _run_id(log, process)
    deadline = time.monotonic() + 600
    while process.poll() is None and not _running(run_id) and time.monotonic() < deadline:
        time.sleep(0.5)
    live = len(_running(run_id))
    process.send_signal(signal.SIGKILL)
    process.wait()
    killed, counts = time.monotonic(), []
    while time.monotonic() - killed < plan.kill_grace_s:  # until none is left: with the driver dead, none can come
        counts.append((round(time.monotonic() - killed, 1), len(run_containers(run_id))))
        if counts[-1][1] == 0:
            break
        time.sleep(1.0)
    left = len(run_containers(run_id))
    zero_at = next((t for t, n in counts if n == 0), None)
    return {"run_id": run_id, "containers_at_kill": live, "rows_at_kill": len(_rows(out)),
            "containers_left_after_s": round(time.monotonic() - killed, 1), "containers_left": left, "zero_after_s": zero_at}


def run_faults(root: Path, plan: FaultPlan, port: int | None = None) -> dict[str, Any]:
    """The whole check: the faulted rollout, then the killed driver; the model server stopped at the end."""
    from pinpoint.agent.embedded_model import free_port

    server = ModelServer(port or free_port()).start()
    try:
        figures = {"plan": asdict(plan),
                   "faulted": faulted_rollout(root, server, plan)}
        figures["killed_driver"] = killed_driver(root, server, plan)
    finally:
        server.kill()
    figures["load_after"] = _load()
    return figures


def _main() -> None:
    parser = argparse.ArgumentParser(prog="python -m pinpoint_lab.faults")
    parser.add_argument("command", choices=["serve"])
    parser.add_argument("port", type=int)
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    serve(args.port)


if __name__ == "__main__":
    _main()
