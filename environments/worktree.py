"""Git-backed base state shared by every runtime: snapshot, diff and in-place reset as shell scripts.

Both runtimes run the same scripts through their own `_exec`, so local and container behaviour cannot drift.
The base state is recorded inside the git directory (`<gitdir>/pinpoint/`), never in the working tree or the index:

- `base`: the commit the working tree started from; `diff()` and `reset()` are relative to it even if HEAD moves.
- `keep`: untracked files that existed at the base state (an editable install's `*.egg-info`, compiled artefacts).
  They survive `reset()`; untracked files created later are removed, ignored or not. Untracked files that git would
  otherwise report are appended to `<gitdir>/info/exclude`, so they never leak into `diff()`.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass

from pinpoint.environments.runtime import LIMIT_MARKER, TIMEOUT_MARKER, CommandResult, Runtime, RuntimeFailure

#: at most this much output is kept per command; the rest is counted and noted
MAX_OUTPUT_BYTES = 8 * 1024 * 1024

#: exit status of the reset script when base-state artefacts (the `keep` list) went missing
KEEP_MISSING_EXIT = 3

# git as root on files owned by another uid (a checkout copied into a container) needs safe.directory
_GIT = "g() { git -c safe.directory='*' -c core.quotepath=false \"$@\"; }\n"

SNAPSHOT_SCRIPT = _GIT + r"""set -euo pipefail
gd=$(g rev-parse --absolute-git-dir)
mkdir -p "$gd/pinpoint" "$gd/info"
g rev-parse --verify 'HEAD^{commit}' > "$gd/pinpoint/base"
# untracked files git would report: exclude them locally so they are part of the base state, not of the diff
g ls-files -o --exclude-standard --directory | sed -e 's/[][*?!#\\]/\\&/g' -e 's|^|/|' >> "$gd/info/exclude"
g ls-files -z -o -i --exclude-standard --directory | LC_ALL=C sort -z > "$gd/pinpoint/keep"
"""

RESET_SCRIPT = _GIT + r"""set -euo pipefail
gd=$(g rev-parse --absolute-git-dir)
g reset -q --hard "$(cat "$gd/pinpoint/base")"
g clean -ffdq
LC_ALL=C comm -z -13 "$gd/pinpoint/keep" <(g ls-files -z -o -i --exclude-standard --directory | LC_ALL=C sort -z) \
  | xargs -0r rm -rf --
while IFS= read -r -d '' p; do [ -e "$p" ] || exit KEEP_MISSING; done < "$gd/pinpoint/keep"
""".replace("KEEP_MISSING", str(KEEP_MISSING_EXIT))

DIFF_SCRIPT = _GIT + r"""set -euo pipefail
gd=$(g rev-parse --absolute-git-dir)
tmp=$(mktemp); trap 'rm -f "$tmp"' EXIT
# a private copy of the index: `git add -A` must not touch the repository's real staging area; `-p` keeps its
# mtime, which git's racy-clean check compares file mtimes against (a plain copy hides a same-size edit made in
# the second the index was written)
if [ -f "$gd/index" ]; then cp -p "$gd/index" "$tmp"; else rm -f "$tmp"; fi
export GIT_INDEX_FILE="$tmp"
g add -A
g diff --cached --binary --no-color --no-ext-diff --no-renames --src-prefix=a/ --dst-prefix=b/ \
  "$(cat "$gd/pinpoint/base")"
"""


@dataclass(frozen=True)
class RawResult:
    """What `_exec` returns: raw bytes, before decoding and the timeout marker."""

    exit_code: int | None
    output: bytes
    timed_out: bool
    duration_s: float
    #: the limit that stopped or hindered the command (disk, memory, pids), in words; None when none did
    stopped_by: str | None = None


class OutputBuffer:
    """Accumulates a command's output up to MAX_OUTPUT_BYTES and counts what it drops."""

    def __init__(self, limit: int = MAX_OUTPUT_BYTES) -> None:
        self._parts: list[bytes] = []
        self._size = 0
        self._dropped = 0
        self._limit = limit

    def add(self, chunk: bytes) -> None:
        room = self._limit - self._size
        if room > 0:
            self._parts.append(chunk[:room])
            self._size += min(room, len(chunk))
        self._dropped += max(0, len(chunk) - max(room, 0))

    def getvalue(self) -> bytes:
        data = b"".join(self._parts)
        if self._dropped:
            data += f"\n[pinpoint: {self._dropped} more bytes of output dropped]\n".encode()
        return data


class GitWorktreeRuntime(Runtime):
    """A Runtime whose repository state is managed by the scripts above; subclasses provide `_exec`."""

    #: commit the working tree started from (set by `_snapshot`)
    base_commit: str

    @abc.abstractmethod
    def _exec(self, command: str, timeout: float, env: dict[str, str] | None = None) -> RawResult:
        """Run `command` with bash in `workdir`, killing its process group on timeout and when it exits."""

    def run(self, command: str, timeout: float = 60.0, env: dict[str, str] | None = None) -> CommandResult:
        raw = self._exec(command, timeout, env)
        output = raw.output.decode("utf-8", errors="replace")
        sep = "" if not output or output.endswith("\n") else "\n"
        if raw.timed_out:
            output, sep = f"{output}{sep}{TIMEOUT_MARKER.format(seconds=timeout)}\n", ""
        if raw.stopped_by:
            output = f"{output}{sep}{LIMIT_MARKER.format(why=raw.stopped_by)}\n"
        return CommandResult(raw.exit_code, output, raw.timed_out, raw.duration_s, raw.stopped_by)

    def _script(self, script: str, what: str, timeout: float = 120.0) -> RawResult:
        raw = self._exec(script, timeout)
        if raw.timed_out or raw.exit_code != 0:
            tail = raw.output[-2000:].decode("utf-8", errors="replace")
            raise RuntimeFailure(f"{what} failed in {self.workdir} (exit {raw.exit_code}): {tail}")
        return raw

    def _snapshot(self) -> None:
        """Record the current tree as the base state (called once when the runtime starts)."""
        raw = self._script(SNAPSHOT_SCRIPT + 'cat "$gd/pinpoint/base"\n', "recording the base state")
        self.base_commit = raw.output.decode().strip().splitlines()[-1]

    def rebase(self) -> None:
        """Record the tree as it is now (its HEAD, committed) as the base state that `diff()` and `reset()` are
        relative to: a row's setup state, committed in the box, becomes where its episode and grading start."""
        self._snapshot()

    def diff(self) -> str:
        """Git diff against the base commit; undecodable bytes kept via surrogateescape (encode back to apply)."""
        return self._script(DIFF_SCRIPT, "diff").output.decode("utf-8", errors="surrogateescape")

    def _reset_tree(self) -> bool:
        """Restore the base state in place; False when base-state artefacts are gone (caller may recreate)."""
        raw = self._exec(RESET_SCRIPT, 120.0)
        if raw.exit_code == KEEP_MISSING_EXIT:
            return False
        if raw.timed_out or raw.exit_code != 0:
            tail = raw.output[-2000:].decode("utf-8", errors="replace")
            raise RuntimeFailure(f"reset failed in {self.workdir} (exit {raw.exit_code}): {tail}")
        return True
