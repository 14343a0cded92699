"""A row's setup patch in a box: committed on top of the image's commit and made the box's base state, so the
agent starts from it, `diff()` holds only the agent's edits, and every reset (the grader's in-place ones too)
returns to it.

Boxes are pooled by image, and a synthesized row shares its image with the row it was made from and with that
row's other tasks: a box that holds another row's setup commit is first put back on the image's commit. A box
recreated from its image holds none.
"""

from __future__ import annotations

import shlex
import weakref
from dataclasses import dataclass

from pinpoint.environments.runtime import RuntimeFailure
from pinpoint.environments.worktree import GitWorktreeRuntime
from pinpoint.swebench_eval.datasets import Instance

_GIT = "git -c safe.directory='*' -c user.name=pinpoint -c user.email=pinpoint@localhost"
_PATCH_FILE = ".git/pinpoint-setup.patch"


@dataclass(frozen=True)
class Applied:
    """The setup commit a box holds (its base commit since), the commit under it, and whose setup it is."""

    commit: str
    image_commit: str
    instance_id: str


_APPLIED: weakref.WeakKeyDictionary[GitWorktreeRuntime, Applied] = weakref.WeakKeyDictionary()


def prepare(box: GitWorktreeRuntime, instance: Instance, timeout: float = 120.0) -> None:
    """Bring a box just reset to `instance`'s starting state: its setup patch committed as the base state, or the
    image's commit for a row without one. Raises RuntimeFailure when the setup patch does not apply."""
    held = _APPLIED.pop(box, None)
    image_commit = box.base_commit
    if held is not None and held.commit == box.base_commit:  # not recreated since: it holds that setup
        if held.instance_id == instance.instance_id:
            _APPLIED[box] = held
            return
        _run(box, f"{_GIT} reset -q --hard {held.image_commit}", "putting the box back on the image's commit", timeout)
        image_commit = held.image_commit
        if not instance.setup_patch:
            box.rebase()
    if not instance.setup_patch:
        return
    box.write_file(_PATCH_FILE, instance.setup_patch if instance.setup_patch.endswith("\n")
                   else instance.setup_patch + "\n")
    # an image's build leaves stale stat data in the index, which `apply --index` would take for changed files
    _run(box, f"{_GIT} update-index -q --refresh; {_GIT} apply --index {_PATCH_FILE} && rm -f {_PATCH_FILE} && "
              f"{_GIT} commit -q --no-verify -m {shlex.quote('pinpoint setup ' + instance.instance_id)}",
         f"applying the setup patch of {instance.instance_id}", timeout)
    box.rebase()
    _APPLIED[box] = Applied(box.base_commit, image_commit, instance.instance_id)


def _run(box: GitWorktreeRuntime, command: str, what: str, timeout: float) -> None:
    done = box.run(command, timeout=timeout)
    if not done.ok:
        raise RuntimeFailure(f"{what} failed: {done.output[-600:].strip()}")
