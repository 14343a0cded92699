"""Grading on a warm box: the official eval script in a container that graded before, with the same verdicts as a
fresh container and less of its cost (docs/harness.md, "Pooled grading").

Two things a fresh container gets for free are proven here instead:
- **Nothing left behind.** Before each grading the working tree is reset in place and the container's writes outside
  it (its overlay upper layer, environments/overlay.py) are compared with what they were right after the previous
  grading's install part: files the tests created there (bytecode, /tmp, caches, a planted `.pth`) are deleted; an
  image file modified or deleted, or anything the install part made that moved since, and the box is recreated.
  A box is compared with its state right after the container started until it first graded. Where the upper layer
  cannot be read from here, every grading recreates the box (fresh).
- **The reinstall it already did.** The eval script is run in three parts (eval_steps: the steps before the install,
  the install, the rest); the install is skipped only when a sha256 of the tree's install-relevant files
  (eval_steps.install_patterns: the packaging files and extension sources for an editable install, every file for
  one that copies the package) equals the digest of the tree this box last installed, with nothing outside the tree
  moved since. That last install succeeded, or failed without writing anything in the tree or outside it (pip
  refusing an offline editable install): the same inputs fail the same way. Otherwise it runs, exactly as written.
- **The bytecode it compiled before any patch.** Priming compiles the base tree (`compileall`) and the command
  server records each `.pyc` it made (`DockerRuntime.trust_bytecode`); the box's in-place reset keeps exactly those,
  unchanged, while their source is an unchanged base file (`DockerRuntime.keep_bytecode`; Python checks each against
  its source's mtime and size, the base's again), and drops every other: bytecode a patch's tests wrote (a forged
  `.pyc` for a base module would run in the next grading) and that of changed, restored or new sources. So the
  tests do not recompile the package per grading, and no grading's code reaches the next one through bytecode.
"""

from __future__ import annotations

import shlex
import weakref
from dataclasses import dataclass

from pinpoint.environments.docker_runtime import DockerRuntime
from pinpoint.environments.overlay import Entry, changes
from pinpoint.environments.runtime import CommandResult
from pinpoint.swebench_eval import eval_steps
from pinpoint.swebench_eval.datasets import Instance
from pinpoint.swebench_eval.scripts import eval_script
from pinpoint.swebench_eval.specs import spec_for

#: where the two parts of the eval script are written (the grader's own files, outside what it compares)
PART_PATHS = ("/eval.sh", "/eval-tests.sh")
#: priming's compilation of the base tree and of site-packages (the eval script's `python`, timestamp bytecode as an
#: import writes; a file that does not compile is left to the tests, as in a fresh container). Site-packages'
#: bytecode is then part of the baseline outside the tree: a .pyc a grading rewrites there recreates the box.
COMPILE = ("python -m compileall -q -x '/[.]git/' . $(python -c 'import site; print(\" \".join(site.getsitepackages()))')"
           " >/dev/null 2>&1 || true")


@dataclass
class WarmState:
    """What one grader box remembers between gradings; a recreated container (another id) starts a new one."""

    container: str
    #: digest of the install-relevant files of the tree the box last installed: successfully, or failing without
    #: writing anything (`install_failed`: an offline reinstall that pip refuses, as on pytest's rows)
    install_digest: str | None = None
    install_failed: bool = False
    #: the writes outside the tree right after the last install part (at first, right after the container
    #: started); None: unknown (not readable here, or the install part timed out)
    baseline: dict[str, Entry] | None = None
    #: set by `warm_reset` when the box is proven as the baseline left it, for the grading that follows
    verified: bool = False
    #: what the last `warm_reset` did, in words (the bench reports it)
    last_reset: str = ""
    #: seconds of the last grading's part after the install (test patch applied, tests run, test files restored):
    #: what every grading that runs the eval script pays, however warm its box
    tests_s: float = 0.0
    skipped_installs: int = 0
    recreated: int = 0


_STATES: weakref.WeakKeyDictionary[DockerRuntime, WarmState] = weakref.WeakKeyDictionary()


def state_of(box: DockerRuntime) -> WarmState:
    """The box's grading memory (a new one after the container was recreated)."""
    state = _STATES.get(box)
    container = box.container.id if box.container is not None else ""
    if state is None or state.container != container:
        kept = (state.skipped_installs, state.recreated) if state is not None else (0, 0)
        state = _STATES[box] = WarmState(container, baseline=box.outside_at_start, skipped_installs=kept[0],
                                         recreated=kept[1])
    return state


def warm_reset(box: DockerRuntime) -> WarmState:
    """The tree back to its base state (but the bytecode of unchanged base files, which Python checks against them)
    and, outside it, back to what the last install part left (or a new box)."""
    box.keep_bytecode = True
    box.reset()
    state = state_of(box)
    state.verified = False
    now = box.outside_tree(PART_PATHS)
    layers = box.layers
    found = changes(layers, state.baseline, now) if None not in (now, layers, state.baseline) else None
    if found is not None and found.new and not found.changed:
        done = box.run("rm -rf -- " + " ".join(shlex.quote(p) for p in found.new), timeout=120)
        again = box.outside_tree(PART_PATHS)
        if not done.ok or again is None or changes(layers, state.baseline, again).new:
            found.changed.append(f"could not remove {len(found.new)} new paths: {done.output[-200:]}")
    if found is None or found.changed:
        why = ("the writes outside the tree are not known" if found is None
               else f"changed outside the tree: {found.changed[:3]}")
        box.reset(recreate=True)
        fresh = state_of(box)
        fresh.recreated += 1
        fresh.last_reset = f"recreated ({why})"
        fresh.verified = fresh.baseline is not None  # a new container, as started
        return fresh
    state.verified = True
    state.last_reset = f"tree reset, {len(found.new)} new paths outside it removed"
    return state


class _Runs:
    """The parts of one eval script run one after another within one timeout, joined into one result."""

    def __init__(self, box: DockerRuntime, timeout: float) -> None:
        self.box, self.left, self.parts = box, timeout, []

    def run(self, script: str) -> CommandResult:
        self.box.write_file(PART_PATHS[len(self.parts) % 2], script)
        done = self.box.run(f"/bin/bash {PART_PATHS[len(self.parts) % 2]}", timeout=max(self.left, 1.0))
        self.left -= done.duration_s
        self.parts.append(done)
        return done

    @property
    def timed_out(self) -> bool:
        return any(p.timed_out for p in self.parts)

    def result(self) -> CommandResult:
        last = self.parts[-1]
        return CommandResult(last.exit_code, "".join(p.output for p in self.parts), self.timed_out,
                             sum(p.duration_s for p in self.parts), last.stopped_by)


def run_warm(box: DockerRuntime, script: str, timeout: float) -> CommandResult:
    """Run the eval script on a box `warm_reset` just prepared: the steps before the install, the install (skipped
    when proven redundant), a listing of the writes outside the tree, then the rest. One result, as one run gives."""
    state = state_of(box)
    steps = eval_steps.parse(script)
    runs = _Runs(box, timeout)
    if not eval_steps.has_install(steps):
        state.tests_s = runs.run(script).duration_s
    else:
        plain = eval_steps.split(steps)
        runs.run(plain.before)
        digest = box.digest(eval_steps.install_patterns(steps)) if not runs.timed_out else None
        if state.verified and digest is not None and digest == state.install_digest:
            why = (f"the install-relevant files hash to {digest[:16]}, as when this box last ran it"
                   + (" (it failed then and wrote nothing)" if state.install_failed else ""))
            runs.run(eval_steps.split(steps, why).install)
            state.skipped_installs += 1
        elif not runs.timed_out:
            _install(box, runs, plain.install, digest, state)
        if not runs.timed_out:
            state.baseline = box.outside_tree(PART_PATHS)
            state.tests_s = runs.run(plain.after).duration_s
    if runs.timed_out:
        state.baseline = None
    elif not eval_steps.has_install(steps):
        state.baseline = box.outside_tree(PART_PATHS)
    state.verified = False
    return runs.result()


def _install(box: DockerRuntime, runs: _Runs, script: str, digest: str | None, state: WarmState) -> None:
    """Run the install part and record what a later grading may skip: a success, or a failure that wrote nothing
    (in the tree or outside it), which fails the same way again on the same files."""
    outside, tree = box.outside_tree(PART_PATHS), box.digest(None, stats=True)
    done = runs.run(script)
    clean = (not done.ok and not done.timed_out and outside is not None and tree is not None
             and box.outside_tree(PART_PATHS) == outside and box.digest(None, stats=True) == tree)
    state.install_digest = digest if done.ok or clean else None
    state.install_failed = not done.ok


def prime(box: DockerRuntime, instance: Instance, timeout: float = 1800.0) -> WarmState:
    """What a warm pool does for a new grader box before its first grading: the eval script's steps through the
    install on the base tree, so the first patch that leaves the install-relevant files alone skips it; then the
    base tree and site-packages compiled, the tree's bytecode recorded as the only bytecode resets keep."""
    state = warm_reset(box)
    steps = eval_steps.parse(eval_script(instance, spec_for(instance)))
    if eval_steps.has_install(steps):
        runs = _Runs(box, timeout)
        plain = eval_steps.split(steps)
        runs.run(plain.before)
        digest = box.digest(eval_steps.install_patterns(steps))
        _install(box, runs, plain.install, digest, state)
        if state.install_failed and state.install_digest is None:  # a first failure may leave caches (bytecode)
            _install(box, runs, plain.install, digest, state)
    if box.run(COMPILE, timeout=timeout).ok:
        box.trust_bytecode()  # no patch has run in this box yet: this bytecode is the base tree's own
    state.baseline = box.outside_tree(PART_PATHS)
    return state
