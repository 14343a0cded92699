"""Fault injection across `run`, `batch` and `eval`: each fault is classified (infrastructure, not a model
outcome), nothing already written is lost, and the same command run again resumes and finishes.

Faults: the model endpoint answering 5xx, timing out, sending garbage or dripping its reply a byte at a time (the
FAKE scripted server of tests/fake_llm_server.py stands in for a frontier model); the agent's or the grader's
container killed mid-command (`docker kill` from the test); the Docker engine lost mid-batch (the batch talks to
the real engine through a Unix-socket proxy that the test cuts: the real engine is never touched); the runs folder's
disk full (a small tmpfs mounted for the test); and SIGKILL of the process mid-write of preds.jsonl, a trajectory
or report.json (tests/fault_hooks.py). Real repositories, real SWE-bench rows and their real instance images.

The figure printed at the end (`faults survived: N/M`) is the one docs/security.md quotes:

    .venv/bin/python -m pytest -q tests/test_faults.py
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import docker
import pytest
from cli_lines import said
from fake_llm_server import FakeScriptedLLMServer, delay, drip, garbage_reply, http_error, text, tool_call
from pinpoint.cli import main
from pinpoint.environments.labels import RUN_ID, RUN_LABEL
from pinpoint.swebench_eval.datasets import load_instances
from tally import OutcomeTally, print_tallies
from test_agent_batch import _make_tasks
from test_agent_docker import gold_edits

ROOT = Path(__file__).resolve().parents[1]
TALLY = OutcomeTally("faults survived", "test_faults.py")
INSTANCE = "psf__requests-1142"  # the fast real instance the harness tests use
ENGINE_SOCKET = "/var/run/docker.sock"


@pytest.fixture(scope="module", autouse=True)
def _figures(request):
    request.config.pluginmanager.register(TALLY, "pinpoint-fault-tally")
    yield
    print_tallies(request.config, TALLY)


def _preds(path: Path) -> list[dict]:
    """Every line of a preds.jsonl, each of which must parse."""
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _model_args(fake: FakeScriptedLLMServer, timeout_s: float = 30.0) -> list[str]:
    return ["--set", "search.policy=none", "--set", f"llm.base_url={fake.base_url}", "--set", "llm.model=fake",
            "--set", "llm.max_retries=0", "--set", f"llm.timeout_s={timeout_s}"]


# -- local tasks for batch: real git repositories, LocalRuntime ------------------------------------------------------
def _task_of(request: dict) -> int:
    first_user = next(m["content"] for m in request["messages"] if m["role"] == "user")
    return int(first_user.split("task-")[1].split(":")[0])


def _solver(fault_for: dict[int, object] | None = None):
    """The scripted model: edit, then submit twice; a task in `fault_for` first gets its fault, once."""
    pending = dict(fault_for or {})

    def reply(request):
        i = _task_of(request)
        if i in pending:
            return pending.pop(i)
        if not any(m["role"] == "assistant" for m in request["messages"]):
            return tool_call("str_replace_editor", {"command": "str_replace", "path": "pkg/limits.py",
                                                    "old_str": f"return {i} - 1", "new_str": f"return {i}"})
        return tool_call("submit", {})

    return reply


ENDPOINT_FAULTS = {
    "http_503": lambda: http_error(503, "upstream overloaded"),
    "timeout": lambda: delay(8.0, then=text("too late")),
    "garbage": lambda: garbage_reply("<html>502 Bad Gateway</html>"),
    "drip": lambda: drip(0.25, then=text("a reply sent one byte at a time " * 4)),
    "drip_headers": lambda: drip(0.25, then=text("headers sent one byte at a time"), headers=True),
}


@pytest.mark.parametrize("fault", sorted(ENDPOINT_FAULTS))
def test_batch_endpoint_fault(fault, tmp_path, capsys):
    """One task meets the fault, one does not: the faulted task is an infrastructure failure with no prediction
    (never an empty-patch 'model' row), the other's row stays, and the rerun resumes the faulted one."""
    tasks, out = _make_tasks(tmp_path, 2), tmp_path / "out"
    preds = out / "tasks" / "fake" / "preds.jsonl"
    argv = ["batch", "--tasks", str(tasks), "--output", str(out), "--quiet"]
    with FakeScriptedLLMServer(default=_solver({0: ENDPOINT_FAULTS[fault]()})) as fake:
        assert main([*argv, *_model_args(fake, timeout_s=2.0)]) == 1
        first = " ".join(capsys.readouterr().err.split())  # rich wraps long lines
        assert "task-0: infrastructure failure" in first and "1 of them infrastructure" in first, first
        assert [r["instance_id"] for r in _preds(preds)] == ["task-1"]
        trajectory = json.loads((out / "tasks" / "fake" / "trajectories" / "task-0" / "trajectory.json").read_text())
        assert trajectory["status"] == "llm_error"
        asked = len(fake.chat_requests)
        assert main([*argv, *_model_args(fake, timeout_s=2.0)]) == 0
        again = {_task_of(r) for r in fake.chat_requests[asked:]}
    rows = _preds(preds)
    assert [r["instance_id"] for r in rows] == ["task-1", "task-0"] and again == {0}
    assert all(r["status"] == "submitted" and "+    return" in r["model_patch"] for r in rows)
    trajectory = json.loads((out / "tasks" / "fake" / "trajectories" / "task-0" / "trajectory.json").read_text())
    assert trajectory["resumed"] is True and trajectory["status"] == "submitted"


# -- containers killed mid-command ------------------------------------------------------------------------------------
def _kill_when_running(label: str, needle: str, timeout: float = 120.0) -> threading.Thread:
    """A thread that `docker kill`s the container labelled `label` once a process matching `needle` runs in it."""
    client = docker.from_env()

    def watch() -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for container in client.containers.list(filters={"label": f"{RUN_LABEL}={label}"}):
                with contextlib.suppress(docker.errors.APIError):
                    if any(needle in " ".join(p) for p in container.top().get("Processes") or []):
                        container.kill()
                        return
            time.sleep(0.1)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


@pytest.mark.docker
def test_run_container_killed_mid_command(tmp_path, capsys, docker_client):
    """The container dies under the model's test command: `run` says so in one line (exit 2) and writes no
    prediction; run again, it resumes in a fresh container from the step that failed and resolves."""
    instance = load_instances(ids=[INSTANCE])[0]
    edits = [tool_call("str_replace_editor", e) for e in gold_edits(instance.patch)]
    script = [tool_call("run_tests", {"command": "sleep 4 && echo pinpoint-fault-probe"})]
    out = tmp_path / "out"
    run_dir = out / "swebench_verified_dev" / "fake"
    with FakeScriptedLLMServer(script + edits + [tool_call("submit", {}), tool_call("submit", {})]) as fake:
        killer = _kill_when_running(RUN_ID, "sleep 4")
        code = main(["run", INSTANCE, "--output", str(out), *_model_args(fake)])
        killer.join(timeout=5)
        err = capsys.readouterr().err
        assert code == 2 and "Traceback" not in err
        assert [line for line in err.splitlines() if line.startswith("pinpoint run: ")], err
        assert not (run_dir / "preds.jsonl").exists()
        assert json.loads((run_dir / "trajectories" / INSTANCE / "trajectory.json").read_text())["status"] in (
            "runtime_error", "crashed")
        code = main(["run", INSTANCE, "--evaluate", "--output", str(out), *_model_args(fake)])
    assert code == 0, capsys.readouterr().err
    (row,) = _preds(run_dir / "preds.jsonl")
    assert row["status"] == "submitted" and row["outcome"] == "resolved"
    trajectory = json.loads((run_dir / "trajectories" / INSTANCE / "trajectory.json").read_text())
    assert trajectory["resumed"] is True
    assert any("sleep 4" in json.dumps(m) for m in trajectory["messages"])  # the earlier steps are kept


@pytest.mark.docker
def test_run_endpoint_fault(tmp_path, capsys, docker_client):
    """The endpoint fails (503) in the middle of `run`: one line, exit 2, no prediction; run again, it resumes
    from the failed model turn, with the edit made before the failure still in the tree, and resolves."""
    instance = load_instances(ids=[INSTANCE])[0]
    (edit,) = [tool_call("str_replace_editor", e) for e in gold_edits(instance.patch)]
    script = [edit, http_error(503, "upstream overloaded"), tool_call("submit", {}), tool_call("submit", {})]
    out = tmp_path / "out"
    run_dir = out / "swebench_verified_dev" / "fake"
    with FakeScriptedLLMServer(script) as fake:
        assert main(["run", INSTANCE, "--output", str(out), *_model_args(fake)]) == 2
        err = capsys.readouterr().err
        # one line besides the status line's progress lines (`[m:ss] instance · node · ...`)
        (line,) = [line for line in said(err) if line.strip() and not re.match(r"\[\d+:\d\d\] ", line)]
        assert line.startswith("pinpoint run: ") and "infrastructure failure (llm_error)" in line, err
        assert not (run_dir / "preds.jsonl").exists()
        assert main(["run", INSTANCE, "--evaluate", "--output", str(out), *_model_args(fake)]) == 0
    (row,) = _preds(run_dir / "preds.jsonl")
    assert row["outcome"] == "resolved" and row["edited_lines"] == 3
    assert json.loads((run_dir / "trajectories" / INSTANCE / "trajectory.json").read_text())["resumed"] is True


@pytest.mark.docker
def test_eval_container_killed_mid_test_run(tmp_path, capsys, docker_client):
    """The grader's container dies while the eval script runs: an infrastructure outcome (container_failed),
    never `unresolved`; the rerun grades it again and it resolves."""
    argv = ["eval", "--gold", "--instance", INSTANCE, "--output", str(tmp_path), "--run-id", "t"]
    killer = _kill_when_running(RUN_ID, "eval.sh")
    assert main(argv) == 0
    killer.join(timeout=5)
    summary = json.loads((tmp_path / "t" / "summary.json").read_text())
    assert summary["ids"]["container_failed"] == [INSTANCE] and summary["infra_failure_instances"] == 1
    assert summary["unresolved_instances"] == 0
    assert main(argv) == 0
    summary = json.loads((tmp_path / "t" / "summary.json").read_text())
    assert summary["ids"]["resolved"] == [INSTANCE] and summary["infra_failure_instances"] == 0
    capsys.readouterr()


# -- the Docker engine lost mid-batch ---------------------------------------------------------------------------------
class EngineProxy:
    """A Unix socket forwarding to the real engine's. `cut()` closes it and every open connection: to a client
    pointed at it (DOCKER_HOST) the engine has gone away, while the real engine, and everyone else using it,
    carries on."""

    def __init__(self, path: Path, cut_on: bytes | None = None) -> None:
        self.path = path
        self.cut_on = cut_on  # cut instead of forwarding the first request holding these bytes
        self._listener: socket.socket | None = None
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()

    def start(self) -> EngineProxy:
        self.path.unlink(missing_ok=True)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(self.path))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return self

    def cut(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            conns, self._open = self._open, []
        for sock in [listener, *conns]:
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
        self.path.unlink(missing_ok=True)

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(ENGINE_SOCKET)
            with self._lock:
                if self._listener is not listener:
                    client.close()
                    upstream.close()
                    return
                self._open += [client, upstream]
            for src, dst, watch in ((client, upstream, True), (upstream, client, False)):
                threading.Thread(target=self._pump, args=(src, dst, watch), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, watch: bool) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                if watch and self.cut_on is not None and self.cut_on in data:
                    self.cut_on = None
                    self.cut()
                    return
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


def _container_script(ids: dict[str, str], on_last: dict[str, object]):
    """Per instance (told apart by its problem statement): create a note file, submit twice; `on_last[id]()` runs
    just before that instance's last reply."""
    def reply(request):
        user = next(m["content"] for m in request["messages"] if m["role"] == "user")
        iid = next(i for i, statement in ids.items() if statement in user)
        turns = sum(m["role"] == "assistant" for m in request["messages"])
        if turns == 0:
            return tool_call("str_replace_editor", {"command": "create", "path": "pinpoint_fault_note.txt",
                                                    "file_text": f"{iid}\n"})
        if turns >= 2 and iid in on_last:
            on_last.pop(iid)()
        return tool_call("submit", {})

    return reply


def _remove_containers_of(label_file: Path) -> None:
    if label_file.exists():
        _remove_containers_of_label(label_file.read_text(), docker.from_env())


def _remove_containers_of_label(label: str, client: docker.DockerClient) -> None:
    """Remove the containers of one pinpoint process (its `pinpoint.run` label), and only those."""
    for container in client.containers.list(all=True, filters={"label": f"{RUN_LABEL}={label}"}):
        with contextlib.suppress(docker.errors.APIError):
            container.remove(force=True)


@pytest.mark.docker
def test_batch_engine_lost_mid_batch(tmp_path, docker_client):
    """The engine goes away after the first instance's last model turn: that prediction is kept, the second
    instance is an infrastructure failure (one line, no traceback), and the rerun, with the engine back, does
    only the second."""
    first, second = "psf__requests-1724", "psf__requests-1921"
    statements = {i.instance_id: i.problem_statement[:40] for i in load_instances(ids=[first, second])}
    proxy = EngineProxy(tmp_path / "engine.sock").start()
    out, label_file = tmp_path / "out", tmp_path / "run-label"
    preds = out / "batch" / "fake" / "preds.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DOCKER_HOST": f"unix://{proxy.path}",
           "PINPOINT_TEST_RUN_ID_FILE": str(label_file)}
    try:
        with FakeScriptedLLMServer(default=_container_script(statements, {first: proxy.cut})) as fake:
            argv = [sys.executable, "tests/fault_hooks.py", "-", "0", "batch", "--instance", first, second,
                    "--workers", "1", "--quiet", "--output", str(out), "--run-id", "batch", *_model_args(fake)]
            proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
            assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
            assert f"{second}: infrastructure failure" in proc.stderr, proc.stderr[-3000:]
            assert [r["instance_id"] for r in _preds(preds)] == [first]
            _remove_containers_of(label_file)  # what the lost engine could not remove
            proxy.start()
            asked = len(fake.chat_requests)
            proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
            assert proc.returncode == 0, proc.stderr[-3000:]
            assert not any(statements[first] in json.dumps(r["messages"]) for r in fake.chat_requests[asked:])
        assert [r["instance_id"] for r in _preds(preds)] == [first, second]
    finally:
        proxy.cut()
        _remove_containers_of(label_file)


@pytest.mark.docker
def test_eval_engine_lost_mid_eval(tmp_path, monkeypatch, capsys, docker_client):
    """The engine goes away as the first instance's grading container is removed: that verdict stays, the second
    instance is an infrastructure outcome (never `unresolved`), and the rerun, with the engine back, grades only
    the second."""
    from pinpoint.environments import engine

    ids = ["psf__requests-1142", "psf__requests-2931"]  # both resolve with their gold patches
    proxy = EngineProxy(tmp_path / "engine.sock", cut_on=b"DELETE /").start()
    real_engine = docker.DockerClient(base_url=f"unix://{ENGINE_SOCKET}")
    monkeypatch.setenv("DOCKER_HOST", f"unix://{proxy.path}")
    engine.client.cache_clear()
    argv = ["eval", "--gold", "--instance", *ids, "--output", str(tmp_path / "runs"), "--run-id", "t"]
    try:
        assert main(argv) == 0
        summary = json.loads((tmp_path / "runs" / "t" / "summary.json").read_text())
        assert summary["resolved_instances"] == 1 and summary["infra_failure_instances"] == 1, summary["ids"]
        assert summary["unresolved_instances"] == 0
        (graded,) = summary["ids"]["resolved"]
        _remove_containers_of_label(RUN_ID, real_engine)  # what the lost engine could not remove
        engine.client.cache_clear()
        proxy.start()
        capsys.readouterr()
        assert main(argv) == 0
        assert f"{graded}: resolved (finished earlier)" in capsys.readouterr().out
        summary = json.loads((tmp_path / "runs" / "t" / "summary.json").read_text())
        assert sorted(summary["ids"]["resolved"]) == ids and summary["infra_failure_instances"] == 0, summary["ids"]
    finally:
        proxy.cut()
        engine.client.cache_clear()
        _remove_containers_of_label(RUN_ID, real_engine)


# -- the runs folder's disk full --------------------------------------------------------------------------------------
@contextlib.contextmanager
def small_disk(folder: Path, size: str):
    """A tmpfs of `size` mounted on `folder` (the test runs as root), unmounted afterwards whatever happens."""
    folder.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def _fill(folder: Path, leave: int) -> Path:
    """Fill `folder`'s file system up to `leave` bytes free."""
    stat = os.statvfs(folder)
    filler = folder / "filler"
    filler.write_bytes(b"\0" * max(0, stat.f_bavail * stat.f_frsize - leave))
    return filler


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_batch_disk_full(tmp_path, capsys):
    """No space for the runs folder: the batch stops the task with one clear line (infrastructure), leaves
    every file whole, and the rerun once space is back finishes it."""
    tasks = _make_tasks(tmp_path, 2)
    with small_disk(tmp_path / "runs", "2m") as runs, FakeScriptedLLMServer(default=_solver()) as fake:
        argv = ["batch", "--tasks", str(tasks), "--output", str(runs), "--quiet", "--workers", "1",
                *_model_args(fake)]
        one = _make_tasks(tmp_path / "one", 1)
        assert main([*argv[:2], str(one), *argv[3:]]) == 0  # task-0 done while there is space
        filler = _fill(runs, leave=4096)
        code = main(argv)
        err = capsys.readouterr().err
        assert code == 1 and "Traceback" not in err and "infrastructure" in err, err[-3000:]
        for path in runs.rglob("*.json*"):
            if path.name.endswith(".json"):
                json.loads(path.read_text())
        preds = runs / "tasks" / "fake" / "preds.jsonl"
        assert [r["instance_id"] for r in _preds(preds)] == ["task-0"]
        filler.unlink()
        assert main(argv) == 0
        assert sorted(r["instance_id"] for r in _preds(preds)) == ["task-0", "task-1"]
        assert not [p for p in runs.rglob("*.tmp")]


@pytest.mark.docker
@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_eval_disk_full(tmp_path, capsys, docker_client):
    """No space for the eval folder mid-grading: one line and exit 2, no half-written report.json (a later eval
    must not trust it); once space is back the rerun grades it."""
    with small_disk(tmp_path / "runs", "1m") as runs:
        argv = ["eval", "--gold", "--instance", INSTANCE, "--output", str(runs), "--run-id", "t"]
        filler = _fill(runs, leave=20_000)  # room for eval.sh and patch.diff, not the 44 kB test log
        code = main(argv)
        err = capsys.readouterr().err
        assert code == 2 and "Traceback" not in err and "pinpoint eval: " in err, err[-3000:]
        report = runs / "t" / "gold" / "eval" / INSTANCE / "report.json"
        assert not report.exists() or json.loads(report.read_text())
        filler.unlink()
        assert main(argv) == 0
        assert json.loads(report.read_text())[INSTANCE]["resolved"] is True
        assert not [p for p in runs.rglob("*.tmp")]


# -- SIGKILL mid-write ------------------------------------------------------------------------------------------------
def _hooked(target: str, nth: int, *argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "tests/fault_hooks.py", target, str(nth), *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=400,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


@pytest.mark.parametrize("target, nth", [("preds.jsonl", 2), ("trajectory.json", 5)])
def test_batch_killed_mid_write(target, nth, tmp_path):
    """SIGKILL half-way through writing preds.jsonl or a trajectory: every file still parses, and the rerun
    finishes every task exactly once."""
    tasks, out = _make_tasks(tmp_path, 3), tmp_path / "out"
    preds = out / "tasks" / "fake" / "preds.jsonl"
    with FakeScriptedLLMServer(default=_solver()) as fake:
        argv = ["batch", "--tasks", str(tasks), "--output", str(out), "--quiet", *_model_args(fake)]
        killed = _hooked(target, nth, *argv)
        assert killed.returncode == -9, killed.stderr[-3000:]
        from pinpoint.swebench_eval.predictions import read_predictions

        done = read_predictions(preds)  # a torn line is skipped, never an error
        for path in out.rglob("trajectory.json"):
            json.loads(path.read_text())
        rerun = subprocess.run([sys.executable, "-m", "pinpoint.cli", *argv], cwd=ROOT, capture_output=True,
                               text=True, timeout=400, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert rerun.returncode == 0, rerun.stderr[-3000:]
    rows = _preds(preds)  # every line parses: the torn one was dropped
    assert sorted(r["instance_id"] for r in rows) == ["task-0", "task-1", "task-2"]
    assert [r["instance_id"] for r in rows][: len(done)] == list(done)
    assert not [p for p in out.rglob("*.tmp")]


@pytest.mark.docker
def test_eval_killed_mid_report_write(tmp_path, docker_client):
    """SIGKILL while report.json is written: no half report is left to be trusted, and the rerun grades the
    instance and resolves it."""
    argv = ["eval", "--gold", "--instance", INSTANCE, "--output", str(tmp_path), "--run-id", "t"]
    killed = _hooked("report.json", 1, *argv)
    assert killed.returncode == -9, killed.stderr[-3000:]
    report = tmp_path / "t" / "gold" / "eval" / INSTANCE / "report.json"
    assert not report.exists() or json.loads(report.read_text())
    rerun = subprocess.run([sys.executable, "-m", "pinpoint.cli", *argv], cwd=ROOT, capture_output=True, text=True,
                           timeout=400, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert json.loads(report.read_text())[INSTANCE]["resolved"] is True
    assert json.loads((tmp_path / "t" / "summary.json").read_text())["resolved_instances"] == 1
