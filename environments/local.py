"""LocalRuntime: a temporary git checkout on the host, for fast tests and for users without Docker.

Commands run with bash on the host, each in its own session (process group); when the command exits or times out,
the whole group is killed, so forked children never outlive the step (stateless commands). There is no isolation:
use DockerRuntime for anything untrusted.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
import weakref
from pathlib import Path

from pinpoint.environments.files import process_tempdir
from pinpoint.environments.runtime import RuntimeBroken
from pinpoint.environments.worktree import GitWorktreeRuntime, OutputBuffer, RawResult

#: seconds to wait for the output pipe to close after the process group was killed
_DRAIN_GRACE_S = 5.0


def _git(*args: str, cwd: str | os.PathLike | None = None) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ValueError(f"git {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout.strip()


def clone_checkout(source: str | os.PathLike, dest: str | os.PathLike, base_commit: str | None = None) -> str:
    """Clone `source` (repository path, bare repository or URL) into `dest` at `base_commit`; return its sha.

    Without `base_commit`, the source's HEAD is used; a source whose HEAD names no commit (a bare repository whose
    default branch is missing) is an error listing the branches it has.
    """
    _git("clone", "--quiet", "--no-checkout", str(source), str(dest))
    target = base_commit or "HEAD"
    try:
        sha = _git("rev-parse", "--verify", "--quiet", f"{target}^{{commit}}", cwd=dest)
    except ValueError:
        branches = _git("branch", "-r", "--format=%(refname:short)", cwd=dest).split()
        hint = f"; its branches: {', '.join(branches[:5])}{' …' if len(branches) > 5 else ''}" if branches else ""
        raise ValueError(
            f"{source} has no commit {target!r}"
            + (" (pass base_commit)" if base_commit is None else "")
            + hint
        ) from None
    _git("checkout", "--quiet", "--detach", sha, cwd=dest)
    return sha


class LocalRuntime(GitWorktreeRuntime):
    """A fresh clone of `source` at `base_commit` in a temporary folder; `close()` deletes it."""

    def __init__(self, source: str | os.PathLike, base_commit: str | None = None, *,
                 checkout_first_on_path: bool = False, extra_files: dict[str, bytes] | None = None) -> None:
        """`checkout_first_on_path`: put the clone (and its `src/`) first on PYTHONPATH of every command, so tests
        import the code under repair even when the caller's environment points at the user's own checkout.
        `extra_files` ({path: content}) are written into the clone before its base state is recorded, so they
        survive every reset (files a build generates, which git ignores)."""
        self._root = str(process_tempdir("pinpoint-local-"))
        # deleted at close(), or when the runtime is garbage-collected / the interpreter exits without close();
        # after a SIGKILL, by the next LocalRuntime (`process_tempdir`)
        self._cleanup = weakref.finalize(self, shutil.rmtree, self._root, ignore_errors=True)
        self.workdir = os.path.join(self._root, "repo")
        self.scratch_dir = os.path.join(self._root, "scratch")  # not the host's shared /tmp: runs side by side
        self._closed = False
        self._env: dict[str, str] = {}
        if checkout_first_on_path:
            entries = [self.workdir, os.path.join(self.workdir, "src"), os.environ.get("PYTHONPATH", "")]
            self._env["PYTHONPATH"] = os.pathsep.join(e for e in entries if e)
        try:
            clone_checkout(source, self.workdir, base_commit)
            for path, content in (extra_files or {}).items():
                self._path(path).parent.mkdir(parents=True, exist_ok=True)
                self._path(path).write_bytes(content)
            self._snapshot()
        except BaseException:
            self.close()
            raise

    def _path(self, path: str) -> Path:
        return Path(self.workdir, path)

    def _check_open(self) -> None:
        if self._closed or not os.path.isdir(self.workdir):
            raise RuntimeBroken(f"local checkout {self.workdir} is closed or was deleted; create a new LocalRuntime")

    def _exec(self, command: str, timeout: float, env: dict[str, str] | None = None) -> RawResult:
        self._check_open()
        start = time.monotonic()
        proc = subprocess.Popen(
            ["bash", "-c", command],
            cwd=self.workdir,
            env={**os.environ, **self._env, **(env or {})},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        buffer = OutputBuffer()
        reader = threading.Thread(target=_pump, args=(proc.stdout, buffer), daemon=True)
        reader.start()
        timed_out = False
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            _kill_group(proc.pid)
            proc.wait()
            reader.join(_DRAIN_GRACE_S)
            if not reader.is_alive():  # a child that left the group (setsid) may still hold the pipe
                proc.stdout.close()
        return RawResult(None if timed_out else proc.returncode, buffer.getvalue(), timed_out,
                         time.monotonic() - start)

    def read_file(self, path: str) -> bytes:
        self._check_open()
        return self._path(path).read_bytes()

    def write_file(self, path: str, data: bytes | str) -> None:
        self._check_open()
        target = self._path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)

    def reset(self) -> None:
        self._check_open()
        self._reset_tree()

    def close(self) -> None:
        self._closed = True
        self._cleanup()


def _pump(stream, buffer: OutputBuffer) -> None:
    while chunk := stream.read1(65536):
        buffer.add(chunk)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
