"""Execution-grounded suspects for an RL task (`EnvSettings.suspects="oracle"`): the lines pinpoint's own agent
would be shown in oracle mode, for a trainer who wants them in the policy's first observation.

The task's FAIL_TO_PASS tests are traced in the episode's box with the test patch applied (`agent.solve.
oracle_localizers`: the spectrum, LDB, MBFL and predicate switching, then the tree reset), the default localizers'
suspects are fused as the agent's localize node fuses them (`agent.nodes.fused_suspects`, `agent.fusion`), and the
fused list is read as lines the way `bench localize` scores it (`localization.fusion.top_lines`). Lines in test files
(the test patch's included) are left out, so the policy learns nothing of the tests.

The lines are cached on disk per (task, instance image, localization version, agent settings): the version is a
hash of the code that computes them (localization/*.py, the agent modules above and this one), so a changed tracer
or fusion recomputes and an unchanged one never runs the tests twice for a task, whichever process asks: a file
lock beside the cache file lets one computation of a key run at a time, and the others read its result.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout
from pinpoint.agent.config import Config
from pinpoint.environments import paths
from pinpoint.environments.files import write_json_atomic
from pinpoint.environments.runtime import Runtime
from pinpoint.localization.blocks import function_spans, innermost_function
from pinpoint.localization.fusion import top_lines
from pinpoint.localization.retrieval import is_test_path
from pinpoint.localization.suspects import LocalizationRequest, Suspect
from pinpoint.rl.tasks import RlTask
from pinpoint.swebench_eval.layout import safe_name
from unidiff import PatchSet

#: the line cut `bench localize` reports (line Hit@10): the cached list is `top_lines` at this k, walked on to KEPT
LINE_K = 10
#: lines kept per task (the most `EnvSettings.suspects_top` may ask for)
KEPT = 50
CACHE_FORMAT = 1


@dataclass(frozen=True)
class LineSuspect:
    """One suspicious line: its fused score, the signals whose line or function suspects hold it (not the whole-file
    rankings), and the function around it."""

    path: str
    line: int
    score: float
    signals: tuple[str, ...]
    function: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "signals": list(self.signals)}

    @classmethod
    def from_json(cls, row: dict[str, Any]) -> LineSuspect:
        return cls(row["path"], int(row["line"]), float(row["score"]), tuple(row["signals"]), row.get("function"))

    def render(self) -> str:
        where = f" in {self.function}" if self.function else ""
        return f"{self.path}:{self.line}{where} ({', '.join(self.signals)})"


@dataclass
class Found:
    """What one reset got: the lines, whether they came from the cache, the seconds spent, or why there are none
    (`broken`: the box may hold the computation's leftovers and must not host the episode)."""

    suspects: list[LineSuspect] = field(default_factory=list)
    cached: bool = False
    seconds: float = 0.0
    failure: str = ""
    broken: bool = False


@functools.cache
def localization_version() -> str:
    """A hash of the code behind the suspects: every localization module, the agent's oracle and fusion code, and
    this module (how the lines are read from the fused list)."""
    from pinpoint.agent import nodes, runner, solve
    from pinpoint.localization import fusion

    files = sorted(Path(fusion.__file__).parent.glob("*.py")) + [Path(m.__file__) for m in (nodes, runner, solve)]
    files.append(Path(__file__))
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def cache_path(task: RlTask, image: str, config: Config) -> Path:
    """Where `task`'s lines are kept: `<cache>/rl-suspects/<task>-<key>.json`, the key over the image, the
    localization version and the agent settings the localizers read."""
    key = json.dumps({"format": CACHE_FORMAT, "task": task.task_id, "image": image,
                      "version": localization_version(), "agent": dataclasses.asdict(config.agent)}, sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return paths.cache_dir() / "rl-suspects" / f"{safe_name(task.task_id)}-{digest}.json"


def read_cached(path: Path) -> list[LineSuspect] | None:
    """The cached lines, or None when there are none (or the file is unreadable: it is computed again)."""
    try:
        return [LineSuspect.from_json(row) for row in json.loads(path.read_text())["suspects"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def compute(task: RlTask, runtime: Runtime, config: Config) -> list[LineSuspect]:
    """The fused oracle lines of `task` in `runtime` (its tree reset after the tests ran), best first."""
    from pinpoint.agent.nodes import execution_sources, fused_suspects
    from pinpoint.agent.solve import oracle_localizers

    localizers = oracle_localizers(task.instance, runtime, config)
    failures = "\n".join(s.failure_output() for s in execution_sources(localizers))
    request = LocalizationRequest(problem_statement=task.problem_statement, test_output=failures)
    fused, per_signal = fused_suspects(localizers, runtime, config, request)
    hidden = {d.path for d in PatchSet(task.instance.test_patch)}
    kept = [s for s in fused if not is_test_path(s.path) and s.path not in hidden]
    file_level = {loc.name for loc in localizers if getattr(loc, "file_level", False)}
    spans = {n: v for n, v in per_signal.items() if n not in file_level}
    functions = _Functions(runtime)
    return [LineSuspect(path, line, round(span.score, 6), _signals(spans, path, line), functions.at(path, line))
            for path, line, span in top_lines(kept, LINE_K, limit=KEPT)]


def _signals(per_signal: dict[str, list[Suspect]], path: str, line: int) -> tuple[str, ...]:
    """The signals with a suspect holding `path:line`, in the order the localizers ran (whole-file rankings, BM25
    and lexical, are left out by the caller: they hold every line of their files)."""
    return tuple(name for name, found in per_signal.items()
                 if any(s.path == path and s.start_line <= line <= s.end_line for s in found))


class _Functions:
    """The innermost function around a line, each file parsed once."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._spans: dict[str, list] = {}

    def at(self, path: str, line: int) -> str | None:
        if path not in self._spans:
            try:
                self._spans[path] = function_spans(self.runtime.read_text(path)) if path.endswith(".py") else []
            except (OSError, SyntaxError, ValueError):
                self._spans[path] = []
        span = innermost_function(self._spans[path], line)
        return span.qualname if span else None


def oracle_suspects(task: RlTask, image: str, runtime: Runtime, timeout_s: float,
                    config: Config | None = None) -> Found:
    """The cached lines of `task`, else computed in `runtime` within `timeout_s` and cached. One computation per
    cache key at a time, across threads and processes: the others wait (up to `timeout_s`) on a file lock beside
    the cache file and read its result (the kernel drops the lock of a holder that dies, and the next computes).
    A failure or a timeout is `Found.failure` (one line), `broken` set when the box ran it: the caller gives the
    box up."""
    if task.instance is None:
        return Found(failure=f"suspects: {task.task_id} is a local task; oracle suspects need a SWE-bench row's "
                             "FAIL_TO_PASS tests")
    config = config or Config()
    path = cache_path(task, image, config)
    cached = read_cached(path)
    if cached is not None:
        return Found(cached, cached=True)
    started = time.monotonic()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(path.with_name(path.name + ".lock"), timeout=timeout_s):
            cached = read_cached(path)  # another thread or process computed them while this one waited
            if cached is not None:
                return Found(cached, cached=True, seconds=time.monotonic() - started)
            return _compute_and_cache(task, image, runtime, timeout_s, config, path)
    except Timeout:
        return Found(seconds=time.monotonic() - started, failure=f"suspects: another process kept computing them "
                     f"past {timeout_s:g} s; the episode goes on without them")
    except OSError as exc:  # the cache folder cannot hold the lock: the box was not used
        return Found(seconds=time.monotonic() - started, failure=f"suspects: cannot lock their cache: {exc}")


def _compute_and_cache(task: RlTask, image: str, runtime: Runtime, timeout_s: float, config: Config,
                       path: Path) -> Found:
    """`compute` in a thread cut off at `timeout_s` (the box may hold its leftovers then: `broken`); the lines
    written to `path` when it finishes, nothing when it fails."""
    started = time.monotonic()
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            outcome["suspects"] = compute(task, runtime, config)
        except Exception as exc:  # any failure of the computation is reported in one line; the episode goes on
            outcome["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]

    thread = threading.Thread(target=work, name=f"pinpoint-suspects-{task.task_id}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    seconds = time.monotonic() - started
    if thread.is_alive():
        return Found(seconds=seconds, broken=True,
                     failure=f"suspects: not computed within {timeout_s:g} s; the episode goes on without them")
    if "error" in outcome:
        return Found(seconds=seconds, broken=True, failure=f"suspects: the computation failed: {outcome['error']}")
    try:
        write_json_atomic(path, {"task": task.task_id, "image": image, "version": localization_version(),
                                 "seconds": round(seconds, 1), "suspects": [s.to_json() for s in outcome["suspects"]]})
    except OSError as exc:  # the lines are good; only the next reset pays for them again
        return Found(outcome["suspects"], seconds=seconds, failure=f"suspects: not cached: {exc}")
    prune_stale(path, task.task_id, image)
    return Found(outcome["suspects"], seconds=seconds)


def prune_stale(kept: Path, task_id: str, image: str) -> list[Path]:
    """Remove the cache files (and their locks) of `task_id` on `image` that an older localization version wrote:
    no process of this version reads them again, and each code change would otherwise leave one per task behind.
    Files of other images or other agent settings stay (their keys are still asked for). Returns what was removed."""
    removed = []
    for other in kept.parent.glob(f"{safe_name(task_id)}-*.json"):
        try:
            held = json.loads(other.read_text())
            stale = (other != kept and held.get("task") == task_id and held.get("image") == image
                     and held.get("version") != localization_version())
            if stale:
                other.unlink()
                other.with_name(other.name + ".lock").unlink(missing_ok=True)
                removed.append(other)
        except (OSError, ValueError, AttributeError):  # unreadable or gone already: another process's business
            continue
    return removed


def suspects_message(suspects: list[LineSuspect]) -> str:
    """The lines as the first observation lists them (no evidence text: nothing of the tests' names or output)."""
    lines = [f"{n}. {s.render()}" for n, s in enumerate(suspects, 1)]
    return ("Suspicious lines, from running the failing tests on this code (most suspicious first; file:line, "
            "function, signals):\n" + "\n".join(lines))
