"""RepairEnv for trainers: SkyRL's `BaseTextEnv`, verl's agent loop, and an episode's tokens as the fields of verl's
`AgentLoopOutput` and SkyRL's `GeneratorOutput`.

- SkyRL (skyrl-gym): `PinpointSkyRLEnv` is a `BaseTextEnv`; `register_skyrl_env()` registers it as
  `pinpoint_repair` for `skyrl_gym.make`. SkyRL's generator tokenizes and generates; the env acts.
- verl: `pinpoint.rl.verl_loop.PinpointAgentLoop` is an `AgentLoopBase` registered as `pinpoint_repair` (verl is
  optional: importing that module without verl raises `MissingTrainer`, which says how to install it). It generates from token ids
  through verl's server manager and records them with the same `EpisodeRecorder` as the gateway.
- `verl_agent_loop_output` / `skyrl_generator_output` turn `EpisodeResult`s (the gateway's or the loop's tokens, the
  reward, LLM and env time) into exactly those trainers' fields (contracts read from verl b178a3cd and 0.9.1 and
  SkyRL a9564572; tests/test_rl_adapters.py pins them).

An infrastructure failure (reward None) is never trained on as a 0: by the trainer config's `on_failure`
(`pinpoint.rl.trainer_config`) it is masked (the default: the sample's loss mask is all 0 and it carries its reason),
retried on a fresh box, or raised as `InfraFailure`; so one broken box never aborts a generation batch.
"""

from __future__ import annotations

import asyncio
import atexit
import dataclasses
import functools
import json
import math
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pinpoint.environments.errors import PinpointError, UsageError
from pinpoint.environments.settings import build_settings
from pinpoint.rl.env import EnvSettings, InfraFailure, RepairEnv
from pinpoint.rl.pool import WarmPool
from pinpoint.rl.tasks import RlTask, task_from
from pinpoint.rl.tokens import EpisodeRecorder, EpisodeTokens, TokenSegment
from pinpoint.rl.trainer_config import TrainerSettings, split_config
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

SKYRL_ENV_ID = "pinpoint_repair"
SUBMIT_ACTION = '{"tool": "submit", "arguments": {}}'


class MissingTrainer(PinpointError, ImportError):
    """A trainer's adapter was asked for but the trainer is not installed."""


@dataclass
class EpisodeResult:
    """One finished episode, for the output builders: its tokens, reward (None: infrastructure failure, with the
    reason) and where the time went. `logprobs=False` when the server gave none (the builders then send None)."""

    tokens: EpisodeTokens
    reward: float | None
    env_s: float = 0.0
    stop_reason: str = "stop"
    infra_failure: str | None = None
    trajectory_id: Any = None
    logprobs: bool = True
    metrics: dict[str, Any] = field(default_factory=dict)
    #: an infrastructure failure kept in the batch with zero weight (loss mask all 0, reward 0.0)
    masked: bool = False

    def checked_reward(self) -> float:
        """The reward as a float (0.0 for a masked sample); InfraFailure when there is none (never a silent 0)."""
        if self.masked:
            return 0.0
        if self.reward is None:
            raise InfraFailure(f"episode {self.trajectory_id or ''} has no reward (infrastructure failure: "
                               f"{self.infra_failure or 'no reason given'}); it cannot be a training sample")
        return float(self.reward)


# -- settings and the process's pool ---------------------------------------------------------------------------

def env_settings(config: Any = None) -> EnvSettings:
    """EnvSettings from a trainer's config: a mapping (dict, OmegaConf DictConfig), a dataclass of its own, or an
    EnvSettings; a partial `runtime` section keeps the other defaults; an unknown field or a wrong type is one
    ConfigError (a UsageError) naming the field."""
    return build_settings(EnvSettings, config, "env_settings")


_pool: WarmPool | None = None
_pool_lock = threading.Lock()


def shared_pool(trainer: TrainerSettings | None = None) -> WarmPool:
    """One warm pool per process: trainers make an env per trajectory, and the containers must outlive them. The
    first call sizes it; a later call with settings applies their bounds (`pool_size`, `pool_wait_s`)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            trainer = trainer or TrainerSettings()
            _pool = WarmPool(idle_per_key=trainer.idle_per_key, max_containers=trainer.pool_size,
                             wait_s=trainer.pool_wait_s)
            atexit.register(_pool.close)
        elif trainer is not None:
            _pool.configure(trainer.pool_size, trainer.pool_wait_s)
        return _pool


def task_of(extras: Any) -> RlTask:
    """The task a trainer's dataset row carries (`task`, or `extra_info.task`: verl's and SkyRL's usual place), as
    an RlTask: an `{"instance_id"}` row, a full SWE-bench row or a local task's fields (`task_from`)."""
    task = extras.get("task") or (extras.get("extra_info") or {}).get("task")
    if task is None:
        raise UsageError('a pinpoint dataset row needs "task" (a tasks-file row), at the top or in "extra_info"')
    if isinstance(task, str):  # `pinpoint rl dataset` stores it as JSON text: rows of any shape share one column
        try:
            task = json.loads(task)
        except json.JSONDecodeError as exc:
            raise UsageError(f"dataset row task: not JSON ({exc.msg})") from None
    elif isinstance(task, Mapping):  # a Parquet struct unifies keys across rows: another row's keys come as None
        task = {key: value for key, value in dict(task).items() if value is not None}
    return task_from(task, "dataset row task")


# -- SkyRL ------------------------------------------------------------------------------------------------------

class PinpointSkyRLEnv(BaseTextEnv):
    """RepairEnv as a SkyRL text env: `init` resets it and returns its chat; `step(text)` runs one action.

    `extras` is the dataset row's env extras (`task`, and `max_turns`, which SkyRL's generator sets: it becomes the
    env's step budget, so the last turn is graded). `env_config` holds EnvSettings fields and the trainer settings
    (`on_failure`, `retries`, `pool_size`, `pool_wait_s`: `pinpoint.rl.trainer_config`). Rewards are 0.0 until the
    end. An infrastructure failure: `raise` raises InfraFailure; `retry` tries `init` again on a fresh box (a
    failure mid-episode cannot be retried from inside SkyRL's loop); then, and under `mask`, the episode ends at the
    next step with reward 0.0 and `metadata["infra_failure"]`, `masked: True` (SkyRL's generator builds the loss
    mask itself: filter such samples on `env_metrics["masked"]`, or build the batch with `skyrl_generator_output`).
    """

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None,
                 env: RepairEnv | None = None) -> None:
        super().__init__()
        extras = extras or {}
        env_part, self.trainer = split_config(env_config)
        settings = env_settings(env_part)
        if extras.get("max_turns"):
            settings = dataclasses.replace(settings, max_steps=int(extras["max_turns"]))
        self.max_turns = settings.max_steps
        self.task = task_of(extras)
        self.env = env or RepairEnv(settings, pool=shared_pool(self.trainer))
        self.last_info: dict[str, Any] = {}
        self.reward: float | None = None
        self.failure: str | None = None
        self.turns = 0

    def init(self, prompt: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The task's own chat (system prompt with the text-format tools, then the task); `prompt` is ignored. When
        no box can be had (after the retries), a one-message chat saying so, and the sample is masked."""
        self.turns, self.failure, reasons = 0, None, []
        for _ in range(self.trainer.tries):
            try:
                _, info = self.env.reset(options={"task": self.task})
                return list(info["messages"]), {"task_id": info["task_id"], "env_s": info["env_s"]}
            except InfraFailure as exc:
                if self.trainer.on_failure == "raise":
                    raise
                reasons.append(str(exc))
        self.failure = "; ".join(reasons)
        return ([{"role": "user", "content": f"[pinpoint: infrastructure failure, sample masked: {self.failure}]"}],
                {"task_id": self.task_id, "infra_failure": self.failure, "masked": True})

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        if self.failure is not None:
            return self._masked()
        observation, reward, terminated, truncated, info = self.env.step(action)
        self.last_info = info
        if "infra_failure" in info:
            if self.trainer.on_failure == "raise":
                raise InfraFailure(f"{self.task_id}: {info.get('infra_failure')}")
            self.failure = str(info.get("infra_failure") or "no reason given")
            return self._masked()
        done = terminated or truncated
        if done:
            self.reward = reward
        return BaseTextEnvStepOutput(observations=[] if done else [{"role": "user", "content": observation}],
                                     reward=float(reward), done=done, metadata=info, postprocessed_action=None)

    def _masked(self) -> BaseTextEnvStepOutput:
        self.env.end_episode()
        self.reward = 0.0
        return BaseTextEnvStepOutput(observations=[], reward=0.0, done=True, postprocessed_action=None,
                                     metadata={"infra_failure": self.failure, "masked": True})

    @property
    def task_id(self) -> str:
        return self.task.task_id

    def get_metrics(self) -> dict[str, Any]:
        info = self.last_info
        return {"steps": self.turns, "reward": self.reward, "unit": info.get("unit"),
                "edited_lines": info.get("edited_lines"), "env_s": info.get("env_s"),
                "masked": self.failure is not None, "infra_failure": self.failure}

    def close(self) -> None:
        self.env.close()


def register_skyrl_env(env_id: str = SKYRL_ENV_ID) -> str:
    """Register PinpointSkyRLEnv with skyrl_gym (once; safe to call again) and return its id."""
    from skyrl_gym.envs.registration import register, registry

    if env_id not in registry:
        register(id=env_id, entry_point=f"{__name__}:PinpointSkyRLEnv")
    return env_id


# -- an episode in token space (verl's loop; any token-in, token-out trainer) -------------------------------------

@dataclass(frozen=True)
class TokenIO:
    """How a token-in, token-out loop talks to its trainer: the first prompt's ids, a generation (ids and their
    logprobs, None when the server gives none), decoding for the env, and an observation's ids. `merge_observation`,
    when set, is used instead of `observation_ids`: given the observation and the context so far, the ids to append
    and how many of the context's last ids they replace (a boundary token the chat template writes otherwise).
    `turn_end`: the ids the chat template writes after an assistant message's text (ChatML: `<|im_end|>`, `\n`);
    without a merge, they close each reply before its observation (those the model did not generate, mask 0), as the
    recording gateway's rendering closes it: a reply cut at the length limit gets its end-of-turn id too."""

    prompt_ids: Callable[[list[dict[str, Any]]], Awaitable[list[int]]]
    generate: Callable[[list[int]], Awaitable[tuple[list[int], list[float] | None]]]
    decode: Callable[[list[int]], str]
    observation_ids: Callable[[str], Awaitable[list[int]]]
    merge_observation: Callable[[str, list[int]], Awaitable[tuple[list[int], int]]] | None = None
    turn_end: tuple[int, ...] = ()

    async def observation(self, text: str, context: list[int]) -> tuple[list[int], int]:
        """The observation's ids to append after the context, and how many of its last ids they replace."""
        if self.merge_observation is not None:
            return await self.merge_observation(text, context)
        return closing_ids(self.turn_end, context) + await self.observation_ids(text), 0


MARK = "\u2063pinpoint-reply\u2063"


def turn_end_ids(tokenizer: Any) -> list[int]:
    """The ids a Hugging Face tokenizer's chat template writes after an assistant message's text (ChatML:
    `<|im_end|>` and a newline); none when it has no template or the text does not survive rendering."""
    messages = [{"role": "user", "content": "u"}, {"role": "assistant", "content": MARK}]
    try:
        text = tokenizer.apply_chat_template(messages, tokenize=False)
    except (AttributeError, ValueError, TypeError):
        return []
    if not isinstance(text, str) or MARK not in text:
        return []
    return list(tokenizer.encode(text.split(MARK, 1)[1], add_special_tokens=False))


def closing_ids(turn_end: Sequence[int], context: Sequence[int]) -> list[int]:
    """The template's end of the assistant turn that `context` (ending with a reply) still lacks: all of `turn_end`
    after a reply cut at the length limit, the rest of it after the end-of-turn id the model generated."""
    if not turn_end:
        return []
    return list(turn_end[1:]) if list(context[-1:]) == list(turn_end[:1]) else list(turn_end)


def _added(total: float | None, reward: float) -> float | None:
    """A running episode return; an infrastructure failure (the env's NaN reward) anywhere makes it None, never a
    number."""
    return None if total is None or math.isnan(reward) else total + reward


async def run_token_episode(env: RepairEnv, task: Any, io: TokenIO,
                            max_response_tokens: int | None = None) -> EpisodeResult:
    """One episode: generate from the recorded ids, act, append the observation's ids, until the env ends it. When
    the response would outgrow `max_response_tokens`, the episode is submitted (graded as it stands). Its reward is
    the episode's return, the sum of the step rewards: the final reward for `unit`/`precise` (earlier steps give
    0), the whole shaping for the dense `localization` reward (each step gives its delta)."""
    loop = asyncio.get_running_loop()
    started = time.monotonic()
    _, info = await loop.run_in_executor(None, functools.partial(env.reset, options={"task": task}))
    env_s = time.monotonic() - started
    recorder, pending, retract, logprobs_known = EpisodeRecorder(), [], 0, True
    episode_return: float | None = 0.0  # the sum of the step rewards: the dense reward's deltas add up
    prompt: list[int] | None = await io.prompt_ids(info["messages"])
    stop_reason = "stop"
    while True:
        context = prompt if prompt is not None else _kept(recorder.current.context_ids, retract) + pending
        started = time.monotonic()
        ids, logprobs = await io.generate(context)
        logprobs_known = logprobs_known and logprobs is not None
        recorder.record_call(prompt, pending, ids, logprobs or [0.0] * len(ids), time.monotonic() - started,
                             retract=retract)
        action = io.decode(ids)
        if max_response_tokens is not None and len(recorder.current.response_ids) >= max_response_tokens:
            action, stop_reason = SUBMIT_ACTION, "length"
        started = time.monotonic()
        observation, reward, terminated, truncated, info = await loop.run_in_executor(None, env.step, action)
        env_s += time.monotonic() - started
        episode_return = _added(episode_return, reward)
        if terminated or truncated:
            break
        prompt = None
        pending, retract = await io.observation(observation, recorder.current.context_ids)
        grown = len(recorder.current.response_ids) - retract + len(pending)
        if max_response_tokens is not None and grown >= max_response_tokens:
            started = time.monotonic()
            _, reward, _, _, info = await loop.run_in_executor(None, env.step, SUBMIT_ACTION)
            env_s += time.monotonic() - started
            episode_return = _added(episode_return, reward)
            stop_reason = "length"
            break
    return EpisodeResult(recorder.snapshot(), episode_return, env_s, stop_reason, info.get("infra_failure"),
                         logprobs=logprobs_known, metrics={"steps": info.get("steps"), "unit": info.get("unit")})


def _kept(ids: list[int], retract: int) -> list[int]:
    """`ids` without its last `retract`."""
    return ids[: len(ids) - retract]


async def run_sample(env: RepairEnv, task: Any, io: TokenIO, trainer: TrainerSettings | None = None,
                     max_response_tokens: int | None = None) -> EpisodeResult:
    """`run_token_episode` under the failure policy: an infrastructure failure (at reset or later) is tried again
    on a fresh box under `retry`, raised under `raise`, else the sample is masked (its reason in `infra_failure`,
    the tries in `metrics`). Model-server errors are the trainer's and pass through."""
    trainer = trainer or TrainerSettings()
    reasons: list[str] = []
    tokens = EpisodeTokens.empty()
    for attempt in range(1, trainer.tries + 1):
        try:
            result = await run_token_episode(env, task, io, max_response_tokens)
        except InfraFailure as exc:
            if trainer.on_failure == "raise":
                raise
            reasons.append(str(exc))
            continue
        if result.reward is not None:
            result.metrics["tries"] = attempt
            return result
        if trainer.on_failure == "raise":
            raise InfraFailure(f"{task_from(task).task_id}: {result.infra_failure}")
        reasons.append(result.infra_failure or "no reason given")
        tokens = result.tokens
    reason = "; ".join(reasons)
    if not tokens.segments:  # no model call was made: the sample is the failure's own one-message prompt
        prompt = await io.prompt_ids([{"role": "user", "content": f"[pinpoint: infrastructure failure: {reason}]"}])
        tokens = EpisodeTokens(list(prompt), [], [], [], 0.0, 0, [TokenSegment(list(prompt))])
    return EpisodeResult(tokens, None, stop_reason="infra_failure", infra_failure=reason,
                         metrics={"tries": trainer.tries, "masked": True}, masked=True)


# -- trainer outputs ----------------------------------------------------------------------------------------------

def verl_agent_loop_output(result: EpisodeResult, response_length: int | None = None,
                           num_turns: int | None = None) -> dict[str, Any]:
    """The fields of verl's `AgentLoopOutput` (pass them as `AgentLoopOutput(**fields)`), from the last segment.

    `response_length` cuts the response as verl's own loops do; `num_turns` defaults to verl's count (the first
    prompt, each reply, each observation fed back: 2 per model call). `metrics` is `AgentLoopMetrics`'s fields:
    generate_sequences = LLM seconds, tool_calls = env seconds. A masked sample's response mask is all 0 and
    `extra_fields` holds its `infra_failure`.
    """
    reward = result.checked_reward()
    tokens = result.tokens
    cut = slice(None, response_length)
    failure = {"infra_failure": result.infra_failure} if result.masked else {}
    return {
        "prompt_ids": list(tokens.prompt_ids),
        "response_ids": tokens.response_ids[cut],
        "response_mask": _mask(result, tokens.response_mask)[cut],
        "response_logprobs": tokens.rollout_logprobs[cut] if result.logprobs else None,
        "routed_experts": None,
        "multi_modal_data": {},
        "reward_score": reward,
        "num_turns": 2 * tokens.segments[-1].calls if num_turns is None and tokens.segments else (num_turns or 0),
        "metrics": {"generate_sequences": tokens.llm_s, "tool_calls": result.env_s, "num_preempted": -1},
        "extra_fields": {"stop_reason": result.stop_reason, "earlier_segments": max(0, len(tokens.segments) - 1),
                         **result.metrics, **failure},
    }


def _mask(result: EpisodeResult, mask: list[int]) -> list[int]:
    """The loss mask as trained: all 0 for a masked sample."""
    return [0] * len(mask) if result.masked else list(mask)


def skyrl_generator_output(results: Sequence[EpisodeResult], step_wise: bool = False) -> dict[str, Any]:
    """The fields of SkyRL's `GeneratorOutput` for a batch of episodes, in order.

    Default: one row per episode (its last segment), scalar rewards. `step_wise=True` (SkyRL's
    `generator.step_wise_trajectories`): one row per segment, per-token rewards with the episode's reward on the
    last token of its last segment, `is_last_step` marking it; rows of one episode share its trajectory id. An
    episode without a model call has no row; the per-trajectory figures count only the episodes that have rows.
    """
    results = [r for r in results if r.tokens.segments]
    rows = [(r, s, i == len(r.tokens.segments) - 1) for r in results
            for i, s in enumerate(r.tokens.segments if step_wise else r.tokens.segments[-1:])]
    rewards: list[Any] = []
    for result, segment, last in rows:
        reward = result.checked_reward()
        if step_wise:
            per_token = [0.0] * len(segment.response_ids)
            if last and per_token:
                per_token[-1] = reward
            rewards.append(per_token)
        else:
            rewards.append(reward)
    with_ids = all(r.trajectory_id is not None for r in results)
    return {
        "prompt_token_ids": [list(s.prompt_ids) for _, s, _ in rows],
        "response_ids": [list(s.response_ids) for _, s, _ in rows],
        "rewards": rewards,
        "loss_masks": [_mask(r, s.response_mask) for r, s, _ in rows],
        "stop_reasons": [r.stop_reason for r, _, _ in rows],
        "rollout_metrics": _rollout_metrics(results),
        "rollout_logprobs": [list(s.rollout_logprobs) for _, s, _ in rows]
        if all(r.logprobs for r in results) else None,
        "trajectory_ids": [r.trajectory_id for r, _, _ in rows] if with_ids else None,
        "trajectory_generation_times": [r.tokens.llm_s + r.env_s for r in results],
        "trajectory_time_splits": {"llm": [r.tokens.llm_s for r in results], "env": [r.env_s for r in results]},
        "rollout_expert_indices": None,
        "is_last_step": [last for _, _, last in rows] if step_wise else None,
        "env_metrics": [{**r.metrics, **({"infra_failure": r.infra_failure} if r.masked else {})}
                        for r, _, _ in rows],
        "pixel_values": None,
        "image_grid_thw": None,
    }


def _rollout_metrics(results: Sequence[EpisodeResult]) -> dict[str, float]:
    count = max(1, len(results))
    return {"pinpoint/avg_llm_s": sum(r.tokens.llm_s for r in results) / count,
            "pinpoint/avg_env_s": sum(r.env_s for r in results) / count,
            "pinpoint/avg_model_calls": sum(r.tokens.calls for r in results) / count}
