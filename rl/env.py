"""`RepairEnv`: a multi-turn repair episode with gymnasium's API, on pinpoint's own tools and the grader's box.

    env = RepairEnv(EnvSettings(reward="precise"))
    obs, info = env.reset(options={"task": task})          # info["messages"]: the chat to start from
    obs, reward, terminated, truncated, info = env.step('{"tool": "view", "arguments": {"path": "src/x.py"}}')
    env.close()

An action is one call of the agent's tools (view, search, str_replace_editor, run_tests, submit), as text in the
agent's text action format (a ```json block or a bare `{"tool": ..., "arguments": ...}`) or as a tool-call dict
(`{"name", "arguments"}` or OpenAI's `{"function": {...}}`). An unreadable action is the model's mistake: its
observation says what is wrong and the step counts. The episode ends at `submit` (terminated) or at the step or time
budget (truncated; the working tree's diff is graded as if submitted). The reward is 0.0 until the end, except for
the dense `localization` kind (`rl.rewards`). The container is the one the grader uses (same image, CPUs,
memory, no network), leased from a `WarmPool` and given back, reset, when the episode ends. With
`EnvSettings(suspects="oracle")` the first observation also lists the execution-grounded suspects pinpoint's agent
computes in oracle mode (`rl.suspects`: computed once per task and cached, the box reset before the episode).

An infrastructure failure (the box cannot be built or started, the container dies, grading fails) is never a
reward: it ends the episode as truncated (not terminated: the model did not end it) with reward NaN
(`INFRA_FAILURE_REWARD`, a float as gymnasium wants, which poisons any sum or mean a trainer forgets to mask) and
`info["infra_failure"]` saying why; at `reset()` it raises `InfraFailure`. The next `reset()`
works on a fresh container. A command that breaks its own box (it kills the command server: `BrokenFromInside`) is
the model's doing: the episode ends with reward 0.0 and `info["model_failure"]`.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import gymnasium
from pinpoint.agent import prompts
from pinpoint.agent.config import MAX_STEPS, MAX_WALL_S
from pinpoint.environments.errors import PinpointError, UsageError
from pinpoint.environments.runtime import BrokenFromInside, Runtime, RuntimeFailure, RuntimeSettings
from pinpoint.rl.grading import Graded, grade_unit
from pinpoint.rl.pool import PoolExhausted, RuntimeFactory, WarmPool
from pinpoint.rl.rewards import PRECISE_LAMBDA, LocalizationProgress, RewardKind, precise_reward
from pinpoint.rl.suspects import KEPT, Found, oracle_suspects, suspects_message
from pinpoint.rl.tasks import RlTask, task_from
from pinpoint.swebench_eval.metrics import edit_metrics, edited_lines
from pinpoint.swebench_eval.setup_patch import prepare
from pinpoint.swebench_eval.sources import RepoSources
from pinpoint.tools.base import DEFAULT_MAX_OUTPUT_CHARS, Tool
from pinpoint.tools.protocol import Action, ActionError, describe_tools_for_text_mode, parse_action
from pinpoint.tools.registry import call_tool, default_tools, openai_schemas
from pinpoint.tools.run_tests import DEFAULT_TIMEOUT_S

if TYPE_CHECKING:
    from pinpoint.environments.docker_runtime import DockerRuntime


class InfraFailure(PinpointError, RuntimeError):
    """The episode could not run for a reason that is not the model's (no image, no engine, a dead container)."""


#: the reward of a step an infrastructure failure ended (with `info["infra_failure"]`): a float, yet no number a
#: trainer could learn from by mistake
INFRA_FAILURE_REWARD = math.nan


@dataclass
class EnvSettings:
    """One RL run's environment: the reward, the budgets, and the box (the `runtime` settings grading uses)."""

    reward: RewardKind = "unit"
    precise_lambda: float = PRECISE_LAMBDA
    max_steps: int = MAX_STEPS
    time_budget_s: float = MAX_WALL_S
    command_timeout_s: float = 300.0
    grade_timeout_s: float = 1800.0
    #: where the unit reward is graded: a pooled grader box of the instance image (the default: reset in place,
    #: what a grading's tests wrote outside the tree removed or the box recreated, a reinstall it already did
    #: skipped; the same per-test verdicts as fresh on every row `pinpoint bench grading` ran, docs/harness.md,
    #: "Pooled grading"), or a fresh container per grading, as the harness
    grader: Literal["fresh", "pooled"] = "pooled"
    max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS
    #: `oracle`: the first observation lists the fused execution suspects pinpoint's agent computes in oracle mode
    #: (the task's FAIL_TO_PASS tests traced with the test patch applied, the tree reset before the episode),
    #: cached on disk per task, image and localization version (rl/suspects.py); `none`: the issue and the tree
    suspects: Literal["none", "oracle"] = "none"
    #: how many suspect lines the first observation lists (info["suspects"] holds as many)
    suspects_top: int = 10
    #: seconds the first computation of a task's suspects may take (and a reset may wait for another process's
    #: computation of them); past it the episode starts without them
    suspects_timeout_s: float = 900.0
    runtime: RuntimeSettings = field(default_factory=RuntimeSettings)

    def __post_init__(self) -> None:
        if not 1 <= self.suspects_top <= KEPT or self.suspects_timeout_s <= 0:
            raise UsageError(f"EnvSettings: suspects_top must be 1..{KEPT} and suspects_timeout_s > 0 "
                             f"(got {self.suspects_top}, {self.suspects_timeout_s})")


@dataclass(frozen=True)
class BoxKey:
    """What makes two boxes interchangeable in the pool: the same image (or checkout at a commit), CPUs and box
    settings, and the same role (a grader's box runs its commands as root)."""

    #: the image's tag, or the local checkout and its commit
    source: str
    cpus: float | None = None
    #: `RuntimeSettings`' field values, in field order (the settings themselves are mutable, so not hashable)
    settings: tuple[Any, ...] = ()
    grading: bool = False


@dataclass
class Box:
    """Where a task runs: the pool key of its image and settings, and how to start one."""

    key: BoxKey
    factory: RuntimeFactory
    image: str | None = None
    #: the grader's box of the same image (its commands as root, as the eval script needs), for pooled grading
    grader_key: BoxKey | None = None
    grader_factory: RuntimeFactory | None = None


@dataclass
class Episode:
    task: RlTask
    box: Box
    runtime: Runtime | None
    tools: list[Tool]
    progress: LocalizationProgress
    started: float
    steps: int = 0
    done: bool = False


class Utf8Text(gymnasium.spaces.Space):
    """Any string: observations and text actions (gymnasium's `Text` space only admits a fixed charset)."""

    def __init__(self, accept_calls: bool = False) -> None:
        super().__init__(shape=None, dtype=None)
        self.accept_calls = accept_calls

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) or (self.accept_calls and isinstance(x, dict))

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        return '{"tool": "submit", "arguments": {}}'


class RepairEnv(gymnasium.Env):
    """A repair episode per `reset`; see the module docstring. Not thread-safe: one env per worker thread."""

    metadata = {"render_modes": []}

    def __init__(self, settings: EnvSettings | None = None, pool: WarmPool | None = None,
                 sources: RepoSources | None = None) -> None:
        self.settings = settings or EnvSettings()
        self.observation_space = Utf8Text()
        self.action_space = Utf8Text(accept_calls=True)
        self._own_pool = pool is None
        self.pool = pool or WarmPool()
        self._sources = sources
        self._boxes: dict[str, Box] = {}
        #: a task whose suspects failed in this env is not tried again at each reset (successes are cached on disk)
        self._suspect_failures: dict[str, Found] = {}
        self._episode: Episode | None = None

    # -- gymnasium API ------------------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        self._end_lease()
        if not options or "task" not in options:
            raise UsageError('RepairEnv.reset needs options={"task": ...} (an RlTask, Instance or task row)')
        task = task_from(options["task"])
        started = time.monotonic()
        box = self._box(task)
        runtime = self._acquire(task, box)
        found = self._suspects(task, box, runtime) if self.settings.suspects == "oracle" else None
        if found is not None and found.broken:  # the computation may have left its tests in that box
            self.pool.release(runtime, broken=True)
            runtime = self._acquire(task, box)
        tools = default_tools()
        self._episode = Episode(task, box, runtime, tools, LocalizationProgress(task.gold_patch), time.monotonic())
        try:
            tree = call_tool(tools, "view", {"path": "."}, runtime).output
        except RuntimeFailure as exc:
            self._end_lease(broken=True)
            raise InfraFailure(f"{task.task_id}: the container failed at start: {exc}") from exc
        user = prompts.task_message(task.problem_statement, tree, test_command=task.test_command)
        shown = found.suspects[: self.settings.suspects_top] if found is not None else []
        if shown:
            user += "\n\n" + suspects_message(shown)
        schemas = openai_schemas(tools)
        system = f"{prompts.SYSTEM}\n\n{describe_tools_for_text_mode(schemas)}"
        info = {"task_id": task.task_id, "messages": [{"role": "system", "content": system},
                                                      {"role": "user", "content": user}],
                "tools": schemas, "system_without_tools": prompts.SYSTEM}
        if found is not None:
            info.update(suspects=shown, suspects_cached=found.cached, suspects_s=found.seconds)
            if found.failure:
                info["suspects_failure"] = found.failure
        info["env_s"] = time.monotonic() - started
        return user, info

    def step(self, action: str | dict) -> tuple[str, float, bool, bool, dict]:
        episode = self._episode
        if episode is None or episode.done:
            raise UsageError("RepairEnv.step before reset(), or after the episode ended: call reset() first")
        started = time.monotonic()
        episode.steps += 1
        call = parse_action(action)
        info: dict[str, Any] = {"steps": episode.steps, "tool": call.name if isinstance(call, Action) else None}
        if isinstance(call, ActionError):
            observation, info["error"] = call.message, True
        elif call.name == "submit":
            return self._finish(episode, "Submitted.", terminated=True, info=info, started=started)
        else:
            try:
                observation, info["error"] = self._act(episode, call.name, call.arguments)
            except BrokenFromInside as exc:  # the model's command killed its own box: a failure, not a dropped sample
                return self._broke_its_box(episode, str(exc), info, started)
            except RuntimeFailure as exc:
                return self._infra(episode, f"{type(exc).__name__}: {exc}", info, started)
        elapsed = time.monotonic() - episode.started
        if episode.steps >= self.settings.max_steps or elapsed >= self.settings.time_budget_s:
            info["truncated_by"] = "steps" if episode.steps >= self.settings.max_steps else "time"
            return self._finish(episode, observation, terminated=False, info=info, started=started)
        reward = episode.progress.step_reward() if self.settings.reward == "localization" else 0.0
        info["env_s"] = time.monotonic() - started
        return observation, reward, False, False, info

    def end_episode(self) -> None:
        """Abandon the episode (its policy failed): the container goes back to the pool."""
        self._end_lease()

    def close(self) -> None:
        self._end_lease()
        if self._own_pool:
            self.pool.close()

    # -- episode internals ----------------------------------------------------------------------------------------
    def _act(self, episode: Episode, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        """Run one tool call (a test run capped by the command timeout and the time left); follow what it shows and
        edits for the localization reward."""
        if name == "run_tests" and isinstance(arguments.get("timeout", 0), int):
            left = self.settings.time_budget_s - (time.monotonic() - episode.started)
            cap = max(1, int(min(self.settings.command_timeout_s, left)))
            arguments = {**arguments, "timeout": min(arguments.get("timeout") or DEFAULT_TIMEOUT_S, cap)}
        result = call_tool(episode.tools, name, arguments, episode.runtime, self.settings.max_output_chars)
        if not result.error and episode.progress.known and isinstance(arguments.get("path"), str):
            path = arguments["path"].removeprefix(episode.runtime.workdir)
            if name == "view":
                episode.progress.viewed(path, arguments.get("view_range"))
            elif name == "str_replace_editor":  # file credit now; the lines it edits count from the final diff
                episode.progress.viewed(path, None)
        return result.output, result.error

    def _finish(self, episode: Episode, observation: str, *, terminated: bool, info: dict,
                started: float) -> tuple[str, float, bool, bool, dict]:
        try:
            patch = episode.runtime.diff()
        except RuntimeFailure as exc:
            return self._infra(episode, f"reading the patch: {exc}", info, started)
        episode.done = True
        episode.progress.edited(patch)
        dense = episode.progress.step_reward() if self.settings.reward == "localization" else None
        self._end_lease()
        info.update(patch=patch, edited_lines=edited_lines(patch)["total"])
        reward = dense if dense is not None else self._graded_reward(episode, patch, info)
        info["env_s"] = time.monotonic() - started
        if reward is None:
            return observation, INFRA_FAILURE_REWARD, False, True, info
        return observation, reward, terminated, not terminated, info

    def _graded_reward(self, episode: Episode, patch: str, info: dict) -> float | None:
        pooled = self.settings.grader == "pooled"
        graded: Graded = grade_unit(episode.task, patch, settings=self.settings.runtime, image=episode.box.image,
                                    timeout=self.settings.grade_timeout_s, pool=self.pool if pooled else None,
                                    key=episode.box.grader_key, factory=episode.box.grader_factory)
        info.update(outcome=graded.outcome, unit=graded.unit, grade_s=graded.seconds, **graded.detail)
        if graded.unit is None:
            info["infra_failure"] = graded.infra_failure
            return None
        if self.settings.reward == "unit":
            return graded.unit
        edit = edit_metrics(patch, episode.task.gold_patch) if episode.task.gold_patch.strip() else None
        info["edit"] = edit.to_json() if edit is not None else None
        return precise_reward(graded.unit, edit, self.settings.precise_lambda)

    def _infra(self, episode: Episode, reason: str, info: dict,
               started: float) -> tuple[str, float, bool, bool, dict]:
        episode.done = True
        self._end_lease(broken=True)
        info.update(infra_failure=reason, env_s=time.monotonic() - started)
        return f"[pinpoint: infrastructure failure: {reason}]", INFRA_FAILURE_REWARD, False, True, info

    def _broke_its_box(self, episode: Episode, reason: str, info: dict,
                       started: float) -> tuple[str, float, bool, bool, dict]:
        episode.done = True
        self._end_lease(broken=True)
        info.update(outcome="broke_its_box", unit=0.0, model_failure=reason, patch="", env_s=time.monotonic() - started)
        return f"[pinpoint: the episode ended: {reason}]", 0.0, True, False, info

    def _end_lease(self, broken: bool = False) -> None:
        """Give the episode's container back to the pool (reset there in the background)."""
        episode = self._episode
        if episode is not None and episode.runtime is not None:
            runtime, episode.runtime = episode.runtime, None
            episode.done = True
            self.pool.release(runtime, broken=broken)

    def _acquire(self, task: RlTask, box: Box) -> Runtime:
        """A reset box of the task's image (boxes are pooled by image) at the task's starting state."""
        try:
            runtime = self.pool.acquire(box.key, box.factory)
        except (RuntimeFailure, PoolExhausted, OSError, ValueError) as exc:
            raise InfraFailure(f"{task.task_id}: no container: {type(exc).__name__}: {exc}") from exc
        if task.instance is not None:
            try:
                prepare(runtime, task.instance)
            except (RuntimeFailure, OSError) as exc:
                self.pool.release(runtime, broken=True)
                raise InfraFailure(f"{task.task_id}: {exc}") from exc
        return runtime

    def _suspects(self, task: RlTask, box: Box, runtime: Runtime) -> Found:
        """The task's oracle suspects: cached, else computed in `runtime` (rl.suspects); a failure is kept for
        this env's later resets, without the box."""
        if task.task_id in self._suspect_failures:
            return dataclasses.replace(self._suspect_failures[task.task_id], broken=False, seconds=0.0)
        found = oracle_suspects(task, box.image or "", runtime, self.settings.suspects_timeout_s)
        if found.failure:
            self._suspect_failures[task.task_id] = found
        return found

    def _box(self, task: RlTask) -> Box:
        if task.task_id not in self._boxes:
            try:
                self._boxes[task.task_id] = box_for(task, self.settings.runtime, self._sources)
            except (PinpointError, OSError, KeyError) as exc:
                raise InfraFailure(f"{task.task_id}: cannot prepare its box: {exc}") from exc
        return self._boxes[task.task_id]


def box_for(task: RlTask, settings: RuntimeSettings, sources: RepoSources | None = None) -> Box:
    """The pool key and runtime factory of `task`: its instance image (built when missing) or its local checkout."""
    if task.kind == "local":
        from pinpoint.environments.local import LocalRuntime

        return Box(BoxKey(f"{task.repo_path}@{task.base_commit}"), lambda: LocalRuntime(task.repo_path,
                                                                                         task.base_commit))
    from pinpoint.swebench_eval.images import build_instance_image
    from pinpoint.swebench_eval.runtime import instance_cpus, instance_runtime, preflight

    sources = sources or RepoSources()
    preflight(task.instance, sources)
    tag = build_instance_image(task.instance, sources).tag
    key = BoxKey(tag, instance_cpus(task.instance, settings), dataclasses.astuple(settings))
    return Box(key, lambda: instance_runtime(task.instance, tag, settings), image=tag,
               grader_key=dataclasses.replace(key, grading=True),
               grader_factory=lambda: _primed(instance_runtime(task.instance, tag, settings, grading=True), task))


def _primed(box: DockerRuntime, task: RlTask) -> DockerRuntime:
    """A new grader box with the eval script's install part already run on the base tree (swebench_eval.pooled.
    prime), as a warm pool starts its boxes ahead: the first patch that leaves the packaging alone skips it."""
    from pinpoint.swebench_eval.pooled import prime

    try:
        prime(box, task.instance)
    except BaseException:
        box.close()
        raise
    return box

