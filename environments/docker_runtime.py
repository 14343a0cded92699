"""DockerRuntime: a repository inside a running container, driven through the docker SDK.

One long-lived container per runtime (PID 1 is docker's init, which reaps orphans) with memory, CPU and process
limits, no network unless asked, and pinpoint's labels. Each `run` is a fresh `docker exec` of a small wrapper that
starts the command in its own session (`setsid`) and kills that whole process group when the command exits; on
timeout the host kills the group through a second exec. `reset()` restores the tree in place (git scripts shared
with LocalRuntime) and recreates the container only when it is broken or base-state artefacts went missing.
"""

from __future__ import annotations

import contextlib
import posixpath
import tarfile
import threading
import time
import uuid
from io import BytesIO

import docker
import requests

from environments import engine
from environments.labels import container_labels
from environments.runtime import RuntimeBroken, RuntimeFailure
from environments.worktree import GitWorktreeRuntime, OutputBuffer, RawResult

#: runs "$1" in a new session, records its pgid in "$2", and kills that group when the command ends
_WRAPPER = r"""setsid bash -c "$1" </dev/null & p=$!
echo "$p" > "$2"
wait "$p"; rc=$?
kill -KILL -- "-$p" 2>/dev/null
rm -f "$2"
exit "$rc"
"""
_KILL = r"""for _ in $(seq 100); do [ -s "$1" ] && break; sleep 0.02; done
kill -KILL -- "-$(cat "$1")" 2>/dev/null; rm -f "$1"
"""
_PID_DIR = "/tmp/.pinpoint"
_STAGE_DIR = "/tmp/.pinpoint/stage"
#: seconds to wait for the output stream to end after the group was killed
_DRAIN_GRACE_S = 10.0


class DockerRuntime(GitWorktreeRuntime):
    """The git working tree at `workdir` in a container of `image`; base commit = its HEAD at container start."""

    def __init__(
        self,
        image: str,
        workdir: str = "/testbed",
        *,
        network: bool = False,
        mem_limit: str = "4g",
        cpus: float = 1.0,
        pids_limit: int = 1024,
        env: dict[str, str] | None = None,
        client: docker.DockerClient | None = None,
        labels: dict[str, str] | None = None,
    ) -> None:
        self.image = image
        self.workdir = workdir
        self._client = client or engine.client()
        self._create_kwargs = dict(
            network_mode="bridge" if network else "none",
            mem_limit=mem_limit,
            memswap_limit=mem_limit,
            nano_cpus=int(cpus * 1e9),
            pids_limit=pids_limit,
            environment=dict(env or {}),
            labels=container_labels(**{"pinpoint.image": image, **(labels or {})}),
            working_dir=workdir,
        )
        self._closed = False
        self.container = None
        self._start()

    # -- container lifecycle -------------------------------------------------------------------------------------
    def _start(self) -> None:
        try:
            self.container = self._client.containers.run(
                self.image, ["sleep", "infinity"], detach=True, init=True, **self._create_kwargs)
        except docker.errors.ImageNotFound as exc:
            raise RuntimeFailure(f"image {self.image!r} does not exist; build it first") from exc
        try:
            self._snapshot()
        except BaseException:
            self._remove()
            raise

    def _remove(self) -> None:
        if self.container is not None:
            with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                self.container.remove(force=True)
            self.container = None

    def _broken(self, why: str) -> RuntimeBroken:
        name = self.container.short_id if self.container is not None else "(none)"
        return RuntimeBroken(f"container {name} of image {self.image} is not usable: {why}. "
                             "Call reset() to recreate it from the image.")

    def _status(self) -> str:
        try:
            self.container.reload()
        except docker.errors.NotFound:
            return "removed"
        return self.container.status

    def is_alive(self) -> bool:
        return not self._closed and self.container is not None and self._status() == "running"

    # -- commands ------------------------------------------------------------------------------------------------
    def _exec_create(self, argv: list[str], env: dict[str, str] | None = None) -> str:
        if self._closed:
            raise RuntimeBroken(f"runtime on {self.image} is closed")
        if self.container is None:
            raise self._broken("it was never started or could not be recreated")
        try:
            return self._client.api.exec_create(self.container.id, argv, workdir=self.workdir, environment=env)["Id"]
        except docker.errors.NotFound as exc:
            raise self._broken("it was removed") from exc
        except docker.errors.APIError as exc:
            if self._status() != "running":
                raise self._broken(f"it is {self._status()} (killed from outside or out of memory)") from exc
            raise

    def _exec(self, command: str, timeout: float, env: dict[str, str] | None = None) -> RawResult:
        start = time.monotonic()
        pidfile = f"{_PID_DIR}/{uuid.uuid4().hex}.pid"
        exec_id = self._exec_create(
            ["bash", "-c", f"mkdir -p {_PID_DIR}\n{_WRAPPER}", "pinpoint-run", command, pidfile], env)
        stream = self._client.api.exec_start(exec_id, stream=True)
        buffer = OutputBuffer()
        reader = threading.Thread(target=_pump, args=(stream, buffer), daemon=True)
        reader.start()
        reader.join(timeout)
        timed_out = reader.is_alive()
        if timed_out:
            with contextlib.suppress(RuntimeBroken, docker.errors.APIError):
                kill_id = self._exec_create(["bash", "-c", _KILL, "pinpoint-kill", pidfile])
                self._client.api.exec_start(kill_id)
            reader.join(_DRAIN_GRACE_S)
        exit_code = None if timed_out else self._client.api.exec_inspect(exec_id).get("ExitCode")
        suspicious = reader.is_alive() if timed_out else exit_code is None or exit_code >= 128
        if suspicious and self._status() != "running":  # killed by a signal: was it the whole container?
            raise self._broken(f"it stopped while running {command[:80]!r} (now {self._status()})")
        return RawResult(exit_code, buffer.getvalue(), timed_out, time.monotonic() - start)

    # -- files ---------------------------------------------------------------------------------------------------
    def _abs(self, path: str) -> str:
        return posixpath.normpath(posixpath.join(self.workdir, path))

    def read_file(self, path: str) -> bytes:
        target = self._abs(path)
        exec_id = self._exec_create(["cat", "--", target])
        out, err = self._client.api.exec_start(exec_id, demux=True)
        code = self._client.api.exec_inspect(exec_id).get("ExitCode")
        if code != 0:
            message = (err or b"").decode("utf-8", errors="replace").strip()
            if "Is a directory" in message:
                raise IsADirectoryError(target)
            if "No such file" in message or "Not a directory" in message:
                raise FileNotFoundError(target)
            if self._status() != "running":
                raise self._broken("it stopped while reading a file")
            raise OSError(f"reading {target} failed: {message}")
        return out or b""

    def write_file(self, path: str, data: bytes | str) -> None:
        """Stage the bytes with put_archive, then `cat` them over the target so its mode and owner are kept."""
        target = self._abs(path)
        payload = data.encode("utf-8") if isinstance(data, str) else data
        staged = f"{_STAGE_DIR}/{uuid.uuid4().hex}"
        archive = BytesIO()
        with tarfile.open(fileobj=archive, mode="w") as tar:
            info = tarfile.TarInfo(staged.lstrip("/"))
            info.size = len(payload)
            tar.addfile(info, BytesIO(payload))
        try:
            self.container.put_archive("/", archive.getvalue())
        except docker.errors.NotFound as exc:
            raise self._broken("it was removed") from exc
        except docker.errors.APIError as exc:
            if self._status() != "running":
                raise self._broken(f"it is {self._status()}") from exc
            raise
        script = 'mkdir -p -- "$(dirname -- "$2")" && cat -- "$1" > "$2"; rc=$?; rm -f -- "$1"; exit $rc'
        exec_id = self._exec_create(["bash", "-c", script, "pinpoint-write", staged, target])
        output = self._client.api.exec_start(exec_id)
        if self._client.api.exec_inspect(exec_id).get("ExitCode") != 0:
            raise OSError(f"writing {target} failed: {output.decode('utf-8', errors='replace').strip()}")

    # -- state ---------------------------------------------------------------------------------------------------
    def reset(self, *, recreate: bool = False) -> None:
        """Restore the base state in place; recreate the container when broken, when asked, or when in-place
        restoration is not enough (base-state artefacts were deleted). `recreate=True` also undoes changes outside
        the working tree (packages installed, files in /tmp)."""
        if self._closed:
            raise RuntimeBroken(f"runtime on {self.image} is closed")
        if not recreate and self.container is not None:
            try:
                if self._reset_tree():
                    return
            except (RuntimeBroken, RuntimeFailure, docker.errors.APIError, requests.RequestException):
                pass
        self._remove()
        self._start()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._remove()


def _pump(stream, buffer: OutputBuffer) -> None:
    with contextlib.suppress(requests.RequestException, OSError):  # the container died mid-stream
        for chunk in stream:
            buffer.add(chunk)
