"""Apply a patch to a runtime's base commit: the one way the agent (its candidates, a resumed run, the demo) and the
grader put a patch in a working tree.

The agent applies its own diffs, which `git apply` takes as they are; the grader takes any model's patch with the
official harness's chain of fallbacks. Either way the tree starts from the base commit and is left there when
nothing applies, so a failed attempt never leaves partial hunks or .rej files behind.
"""

from __future__ import annotations

import shlex
import uuid

from environments.errors import PinpointError
from environments.runtime import Runtime

#: the official harness's fallbacks, in its order (swebench.harness.run_evaluation.GIT_APPLY_CMDS)
GIT_APPLY_CMDS = (
    "git apply --verbose",
    "git apply --verbose --3way",
    "git apply --verbose --reject",
    "patch --batch --forward --fuzz=5 -p1 -i",
)
#: the official harness's log markers (swebench.harness.constants), spelled here so the agent never imports
#: swebench (about 1.5 s) just to apply its own diffs
APPLY_PATCH_PASS = ">>>>> Applied Patch"
APPLY_PATCH_FAIL = ">>>>> Patch Apply Failed"


class PatchError(PinpointError, RuntimeError):
    """A patch that does not apply to the base commit; the message is the apply log."""


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
