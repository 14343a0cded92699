"""Two Ray nodes on one machine, the second backed by a second Docker engine: started and stopped by a test.

`SecondEngine` is a second `dockerd` with its own data root, exec root, pidfile, Unix socket and bridge (a bridge
made here with `ip link add`, on its own subnet; no iptables rules, so the main engine's are never touched).
`TwoNodeCluster` is `ray start --head` plus `ray start --address` whose environment points DOCKER_HOST at the
second engine. Stopping ends only the processes these started (by pid: never `ray stop`, which would end every
Ray instance on the machine) and removes the bridge and the temporary folders.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path

import psutil
import pytest

RAY = str(Path(sys.executable).with_name("ray"))
#: token auth off for the head, the joining node and the driver alike: `ray start --head` turns it on by itself
#: when ~/.ray/auth_token exists, but a joining node or a driver does not, and they are then refused
RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}


class EngineUnavailable(RuntimeError):
    """A second dockerd cannot start here (no dockerd, not root, no `ip`): the test says why and skips."""


class SecondEngine:
    """A second dockerd in temporary folders, with its own bridge; `host` is its DOCKER_HOST."""

    def __init__(self) -> None:
        if os.geteuid() != 0 or not shutil.which("dockerd") or not shutil.which("ip"):
            raise EngineUnavailable("a second dockerd needs root, dockerd and ip on this machine")
        self.root = Path(tempfile.mkdtemp(prefix="pp-engine2."))
        self.bridge = f"pp{uuid.uuid4().hex[:8]}"
        self.host = f"unix://{self.root}/docker.sock"
        self.process: subprocess.Popen | None = None

    def start(self, subnet: str = "10.213.0.1/24", timeout: float = 60) -> SecondEngine:
        for command in (["ip", "link", "add", self.bridge, "type", "bridge"],
                        ["ip", "addr", "add", subnet, "dev", self.bridge], ["ip", "link", "set", self.bridge, "up"]):
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode:
                self.stop()
                raise EngineUnavailable(f"`{' '.join(command)}` failed: {done.stderr.strip()}")
        log = open(self.root / "dockerd.log", "wb")  # noqa: SIM115 - the daemon's log for its whole life
        self.process = subprocess.Popen(
            ["dockerd", "--data-root", f"{self.root}/data", "--exec-root", f"{self.root}/exec", "--pidfile",
             f"{self.root}/docker.pid", "-H", self.host, "--bridge", self.bridge, "--iptables=false",
             "--ip-masq=false", "--ip-forward=false"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            if self.docker("info", check=False).returncode == 0:
                return self
            time.sleep(0.5)
        tail = (self.root / "dockerd.log").read_text(errors="replace")[-1500:]
        self.stop()
        raise EngineUnavailable(f"the second dockerd did not answer: {tail}")

    def docker(self, *args: str, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
        """`docker ARGS` against this engine."""
        env = {**os.environ, "DOCKER_HOST": self.host}
        return subprocess.run(["docker", *args], env=env, capture_output=True, text=True, check=check, **kwargs)

    def load_from_main(self, tag: str) -> tuple[str, str]:
        """`docker save TAG | docker load` from the main engine into this one; (main id, this engine's id)."""
        save = subprocess.Popen(["docker", "save", tag], stdout=subprocess.PIPE)
        subprocess.run(["docker", "load", "-q"], stdin=save.stdout, env={**os.environ, "DOCKER_HOST": self.host},
                       capture_output=True, check=True)
        save.stdout.close()
        assert save.wait() == 0, f"docker save {tag} failed"
        main = subprocess.run(["docker", "image", "inspect", "-f", "{{.Id}}", tag], capture_output=True, text=True,
                              check=True).stdout.strip()
        return main, self.docker("image", "inspect", "-f", "{{.Id}}", tag).stdout.strip()

    def stop(self) -> None:
        """TERM the daemon (it stops its containerd), remove its bridge and folders."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for proc in _processes_mentioning(str(self.root)):  # its containerd, should the daemon have left it
            proc.kill()
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)

    def bridge_exists(self) -> bool:
        return subprocess.run(["ip", "link", "show", self.bridge], capture_output=True).returncode == 0


class TwoNodeCluster:
    """`ray start --head` (this machine's engine) plus a second node whose DOCKER_HOST is `second_host`."""

    def __init__(self, second_host: str, cpus: int = 2, docker: int = 1, head: dict[str, int] | None = None) -> None:
        self.temp = Path(tempfile.mkdtemp(prefix="pp-ray."))
        self.second_host, self.cpus, self.docker = second_host, cpus, docker
        self.head = head if head is not None else {"docker": docker}  # the head's own resources
        self.address = ""

    def _resources(self, resources: dict[str, int] | None = None) -> list[str]:
        return ["--num-cpus", str(self.cpus), "--resources", json.dumps(resources or {"docker": self.docker}),
                "--disable-usage-stats"]

    def _env(self) -> dict[str, str]:
        env = {**os.environ, **RAY_ENV}
        env.pop("RAY_ADDRESS", None)
        env.pop("DOCKER_HOST", None)
        return env

    def start(self) -> TwoNodeCluster:
        subprocess.run([RAY, "start", "--head", "--port", "0", "--temp-dir", str(self.temp), "--include-dashboard",
                        "false", *self._resources(self.head)], env=self._env(), capture_output=True, text=True,
                       check=True, timeout=120)
        self.address = (self.temp / "ray_current_cluster").read_text().strip()
        return self.start_second()

    def start_second(self) -> TwoNodeCluster:
        """`ray start --address` with DOCKER_HOST at the second engine: the second node (again, after a kill)."""
        subprocess.run([RAY, "start", "--address", self.address, *self._resources()],
                       env={**self._env(), "DOCKER_HOST": self.second_host}, capture_output=True, text=True,
                       check=True, timeout=120)
        return self

    def second_node_processes(self) -> list[psutil.Process]:
        """The second node's processes (its raylet, its workers, its agents): those of this cluster whose
        environment points DOCKER_HOST at the second engine (a driver's never does)."""
        found = []
        for proc in self.processes():
            try:
                if proc.environ().get("DOCKER_HOST") == self.second_host:
                    found.append(proc)
            except psutil.Error:
                continue
        return found

    def kill_second(self) -> list[int]:
        """SIGKILL the second node's raylet and workers, by pid, as a machine dying would; their pids."""
        procs = self.second_node_processes()
        for proc in procs:
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                continue
        psutil.wait_procs(procs, timeout=30)
        return [p.pid for p in procs]

    def processes(self) -> list[psutil.Process]:
        """Every live process of this cluster: those naming its temp dir and their descendants."""
        found = set(_processes_mentioning(str(self.temp)))
        for proc in list(found):
            try:
                found.update(proc.children(recursive=True))
            except psutil.NoSuchProcess:
                continue
        return [p for p in found if _alive(p)]

    def stop(self) -> None:
        """End this cluster's processes by pid (TERM, then KILL) and remove its temp dir."""
        procs = self.processes()
        for proc in procs:
            try:
                proc.terminate()
            except psutil.NoSuchProcess:
                continue
        _, alive = psutil.wait_procs(procs, timeout=20)
        for proc in alive:
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                continue
        psutil.wait_procs(alive, timeout=10)
        shutil.rmtree(self.temp, ignore_errors=True)


#: the SWE-bench rows the two-node tests run (their images are moved to the second engine once a session)
INSTANCES = ("psf__requests-2931", "psf__requests-1921")


def image_tags(instance_id: str) -> tuple[str, str, str]:
    """(env, reference, instance) tags of an instance on the main engine, built by the caching builder if missing:
    the whole chain, so a node given them builds nothing (a missing reference layer would be built there)."""
    from pinpoint.swebench_eval.datasets import load_instances
    from pinpoint.swebench_eval.images import build_instance_image

    plan = build_instance_image(load_instances(ids=[instance_id])[0]).plan
    return plan.env_tag, plan.reference_tag, plan.instance_tag


@pytest.fixture(scope="session")
def instance_engine(docker_client) -> Iterator[SecondEngine]:
    """One second engine for every two-node test of the session, holding the images of INSTANCES (moved from the
    main engine once: a `docker save | docker load` costs seconds a layer); `engine.loaded` maps each tag to its
    (main, second) image ids. Stopped at the end of the session and checked gone."""
    tags = {i: image_tags(i) for i in INSTANCES}
    try:
        engine = SecondEngine().start()
    except EngineUnavailable as exc:
        pytest.skip(f"no second Docker engine here: {exc}")
    try:
        engine.tags = tags
        engine.loaded = {tag: engine.load_from_main(tag) for chain in tags.values() for tag in chain}
        yield engine
    finally:
        engine.stop()
    assert_engine_gone(engine)


def load_instance(engine: SecondEngine, instance_id: str) -> None:
    """The image chain of `instance_id` on the session's second engine, moved from the main engine once."""
    for tag in image_tags(instance_id):
        if tag not in engine.loaded:
            engine.loaded[tag] = engine.load_from_main(tag)


@contextlib.contextmanager
def cluster_on(engine: SecondEngine, cpus: int, docker: int,
               head: dict[str, int] | None = None) -> Iterator[TwoNodeCluster]:
    """A started two-node cluster whose second node drives `engine` with `docker` box slots (the head has `head`'s
    resources, by default the same slots); stopped afterwards and checked gone."""
    cluster = TwoNodeCluster(engine.host, cpus=cpus, docker=docker, head=head)
    try:
        yield cluster.start()
    finally:
        cluster.stop()
    assert not cluster.processes() and not cluster.temp.exists()


class ContainerCreates:
    """The images of the containers an engine creates for `run_id`, streamed from `docker events` started before
    the run: dockerd keeps only its last 256 events, and other work on a busy engine pushes a run's out of them
    before a query afterwards could read them."""

    def __init__(self, host: str | None, run_id: str, path: Path) -> None:
        env = {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"} | ({"DOCKER_HOST": host} if host else {})
        self.path, self.sink = path, path.open("wb")
        self.proc = subprocess.Popen(["docker", "events", "--filter", "type=container", "--filter", "event=create",
                                      "--filter", f"label=pinpoint.run={run_id}", "--format",
                                      "{{json .Actor.Attributes}}"], env=env, stdout=self.sink)

    def images(self) -> set[str]:
        """What was created so far."""
        lines = self.path.read_text().splitlines()
        return {json.loads(line)["image"] for line in lines if line.strip().endswith("}")}

    def stop(self) -> set[str]:
        """Stop listening; everything created while it listened."""
        time.sleep(1)  # the last create's event is on its way
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.sink.close()
        return self.images()


@contextlib.contextmanager
def creates_on(hosts: Iterable[str | None], run_id: str, folder: Path) -> Iterator[list[ContainerCreates]]:
    """A `ContainerCreates` per engine in `hosts` (None: the main one), listening before the body runs."""
    watches = [ContainerCreates(host, run_id, folder / f"creates-{run_id}-{n}.jsonl") for n, host in enumerate(hosts)]
    time.sleep(1)  # every stream is listening
    try:
        yield watches
    finally:
        for watch in watches:
            if watch.proc.poll() is None:
                watch.stop()


def assert_engine_gone(engine: SecondEngine) -> None:
    """After stopping it: the second dockerd exited, its bridge and folders are gone, the main engine's docker0 is
    still there."""
    assert engine.process is not None and engine.process.poll() is not None
    assert not engine.bridge_exists() and not engine.root.exists()
    assert subprocess.run(["ip", "link", "show", "docker0"], capture_output=True).returncode == 0


def assert_nothing_left(cluster: TwoNodeCluster, engine: SecondEngine) -> None:
    """After stopping both: no process of the cluster and none of the second engine (`assert_engine_gone`)."""
    assert not cluster.processes() and not cluster.temp.exists()
    assert_engine_gone(engine)


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _processes_mentioning(text: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if text in " ".join(proc.info["cmdline"] or []) and proc.pid != os.getpid():
                found.append(proc)
        except psutil.Error:
            continue
    return found
