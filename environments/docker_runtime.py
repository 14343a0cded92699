"""DockerRuntime: a repository inside a running container, driven through the docker SDK.

One long-lived container per runtime (PID 1 is docker's init, which reaps orphans) with memory, CPU, process and disk
limits, no network unless asked, every capability dropped but the two the command server needs (commands themselves
get none), `no-new-privileges`, and pinpoint's labels (environments/sandbox.py says why each). Commands reach it
through one of two channels:

- `server` (default): environments/container_server.py runs in the container (put there by the archive API, no host
  folder mounted) and listens on a Unix socket in a container-internal tmpfs, which the host reaches through
  `/proc/<pid>/root`; each command is a fresh `bash -c` forked by it. A few ms per command instead of the ~100+ ms
  of engine work a `docker exec` costs, which is what makes `reset()` fast.
- `exec` (fallback, when the image has no python3 or this process cannot reach the container's /proc root, e.g. a
  remote DOCKER_HOST or a non-root user): each command is a `docker exec` of a wrapper that runs it under `setsid`;
  on timeout the host kills the group through a second exec.

Either way each command runs in its own process group, killed on timeout and when the command ends (stateless
commands; the server also sweeps whatever escaped the group). `reset()` restores the tree in place with the git
scripts shared with LocalRuntime and recreates the container only when it is broken, when asked, when base-state
artefacts went missing, or when a command passed the disk limit.
"""

from __future__ import annotations

import contextlib
import errno as errno_codes
import os
import posixpath
import shlex
import socket
import subprocess
import tarfile
import threading
import time
import uuid
import warnings
import weakref
from io import BytesIO
from pathlib import Path

import docker
import requests
from pinpoint.environments import engine, sandbox, wire
from pinpoint.environments.labels import container_labels
from pinpoint.environments.overlay import Entry, Layers
from pinpoint.environments.runtime import BrokenFromInside, RuntimeBroken, RuntimeFailure, RuntimeSettings
from pinpoint.environments.sandbox import CTL_DIR, SERVER_HOME, DiskMeter
from pinpoint.environments.worktree import GitWorktreeRuntime, OutputBuffer, RawResult

#: where the command server keeps pristine copies of the working tree (inside its own folder, out of commands' reach)
PRISTINE_STORE = f"{SERVER_HOME}/pristine"
#: working trees larger than this are reset with git instead of from pristine copies
PRISTINE_LIMIT_BYTES = 1 << 30
#: seconds to wait for the command server's socket before falling back to docker exec
SERVER_START_TIMEOUT_S = 15.0

#: exec channel: runs "$1" in a new session, records its pgid in "$2", kills that group when the command ends
_WRAPPER = r"""mkdir -p /tmp/.pinpoint
drop=()  # the server's capabilities, if this container has them, are not for commands
[ "$(id -u)" != 0 ] || grep -q '^CapBnd:[[:space:]]*0*$' /proc/self/status || ! command -v setpriv >/dev/null ||
  drop=(setpriv "--bounding-set=-all$3" --inh-caps=-all --)
setsid "${drop[@]}" bash -c "$1" </dev/null & p=$!
echo "$p" > "$2"
wait "$p"; rc=$?
kill -KILL -- "-$p" 2>/dev/null
rm -f "$2"
exit "$rc"
"""
_KILL = r"""for _ in $(seq 100); do [ -s "$1" ] && break; sleep 0.02; done
kill -KILL -- "-$(cat "$1")" 2>/dev/null; rm -f "$1"
"""
#: seconds allowed beyond a command's timeout for the kill and the last output to arrive
_GRACE_S = 15.0


#: address ranges the internet does not route: a connect to them hangs until its timeout there
PRIVATE_RANGES = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")


def route_private_addresses_nowhere(container) -> str | None:
    """Make a network-less container's connects to private addresses hang, as they do on the internet.

    Without a network a connect fails at once (no route), which fails tests that expect a timeout from an
    unroutable address (requests' connect-timeout tests use 10.255.255.1). Routing the private ranges into the
    loopback device drops the packets silently; the name servers stay unreachable so lookups still fail at once.
    Done from the host with nsenter, so the container needs no privileges. Returns what went wrong, or None.
    """
    container.reload()
    pid = container.attrs["State"]["Pid"]
    routes = [["ip", "route", "add", cidr, "dev", "lo"] for cidr in PRIVATE_RANGES]
    with contextlib.suppress(OSError, KeyError):
        for line in Path(container.attrs["ResolvConfPath"]).read_text().splitlines():
            fields = line.split()
            if len(fields) == 2 and fields[0] == "nameserver" and ":" not in fields[1]:
                routes.append(["ip", "route", "add", "unreachable", f"{fields[1]}/32"])
    for route in routes:
        try:
            done = subprocess.run(["nsenter", "-t", str(pid), "-n", *route], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{' '.join(route)}: {exc}"
        if done.returncode != 0:
            return f"{' '.join(route)}: {done.stderr.strip()}"
    return None


class _ChannelLost(Exception):
    """The command channel failed; the caller decides whether the container is dead."""


class DockerRuntime(GitWorktreeRuntime):
    """The git working tree at `workdir` in a container of `image`; base commit = its HEAD at container start."""

    def __init__(
        self,
        image: str,
        workdir: str = "/testbed",
        *,
        settings: RuntimeSettings | None = None,
        cpus: float | None = None,
        network: bool = False,
        private_addresses_hang: bool = False,
        env: dict[str, str] | None = None,
        client: docker.DockerClient | None = None,
        labels: dict[str, str] | None = None,
    ) -> None:
        """A box of `image` with the sandbox limits of `settings` (`runtime.*`); `cpus` is the caller's sizing
        (a SWE-bench spec's quota), else `settings.cpus`, else 1."""
        settings = settings or RuntimeSettings()
        cpus = cpus or settings.cpus or 1.0
        self.image = image
        self.workdir = workdir
        self._client = client or engine.client()
        self._own_client = client is None  # closed with the runtime (its pooled connections are file descriptors)
        self._want_server = settings.channel == "server"
        self._keep_caps = sandbox.capability_numbers(settings.command_capabilities)
        self._keep_caps_text = "".join(f",+{n.strip().lower().removeprefix('cap_')}"
                                       for n in settings.command_capabilities.split(",") if n.strip())
        self.command_uid = sandbox.command_uid(settings.command_user)
        self.disk_limit = settings.disk_limit or None
        self.disk_limit_bytes = sandbox.parse_size(self.disk_limit) if self.disk_limit else None
        self._disk_check_s = settings.disk_check_s
        self.mem_limit, self.pids_limit = settings.mem_limit, settings.pids_limit
        self._create_kwargs = dict(
            network_mode="bridge" if network else "none",
            mem_limit=settings.mem_limit,
            memswap_limit=settings.mem_limit,
            nano_cpus=int(cpus * 1e9),
            pids_limit=settings.pids_limit,
            environment=dict(env or {}),
            labels=container_labels(**{"pinpoint.image": image, **(labels or {})}),
            working_dir=workdir,
            **sandbox.hardening_kwargs(settings.command_capabilities, server=self._want_server,
                                       user=self.command_uid is not None),
        )
        self._private_addresses_hang = private_addresses_hang and not network
        self._closed = False
        self.container = None
        self._disk: DiskMeter | None = None
        #: how the disk limit is enforced: "quota" (the storage driver), "watchdog" (DiskMeter), or None (no limit)
        self.disk_bound: str | None = None
        self._recreate_next_reset = False
        self._ctl_root = ""
        # what close() releases, also when the runtime is garbage-collected or the interpreter exits without close()
        self._owned = _Owned()
        self._cleanup = weakref.finalize(self, self._owned.release)
        self.channel = "exec"
        self._fast_reset = False
        #: in-place resets keep the tree's bytecode of unchanged base files that `trust_bytecode` recorded (the
        #: command server's `keep_bytecode`: a grader box that runs the same tests again); False: every file
        #: created since the start goes
        self.keep_bytecode = False
        self._layers: Layers | None = None
        #: `outside_tree()` right after the container started (None: not readable here): what a reused box is
        #: compared with before anything has recorded a later state
        self.outside_at_start: dict[str, Entry] | None = None
        #: idle connections to the command server, reused between requests (only by the process that made them)
        self._conns: list[socket.socket] = []
        self._conns_lock = threading.Lock()
        self._conns_pid = os.getpid()
        try:
            self._start()
        except BaseException:
            self.close()
            raise

    # -- container lifecycle -------------------------------------------------------------------------------------
    @property
    def _sock(self) -> str:
        return f"{self._ctl_root}{CTL_DIR}/sock"

    @property
    def _failed(self) -> str:
        return f"{self._ctl_root}{CTL_DIR}/failed"

    def _create(self):
        """Create (not start) the container, with a disk quota where the storage driver has one."""
        main = sandbox.main_command(self._want_server)
        quota = sandbox.storage_quota(self._client, self.disk_limit) if self.disk_limit else {}
        try:
            return self._client.containers.create(self.image, main, init=True, **self._create_kwargs, **quota)
        except docker.errors.APIError as exc:
            if not quota or not sandbox.quota_refused(exc):
                raise
            sandbox.forget_quota(self._client)  # e.g. overlay2 on xfs without pquota: the watchdog bounds it
            return self._client.containers.create(self.image, main, init=True, **self._create_kwargs)

    def _start(self) -> None:
        try:
            self.container = self._create()
        except docker.errors.ImageNotFound as exc:
            raise RuntimeFailure(f"image {self.image!r} does not exist; build it first") from exc
        self._owned.container = self.container
        self._recreate_next_reset = False
        if self._want_server:
            self.container.put_archive("/", sandbox.server_archive())
        self.container.start()
        self.container.reload()
        sandbox.lock_engine_files(self.container)
        self._ctl_root = f"/proc/{self.container.attrs['State']['Pid']}/root"
        self._layers = Layers.of(self.container.attrs)
        quota = bool(self.container.attrs["HostConfig"].get("StorageOpt"))
        self.disk_bound = None if not self.disk_limit_bytes else "quota" if quota else "watchdog"
        self._disk = (DiskMeter(self._client, self.container, self.disk_limit_bytes)
                      if self.disk_bound == "watchdog" else None)
        if self._private_addresses_hang:
            problem = route_private_addresses_nowhere(self.container)
            if problem:
                warnings.warn(f"connections to private addresses will fail at once, not hang: {problem}",
                              stacklevel=2)
        self.channel = "server" if self._want_server and self._wait_for_server() else "exec"
        try:
            self._give_tree()
            self._snapshot()
        except BaseException:
            self._remove()
            raise
        self.outside_at_start = self.outside_tree()

    def _give_tree(self) -> None:
        """With a command user: the working tree (and .git) becomes theirs, and they get a home folder."""
        if self.command_uid is None:
            return
        uid, home = self.command_uid, sandbox.COMMAND_HOME
        if self.channel == "server":
            try:
                done = self._call(wire.Own(self.workdir, uid, uid, home), wait_s=300)
            except _ChannelLost as exc:
                raise self._lost(exc, "handing the tree to the command user") from exc
            if not done.ok:
                raise RuntimeFailure(f"could not hand {self.workdir} to uid {uid}: {done.message}")
            return
        script = f"mkdir -p {home} /tmp/.pinpoint && chown -R {uid}:{uid} {home} /tmp/.pinpoint {shlex.quote(self.workdir)}"
        exec_id = self._exec_create(["sh", "-c", script], user="0")
        output = self._client.api.exec_start(exec_id)
        if self._client.api.exec_inspect(exec_id).get("ExitCode") != 0:
            raise RuntimeFailure(f"could not hand {self.workdir} to uid {uid}: {output.decode(errors='replace')}")

    def _snapshot(self) -> None:
        """The git base state (diff, fallback reset), plus the server's pristine copy for process-free resets."""
        super()._snapshot()
        self._fast_reset = False
        if self.channel == "server":
            request = wire.Snapshot(self.workdir, PRISTINE_STORE, self.base_commit, PRISTINE_LIMIT_BYTES)
            try:
                self._fast_reset = self._call(request, wait_s=300).ok
            except _ChannelLost as exc:
                raise self._lost(exc, "recording the base state") from exc

    def _wait_for_server(self) -> bool:
        if not os.access(self._ctl_root, os.X_OK):  # not root on the engine's machine: no way in but exec
            return False
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while time.monotonic() < deadline:
            if os.path.exists(self._sock):
                return True
            if os.path.exists(self._failed):  # no python3 (or too old): the exec channel takes over
                return False
            time.sleep(0.005)
        if self._status() != "running":
            raise RuntimeFailure(f"container of {self.image} exited at start: "
                                 f"{self.container.logs(tail=20).decode(errors='replace')}")
        return False  # no python3 in the image

    def _remove(self) -> None:
        self._drop_connections()
        self._owned.remove_container()
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

    def alive(self) -> bool:
        """Whether the container takes commands, without starting one: a connect to its command server (refused
        when the container or the server died), or the engine's status on the exec channel. The warm pool's probe."""
        if self._closed or self.container is None:
            return False
        if self.channel != "server":
            return self._status() == "running"
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.settimeout(2.0)
        try:
            probe.connect(self._sock)
            return True
        except OSError:
            return False
        finally:
            probe.close()

    def _check_usable(self) -> None:
        if self._closed:
            raise RuntimeBroken(f"runtime on {self.image} is closed")
        if self.container is None:
            raise self._broken("it was never started or could not be recreated")

    def _lost(self, exc: Exception, doing: str) -> Exception:
        """The error to raise when a channel failed: RuntimeBroken if the container died, else RuntimeFailure."""
        status = self._status()
        if status != "running":
            return self._broken(f"it is {status} (killed from outside or out of memory) while {doing}")
        if self.channel == "server" and self._server_died():
            name = self.container.short_id if self.container is not None else "(none)"
            return BrokenFromInside(f"container {name} of image {self.image} is not usable: its command server was "
                                    f"killed from inside the container while {doing}. Call reset() to recreate it.")
        return RuntimeFailure(f"lost contact with the container while {doing} ({exc})")

    def _server_died(self, within_s: float = 2.0) -> bool:
        """Whether the server's shell marked it dead (it does so right after the server exits)."""
        deadline = time.monotonic() + within_s
        while not os.path.exists(self._failed):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True

    # -- server channel ------------------------------------------------------------------------------------------
    def _connection(self) -> socket.socket:
        """An idle connection to the command server (kept between requests), or a new one."""
        with self._conns_lock:
            if self._conns_pid != os.getpid():  # a forked child must not share its parent's connections
                self._conns, self._conns_pid = [], os.getpid()
            if self._conns:
                return self._conns.pop()
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(self._sock)
        except OSError:
            conn.close()
            raise
        return conn

    def _drop_connections(self) -> None:
        with self._conns_lock:
            conns, self._conns = self._conns, []
        for conn in conns:
            conn.close()

    def _call(self, request: tuple, payload: bytes = b"", sink: OutputBuffer | None = None,
              wait_s: float = 60.0, tick: _DiskWatch | None = None) -> wire.Status | wire.RunStatus:
        """One request to the command server; data frames go to `sink`; returns the final status. `tick` (the disk
        watch of a running command) is called every `disk_check_s` while the request is open."""
        conn = None
        try:
            conn = self._connection()
            conn.sendall(wire.encode_request(request, payload))
            kind, data = _read_frames(conn, sink, time.monotonic() + wait_s, tick)
        except (OSError, EOFError) as exc:
            if conn is not None:
                conn.close()
            raise _ChannelLost(str(exc) or type(exc).__name__) from exc
        with self._conns_lock:
            if self._conns_pid == os.getpid() and not self._closed:
                self._conns.append(conn)
                conn = None
        if conn is not None:
            conn.close()
        return wire.decode_final(kind, data)

    # -- exec channel --------------------------------------------------------------------------------------------
    def _exec_create(self, argv: list[str], env: dict[str, str] | None = None, user: str = "0") -> str:
        try:
            return self._client.api.exec_create(self.container.id, argv, workdir=self.workdir, environment=env,
                                                user=user)["Id"]
        except docker.errors.APIError as exc:
            raise self._lost(exc, "starting a command") from exc

    def _exec_run(self, command: str, timeout: float, env: dict[str, str] | None,
                  buffer: OutputBuffer) -> wire.RunStatus:
        pidfile = f"/tmp/.pinpoint/{uuid.uuid4().hex}.pid"
        user = self._exec_user
        if self.command_uid is not None:
            env = {"HOME": sandbox.COMMAND_HOME, **(env or {})}
        exec_id = self._exec_create(["bash", "-c", _WRAPPER, "pinpoint-run", command, pidfile, self._keep_caps_text],
                                    env, user=user)
        stream = self._client.api.exec_start(exec_id, stream=True)
        reader = threading.Thread(target=_pump, args=(stream, buffer), daemon=True)
        reader.start()
        reader.join(timeout)
        if reader.is_alive():
            with contextlib.suppress(RuntimeBroken, RuntimeFailure, docker.errors.APIError):
                self._client.api.exec_start(self._exec_create(["bash", "-c", _KILL, "pinpoint-kill", pidfile]))
            reader.join(_GRACE_S)
            if reader.is_alive():
                raise _ChannelLost("the command's output did not end after it was killed")
            return wire.RunStatus(None, True, False, False, 0)
        return wire.RunStatus(self._client.api.exec_inspect(exec_id).get("ExitCode"), False, False, False, 0)

    @property
    def _exec_user(self) -> str:
        """Who `docker exec` runs a command or file operation as: root, or the command user and its group."""
        return "0" if self.command_uid is None else f"{self.command_uid}:{self.command_uid}"

    # -- Runtime -------------------------------------------------------------------------------------------------
    def _exec(self, command: str, timeout: float, env: dict[str, str] | None = None) -> RawResult:
        self._check_usable()
        start = time.monotonic()
        buffer = OutputBuffer()
        server = self.channel == "server"
        watch = _DiskWatch(self, threaded=not server) if self._disk is not None else None
        try:
            if server:
                request = wire.Run(command, self.workdir, env or {}, timeout, self._keep_caps)
                status = self._call(request, sink=buffer, wait_s=timeout + _GRACE_S, tick=watch)
            else:
                status = self._exec_run(command, timeout, env, buffer)
        except _ChannelLost as exc:
            raise self._lost(exc, f"running {command[:80]!r}") from exc
        finally:
            if watch is not None:
                watch.finish()
        exit_code = status.exit_code
        stopped_by = self._stopped_by(status, watch)
        if (not status.timed_out and not stopped_by and (exit_code is None or exit_code >= 128)
                and self._status() != "running"):
            raise self._broken(f"it stopped while running {command[:80]!r}")
        return RawResult(exit_code, buffer.getvalue(), status.timed_out, time.monotonic() - start, stopped_by)

    def _stopped_by(self, status: wire.RunStatus, watch: _DiskWatch | None) -> str | None:
        """Which limit ended or hindered the command, in words for the model and the episode's status."""
        if watch is not None and watch.exceeded:
            self._recreate_next_reset = True  # what it wrote outside the tree is only undone by a new container
            return (f"disk: the container wrote {watch.used / 2**30:.1f} GiB, over runtime.disk_limit="
                    f"{self.disk_limit}; the command was killed and the next reset() starts a fresh container")
        if status.oom_killed:
            return f"memory: out of memory (runtime.mem_limit={self.mem_limit}); the kernel killed a process"
        if status.pids_limit_hit:
            return f"pids: the process limit was reached (runtime.pids_limit={self.pids_limit}); forks failed"
        return None

    def _stop_commands(self) -> None:
        """Kill every running command (the disk watchdog's way to stop a filler)."""
        if self.channel == "server":
            with contextlib.suppress(_ChannelLost):
                self._call(wire.Stop(), wait_s=30)
        else:
            with contextlib.suppress(docker.errors.APIError, RuntimeFailure):
                self._client.api.exec_start(self._exec_create(
                    ["bash", "-c", "for f in /tmp/.pinpoint/*.pid; do kill -KILL -- -$(cat $f); done"]))

    def _abs(self, path: str) -> str:
        return posixpath.normpath(posixpath.join(self.workdir, path))

    def read_file(self, path: str) -> bytes:
        self._check_usable()
        target = self._abs(path)
        if self.channel == "server":
            data = OutputBuffer(limit=1 << 62)
            try:
                status = self._call(wire.Read(target), sink=data)
            except _ChannelLost as exc:
                raise self._lost(exc, f"reading {target}") from exc
            _raise_os_error(status, target)
            return data.getvalue()
        exec_id = self._exec_create(["cat", "--", target], user=self._exec_user)
        out, err = self._client.api.exec_start(exec_id, demux=True)
        if self._client.api.exec_inspect(exec_id).get("ExitCode") != 0:
            message = (err or b"").decode("utf-8", errors="replace")
            code = (errno_codes.EISDIR if "Is a directory" in message else
                    errno_codes.ENOENT if "No such file" in message or "Not a directory" in message else None)
            _raise_os_error(wire.Status.failed(message.strip(), "OSError", code), target)
        return out or b""

    def write_file(self, path: str, data: bytes | str) -> None:
        self._check_usable()
        target = self._abs(path)
        payload = data.encode("utf-8") if isinstance(data, str) else data
        if self.channel == "server":
            try:
                status = self._call(wire.Write(target), payload)
            except _ChannelLost as exc:
                raise self._lost(exc, f"writing {target}") from exc
            _raise_os_error(status, target)
            return
        # exec channel: stage with put_archive, then `cat` over the target so its mode and owner are kept
        staged = f"/tmp/.pinpoint/stage-{uuid.uuid4().hex}"
        archive = BytesIO()
        with tarfile.open(fileobj=archive, mode="w") as tar:
            info = tarfile.TarInfo(staged.lstrip("/"))
            info.size = len(payload)
            info.uid = info.gid = self.command_uid or 0
            tar.addfile(info, BytesIO(payload))
        try:
            self.container.put_archive("/", archive.getvalue())
        except docker.errors.APIError as exc:
            raise self._lost(exc, f"writing {target}") from exc
        script = 'mkdir -p -- "$(dirname -- "$2")" && cat -- "$1" > "$2"; rc=$?; rm -f -- "$1"; exit $rc'
        exec_id = self._exec_create(["bash", "-c", script, "pinpoint-write", staged, target], user=self._exec_user)
        output = self._client.api.exec_start(exec_id)
        if self._client.api.exec_inspect(exec_id).get("ExitCode") != 0:
            raise OSError(f"writing {target} failed: {output.decode('utf-8', errors='replace').strip()}")

    def reset(self, *, recreate: bool = False) -> None:
        """Restore the base state in place; recreate the container when broken, when asked, or when in-place
        restoration is not enough (base-state artefacts were deleted). `recreate=True` also undoes changes outside
        the working tree (packages installed, files in /tmp)."""
        if self._closed:
            raise RuntimeBroken(f"runtime on {self.image} is closed")
        if not recreate and self.container is not None and not self._recreate_next_reset:
            with contextlib.suppress(_ChannelLost):
                if self._fast_reset and self._call(wire.Reset(self.workdir, self.keep_bytecode)).ok:
                    return
            with contextlib.suppress(RuntimeFailure, docker.errors.APIError, requests.RequestException):
                if self._reset_tree():
                    return
        self._remove()
        self._start()

    def outside_tree(self, skip: tuple[str, ...] = ()) -> dict[str, Entry] | None:
        """What the container wrote outside the working tree (its upper layer, environments/overlay.py), but
        pinpoint's own folder and `skip`; None when this engine's storage cannot be read from here."""
        self._check_usable()
        if self._layers is None:
            return None
        return self._layers.listing((self.workdir, SERVER_HOME, *skip))

    @property
    def layers(self) -> Layers | None:
        """The container's overlay2 layers on the host, when readable here (see `outside_tree`)."""
        return self._layers

    def digest(self, patterns: list[str] | None, *, stats: bool = False) -> str | None:
        """sha256 of the working tree's files whose name matches `patterns` (None: all), or with `stats` of every
        entry's lstat (changes whenever anything is written there); None off the server channel. Reads only, starts
        no process."""
        self._check_usable()
        if self.channel != "server":
            return None
        try:
            status = self._call(wire.Digest(self.workdir, patterns, stats), wait_s=120)
        except _ChannelLost as exc:
            raise self._lost(exc, "hashing the working tree") from exc
        return status.result.get("sha256") if status.ok else None

    def trust_bytecode(self) -> int | None:
        """Record the tree's bytecode of unchanged base files as it is now, so that `keep_bytecode` resets keep
        exactly those files, unchanged (the command server's `trust_bytecode`); call it before any untrusted code
        ran in this container. How many were recorded; None off the server channel (nothing is kept there)."""
        self._check_usable()
        if self.channel != "server":
            return None
        try:
            status = self._call(wire.TrustBytecode(self.workdir), wait_s=120)
        except _ChannelLost as exc:
            raise self._lost(exc, "recording the tree's bytecode") from exc
        return status.result.get("trusted") if status.ok else None

    def close(self) -> None:
        self._closed = True
        self.container = None
        self._drop_connections()
        self._cleanup()
        if self._own_client:
            with contextlib.suppress(Exception):  # noqa: BLE001 - closing a pool must never mask the caller's error
                self._client.close()


class _Owned:
    """The container of one runtime; kept apart so a finalizer can release it."""

    def __init__(self) -> None:
        self.container = None

    def remove_container(self) -> None:
        if self.container is not None:
            with contextlib.suppress(docker.errors.APIError, requests.RequestException):
                self.container.remove(force=True)
            self.container = None

    def release(self) -> None:
        self.remove_container()


class _DiskWatch:
    """While one command runs: measures the container's writable layer every `disk_check_s` and once at the end,
    and stops the command when it passes the limit. Between checks a writer can overshoot by what it writes in
    that time (docs/security.md). On the server channel the thread reading the command's output calls it (no
    thread of its own); on the exec channel it runs its own thread."""

    def __init__(self, runtime: DockerRuntime, threaded: bool = True) -> None:
        self.runtime, self.used, self.exceeded = runtime, 0, False
        self.period = runtime._disk_check_s
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True) if threaded else None
        if self._thread is not None:
            self._thread.start()

    def _check(self, force: bool) -> bool:
        self.used = self.runtime._disk.used(force)
        self.exceeded = self.exceeded or self.used > self.runtime.disk_limit_bytes
        return self.exceeded

    def __call__(self) -> None:
        """One forced check; past the limit, stop the command (once)."""
        if not self.exceeded and self._check(force=True):
            self.runtime._stop_commands()

    def _loop(self) -> None:
        while not self._done.wait(self.period):
            if self._check(force=True):
                self.runtime._stop_commands()
                return

    def finish(self) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        if not self.exceeded:
            self._check(force=False)


def _read_frames(conn: socket.socket, sink: OutputBuffer | None, deadline: float,
                 tick: _DiskWatch | None = None) -> tuple[bytes, bytes]:
    """Read reply frames until the final one (`wire.STATUS`, `wire.RUN_DONE`); data frames go to `sink`.
    `tick` is called every `tick.period` seconds meanwhile, in this thread."""
    buf = bytearray()
    next_tick = time.monotonic() + tick.period if tick is not None else None
    while True:
        while len(buf) >= wire.FRAME.size:
            kind, size = wire.FRAME.unpack_from(buf)
            end = wire.FRAME.size + size
            if len(buf) < end:
                break
            data = bytes(buf[wire.FRAME.size:end])
            del buf[:end]
            if kind in (wire.STATUS, wire.RUN_DONE):
                return kind, data
            if sink is not None:
                sink.add(data)
        now = time.monotonic()
        if next_tick is not None and now >= next_tick:
            tick()
            now = time.monotonic()
            next_tick = now + tick.period
        if now >= deadline:
            raise TimeoutError("the command server did not answer in time")
        conn.settimeout(min(deadline, next_tick) - now if next_tick is not None else deadline - now)
        try:
            chunk = conn.recv(1 << 20)
        except TimeoutError:
            continue
        if not chunk:
            raise EOFError("the command server closed the connection")
        buf += chunk


def _raise_os_error(status: wire.Status, path: str) -> None:
    """Re-raise a failed file operation as the matching OSError subclass (FileNotFoundError, ...)."""
    if status.error is not None:
        if status.errno is not None:
            raise OSError(status.errno, os.strerror(status.errno), path)
        raise OSError(f"{path}: {status.message}")


def _pump(stream, buffer: OutputBuffer) -> None:
    with contextlib.suppress(requests.RequestException, OSError):  # the container died mid-stream
        for chunk in stream:
            buffer.add(chunk)
