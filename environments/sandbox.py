"""The hardening every DockerRuntime container gets: capabilities, no-new-privileges, a control channel with no
host path, and a bound on the disk a container can fill.

Why each piece (docs/security.md has the threat model and the figures):

- **Capabilities**: the container keeps only what pinpoint's command server needs to manage the box
  (`DAC_OVERRIDE`: to restore files and folders a command chmod'ed away, and to use its own folders, which belong to
  another uid; `SETPCAP`: to empty each command's bounding set). Commands run as uid 0 with *no* capability (effective,
  permitted and bounding sets empty), unless `runtime.command_capabilities` names some. With `no-new-privileges` no
  setuid binary or file capability can give any back.
- **Control channel**: the server's socket lives in a container-internal tmpfs owned by `CONTROL_UID` (mode 0700),
  which commands (uid 0 without `DAC_OVERRIDE`) cannot open; the host connects through `/proc/<pid>/root`. The
  server's source and its pristine copies of the tree sit in `SERVER_HOME`, put into the container with the engine's
  archive API before it starts, owned by `CONTROL_UID` too. No host folder is mounted; the three host files the
  engine always bind-mounts (/etc/hosts, /etc/hostname, /etc/resolv.conf) are handed to `CONTROL_UID` on the host,
  so they are read-only to commands.
- **Disk**: a storage quota (`storage_opt size`) where the engine's storage driver has one (overlay2 only on xfs with
  pquota), else a watchdog that measures the container's writable layer while each command runs and at its end, and
  stops the command when the layer passes the limit (see `DiskMeter`).
"""

from __future__ import annotations

import contextlib
import os
import re
import tarfile
from io import BytesIO
from pathlib import Path

import docker
from pinpoint.environments.errors import UsageError

#: what the container gets of the command server: its source and its wire protocol, by the names it runs under
SERVER_FILES = {"server.py": Path(__file__).with_name("container_server.py"),
                "wire.py": Path(__file__).with_name("wire.py")}
#: owner of the server's folders: a uid no process in the container runs as
CONTROL_UID = 65533
#: the server's own folder in the container (source, pristine copies); put there by archive, mode 0700
SERVER_HOME = "/.pinpoint"
#: the command server's socket folder: a container-internal tmpfs (never a host folder)
CTL_DIR = "/run/pinpoint-ctl"
#: what the server needs: see the module docstring; commands get none of them
SERVER_CAPABILITIES = ("DAC_OVERRIDE", "SETPCAP")
#: added with a command user: chown the tree to it, switch to it, signal and chmod what it owns
USER_CAPABILITIES = ("CHOWN", "SETUID", "SETGID", "KILL", "FOWNER")
#: the command user's home folder (HOME), made and handed over at start
COMMAND_HOME = "/tmp/pinpoint-home"
#: Linux capability numbers of the names `runtime.command_capabilities` accepts
CAPABILITY_NUMBERS = {
    "CHOWN": 0, "DAC_OVERRIDE": 1, "DAC_READ_SEARCH": 2, "FOWNER": 3, "FSETID": 4, "KILL": 5, "SETGID": 6,
    "SETUID": 7, "SETPCAP": 8, "NET_BIND_SERVICE": 10, "NET_RAW": 13, "IPC_LOCK": 14, "SYS_CHROOT": 18,
    "SYS_PTRACE": 19, "SYS_NICE": 23, "SYS_RESOURCE": 24, "MKNOD": 27, "AUDIT_WRITE": 29, "SETFCAP": 31,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Bytes of a size such as `10g`, `512m`, `1.5G`, `4096`; ValueError names the text."""
    match = _SIZE.match(str(text))
    if not match or float(match.group(1)) <= 0:
        raise UsageError(f"not a size: {text!r} (expected e.g. 10g, 512m, 4096)")
    return int(float(match.group(1)) * 1024 ** "bkmgt".index((match.group(2) or "b").lower()))


def capability_numbers(names: str) -> list[int]:
    """`runtime.command_capabilities` ("NET_RAW,CHOWN", case-insensitive, CAP_ prefix optional) as numbers."""
    numbers = []
    for name in filter(None, (part.strip().upper().removeprefix("CAP_") for part in names.split(","))):
        if name not in CAPABILITY_NUMBERS:
            raise UsageError(f"unknown capability {name!r}; expected one of {', '.join(sorted(CAPABILITY_NUMBERS))}")
        numbers.append(CAPABILITY_NUMBERS[name])
    return numbers


def command_uid(user: str) -> int | None:
    """`runtime.command_user`: "root" (or "0") is None, uid 0 without capabilities; a number is that uid."""
    text = str(user).strip()
    if text in ("root", "0", ""):
        return None
    if not text.isdigit():
        raise UsageError(f"runtime.command_user must be 'root' or a numeric uid, not {user!r}")
    if int(text) == CONTROL_UID:
        raise UsageError(f"uid {CONTROL_UID} is pinpoint's control uid; choose another (e.g. 1000)")
    return int(text)


def hardening_kwargs(command_capabilities: str = "", *, server: bool = True, user: bool = False) -> dict:
    """`containers.create` arguments: capabilities, no-new-privileges, the control tmpfs."""
    keep = {name.strip().upper().removeprefix("CAP_") for name in command_capabilities.split(",") if name.strip()}
    caps = set(SERVER_CAPABILITIES if server else ()) | keep
    if user:  # the server (or a root exec) hands the tree over, switches uid, and signals the user's processes
        caps |= set(USER_CAPABILITIES)
    caps = sorted(caps)
    return {
        "cap_drop": ["ALL"],
        "cap_add": caps,
        "security_opt": ["no-new-privileges"],
        "tmpfs": {CTL_DIR: f"size=1m,mode=0700,uid={CONTROL_UID}"},
    }


def server_archive() -> bytes:
    """A tar of SERVER_HOME (0700, CONTROL_UID) holding the server's files (read-only), for `put_archive("/")`."""
    out = BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        home = tarfile.TarInfo(SERVER_HOME.lstrip("/"))
        home.type, home.mode, home.uid, home.gid = tarfile.DIRTYPE, 0o700, CONTROL_UID, 0
        tar.addfile(home)
        for name, path in SERVER_FILES.items():
            source = path.read_bytes()
            info = tarfile.TarInfo(f"{SERVER_HOME.lstrip('/')}/{name}")
            info.size, info.mode, info.uid, info.gid = len(source), 0o400, CONTROL_UID, 0
            tar.addfile(info, BytesIO(source))
    return out.getvalue()


def main_command(server: bool) -> list[str]:
    """PID 1's child: the command server (when python3 exists), else a sleeper (the exec channel does the work)."""
    if not server:
        return ["sleep", "infinity"]
    return ["sh", "-c", f"python3 -I {SERVER_HOME}/server.py {CTL_DIR}/sock 2>{CTL_DIR}/server.err"
                        f" || touch {CTL_DIR}/failed; exec sleep infinity"]


#: host files the engine bind-mounts read-write into every container (in /var/lib/docker/containers/<id>/)
ENGINE_FILES = ("HostsPath", "HostnamePath", "ResolvConfPath")


def lock_engine_files(container) -> list[str]:
    """Give the engine's bind-mounted /etc/hosts, /etc/hostname and /etc/resolv.conf to CONTROL_UID on the host,
    so commands (uid 0 without DAC_OVERRIDE) can read them but not write them: they are host files, outside the
    writable layer the disk bound measures. Returns the ones this process could not change (not root here)."""
    missed = []
    for key in ENGINE_FILES:
        path = container.attrs.get(key)
        if path:
            try:
                os.chown(path, CONTROL_UID, 0)
                os.chmod(path, 0o644)
            except OSError:
                missed.append(path)
    return missed


_QUOTA_SUPPORT: dict[str, bool] = {}


def storage_quota(client: docker.DockerClient, limit: str) -> dict:
    """`storage_opt` for the limit when the storage driver enforces one, else {} (the watchdog bounds it)."""
    key = client.api.base_url
    if key not in _QUOTA_SUPPORT:
        with contextlib.suppress(docker.errors.APIError, KeyError, TypeError):
            info = client.info()
            status = dict(info.get("DriverStatus") or [])
            _QUOTA_SUPPORT[key] = (info["Driver"] in ("btrfs", "zfs", "devicemapper")
                                   or (info["Driver"] == "overlay2" and status.get("Backing Filesystem") == "xfs"))
    return {"storage_opt": {"size": limit}} if _QUOTA_SUPPORT.get(key) else {}


def quota_refused(exc: docker.errors.APIError) -> bool:
    """Whether a create failed because the driver has no quota after all (overlay2 on xfs without pquota)."""
    return "storage-opt" in str(exc).lower() or "storage opt" in str(exc).lower()


def forget_quota(client: docker.DockerClient) -> None:
    _QUOTA_SUPPORT[client.api.base_url] = False


class DiskMeter:
    """Bytes a container has written: a walk of its writable layer when this host can read it (root on the
    engine's machine: tens of ms for a tree-sized layer), else the engine's own `SizeRw` (slower).

    A walk after every command would triple a command's round trip, so `used(force=False)` walks only when the
    host filesystem's free space fell by at least half the room left since the last walk (a statvfs: microseconds);
    a remote engine is measured only by forced checks (the watchdog's, while a command runs)."""

    def __init__(self, client: docker.DockerClient, container, limit: int) -> None:
        self._client, self._id, self.limit = client, container.id, limit
        upper = ((container.attrs.get("GraphDriver") or {}).get("Data") or {}).get("UpperDir")
        self._upper = upper if upper and os.access(upper, os.R_OK | os.X_OK) else None
        self.last, self._free_then = 0, self._free()

    def _free(self) -> int | None:
        if self._upper is None:
            return None
        with contextlib.suppress(OSError):
            st = os.statvfs(self._upper)
            return st.f_bavail * st.f_frsize
        return None

    def used(self, force: bool = True) -> int:
        free = self._free()
        unmeasurable = free is None or self._free_then is None
        if not force and (unmeasurable or self._free_then - free < (self.limit - self.last) / 2):
            return self.last
        self._free_then = free
        if self._upper is None:
            with contextlib.suppress(docker.errors.APIError):
                self.last = int(self._client.api.inspect_container(self._id, size=True).get("SizeRw") or 0)
            return self.last
        self.last = _walk_bytes(self._upper)
        return self.last


def _walk_bytes(root: str) -> int:
    """Allocated bytes under `root` (st_blocks, so sparse files count what they really take)."""
    total, stack = 0, [root]
    while stack:
        with contextlib.suppress(OSError), os.scandir(stack.pop()) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    st = entry.stat(follow_symlinks=False)
                    total += st.st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
    return total
