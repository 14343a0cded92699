"""Apply a patch to a runtime's base commit: the one way the agent (its candidates, a resumed run, the demo) and the
grader put a patch in a working tree.

The agent applies its own diffs, which `git apply` takes as they are; the grader takes any model's patch with the
official harness's chain of fallbacks. Either way the tree starts from the base commit and is left there when
nothing applies, so a failed attempt never leaves partial hunks or .rej files behind.
"""

from __future__ import annotations

import posixpath
import re
import shlex
import uuid

from pinpoint.environments.errors import PinpointError
from pinpoint.environments.runtime import Runtime

#: the official harness's fallbacks, in its order (swebench.harness.run_evaluation.GIT_APPLY_CMDS)
GIT_APPLY_CMDS = (
    "git apply --verbose",
    "git apply --verbose --3way",
    "git apply --verbose --reject",
    "patch --batch --forward --fuzz=5 -p1 -i",
)
#: files an image build or a reset rewrote keep stale stat data in the index, and `git apply --3way` then refuses
#: them ("does not match index") where the official images apply; refreshing the index first makes them agree
REFRESH_INDEX = "git update-index -q --refresh"
#: the official harness's log markers (swebench.harness.constants), spelled here so the agent never imports
#: swebench (about 1.5 s) just to apply its own diffs
APPLY_PATCH_PASS = ">>>>> Applied Patch"
APPLY_PATCH_FAIL = ">>>>> Patch Apply Failed"


class PatchError(PinpointError, RuntimeError):
    """A patch that does not apply to the base commit; the message is the apply log."""


class BadPatch(PinpointError, ValueError):
    """A patch that must not reach a working tree at all (not text, paths outside the repository, too big)."""


#: a predictions file's patch above this is refused (the largest gold patch of SWE-bench is far below 1 MB)
MAX_PATCH_BYTES = 10_000_000
#: the lines naming files in git and unified diffs; their paths must stay inside the repository
_PATH_LINE = re.compile(r"^(?:diff --git (?P<pair>.*)|(?:---|\+\+\+) (?P<side>\S+)|"
                        r"(?:rename|copy) (?:from|to) (?P<move>.+))$")


def check_patch(patch: str | None, where: str) -> None:
    """Raise BadPatch (one line, prefixed with `where`) for a patch that is not text (undecodable or NUL bytes),
    has CRLF diff headers, is over MAX_PATCH_BYTES, or names a path outside the repository (absolute or with
    `..`). A missing final newline is fine: `apply_patch` adds it, as the official harness's fallbacks cope."""
    if not patch:
        return
    try:
        size = len(patch.encode("utf-8"))
    except UnicodeEncodeError:
        raise BadPatch(f"{where}: the patch is not text (it holds undecodable bytes)") from None
    if size > MAX_PATCH_BYTES:
        raise BadPatch(f"{where}: the patch is {size / 1e6:.1f} MB, over the {MAX_PATCH_BYTES / 1e6:g} MB limit")
    if "\x00" in patch:
        raise BadPatch(f"{where}: the patch is not text (it holds NUL bytes)")
    lines = patch.split("\n")
    for number, line in enumerate(lines, 1):
        match = _PATH_LINE.match(line)
        if not match or not _is_header(lines, number - 1):
            continue
        if line.endswith("\r"):
            raise BadPatch(f"{where}: line {number} of the patch ends in CRLF; diff headers must end in LF "
                           "(convert the patch's line endings)")
        for path in _header_paths(match):
            if path.startswith("/") or ".." in posixpath.normpath(path).split("/"):
                raise BadPatch(f"{where}: the patch touches {path!r} (line {number}), outside the repository")


def _is_header(lines: list[str], index: int) -> bool:
    """A `---` line is a file header only before a `+++` one (else it is a removed `--` line), and vice versa."""
    line = lines[index]
    if line.startswith("--- "):
        return index + 1 < len(lines) and lines[index + 1].startswith("+++ ")
    if line.startswith("+++ "):
        return index > 0 and lines[index - 1].startswith("--- ")
    return True


def _header_paths(match: re.Match) -> list[str]:
    """The repository paths a diff header line names (a/ and b/ prefixes removed; /dev/null is no path)."""
    if match["pair"] is not None:
        parts = match["pair"].split(" b/", 1) if match["pair"].startswith("a/") else match["pair"].split(" ")
        names = [parts[0].removeprefix("a/")] + [p.removeprefix("b/") for p in parts[1:]]
    else:
        names = [match["side"] or match["move"]]
        names = [n.removeprefix("a/").removeprefix("b/") for n in names if n != "/dev/null"]
    return [n.strip().strip('"') for n in names if n.strip()]


def apply_patch(runtime: Runtime, patch: str, *, fallbacks: bool = False, path: str | None = None) -> str:
    """Reset `runtime` to the base commit, apply `patch` and return the apply log; an empty patch leaves the base.

    `fallbacks` tries the official harness's whole chain (and accepts a patch the base already contains), as the
    grader must for any model's patch; without it only plain `git apply` runs. `path` is where the patch file goes
    (default: a unique name inside .git, never part of the diff and kept by resets). Raises PatchError, the tree
    back at the base commit, when nothing applies it."""
    runtime.reset()
    if not patch.strip():
        return ""
    path = path or f".git/pinpoint-{uuid.uuid4().hex[:8]}.patch"
    runtime.write_file(path, patch if patch.endswith("\n") else patch + "\n")
    quoted = shlex.quote(path)
    try:
        log = []
        for attempt, command in enumerate(GIT_APPLY_CMDS if fallbacks else GIT_APPLY_CMDS[:1]):
            if attempt:
                runtime.reset()
            if "--3way" in command:  # the one step that reads the index
                runtime.run(REFRESH_INDEX, timeout=120)
            result = runtime.run(f"{command} {quoted}", timeout=120)
            log.append(f"$ {command}\n{result.output}")
            if result.ok:
                return f"{APPLY_PATCH_PASS}:\n{result.output}"
        runtime.reset()
        if fallbacks and runtime.run(f"git apply --check --reverse {quoted}", timeout=120).ok:
            return f"{APPLY_PATCH_PASS}: verified already applied"
        raise PatchError(f"{APPLY_PATCH_FAIL}:\n" + "\n".join(log))
    finally:
        runtime.run(f"rm -f {quoted}", timeout=60)
