"""One episode, start to end: a policy acting in a `RepairEnv`, with its tokens (through the recording gateway when
the policy is a model), its reward and where the time went. The row it returns is one line of a rollout dataset.

Row fields: `task_id`, `sample`, `policy`, `status` (`terminated`, `truncated` or `infra_failure`), `reward`
(None on an infrastructure failure; the episode's return for the dense `localization` kind), `reward_kind`,
`reward_info` (outcome, unit, edit metrics, `reason` of a failure), `step_rewards`, `steps`, `patch`, `messages`
(the OpenAI chat: the env's system and task messages, then each action and observation), `prompt_ids`,
`response_ids`, `response_mask`, `rollout_logprobs` (empty for scripted policies), `decoding` (`json`: replies
constrained to an action's JSON schema, `free`, or `scripted`), `llm_s`, `env_s`, `wall_s`.

A model server that refuses the request itself (HTTP 400, 401, 403, 404: a model name it does not serve, a bad key,
a request it cannot take) is a usage error, not an infrastructure failure: the row's status is `usage_error`, and a
rollout stops at once instead of masking or retrying every episode.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from pinpoint.agent.candidate_policy import CandidatesPolicy
from pinpoint.agent.llm import LLMClient, LLMConfig, LLMContextLengthExceeded, LLMError
from pinpoint.rl.env import InfraFailure, RepairEnv
from pinpoint.rl.gateway import RecordingGateway, SeedKey
from pinpoint.rl.policies import GoldPolicy, LLMPolicy, NoopPolicy, Policy, action_text
from pinpoint.rl.tasks import RlTask
from pinpoint.rl.tokens import EpisodeTokens

SCRIPTED_POLICIES = ("scripted-gold", "noop", "candidates")
#: what a model server answers to a request it will never take, whoever asks again: the run's configuration is wrong
USAGE_STATUSES = frozenset({400, 401, 403, 404})
#: the reason prefix of an episode ended by the model server (not its box)
POLICY_FAILURE = "policy: "


def is_usage_error(exc: LLMError) -> bool:
    """Whether the server refused the request itself (a model it does not serve, a bad key), not for its length."""
    status = getattr(exc.__cause__, "status_code", None)
    return status in USAGE_STATUSES and not isinstance(exc, LLMContextLengthExceeded)


def make_policy(spec: str, task: RlTask, llm: LLMConfig | None, gateway: RecordingGateway | None,
                episode_id: str, seed: SeedKey | None = None) -> Policy:
    """`scripted-gold` (a fake that replays the gold patch), `noop`, `candidates` (no model: the search's edit
    candidates at the listed suspect lines), or a model (`llm`, through `gateway`, which
    derives each turn's seed from `seed`)."""
    if spec == "scripted-gold":
        return GoldPolicy(task.gold_patch)
    if spec == "noop":
        return NoopPolicy()
    if spec == "candidates":
        return CandidatesPolicy(task)
    if llm is None:
        raise ValueError(f"policy {spec!r} needs an LLM config")
    base_url = gateway.episode_url(episode_id, seed) if gateway is not None else llm.base_url
    config = LLMConfig(**{**llm.__dict__, "base_url": base_url, "tool_mode": "text", "max_retries": 1})
    return LLMPolicy(LLMClient(config))


def run_episode(env: RepairEnv, task: RlTask, policy_spec: str, sample: int, *, llm: LLMConfig | None = None,
                gateway: RecordingGateway | None = None, seed: SeedKey | None = None) -> dict[str, Any]:
    """Play one episode to its end and return its dataset row (never raises for an infrastructure failure);
    `seed`: where the model's per-turn sampling seeds come from (through the gateway)."""
    started = time.monotonic()
    episode_id = f"{task.task_id}-{sample}-{uuid.uuid4().hex[:8]}"
    row: dict[str, Any] = {"task_id": task.task_id, "sample": sample, "policy": policy_spec,
                           "reward_kind": env.settings.reward, "steps": 0, "step_rewards": [], "patch": "",
                           "messages": [], "llm_s": 0.0, "env_s": 0.0, "decoding": _decoding(policy_spec, llm)}
    try:
        _, info = env.reset(options={"task": task})
    except InfraFailure as exc:
        return _ended(row, started, None, {"reason": str(exc)}, "infra_failure")
    row["env_s"] += info["env_s"]
    messages = list(info["messages"])
    policy = make_policy(policy_spec, task, llm, gateway, episode_id, seed)
    tools = info["tools"] if isinstance(policy, LLMPolicy) else None
    row["decoding"] = policy.decoding if isinstance(policy, LLMPolicy) else "scripted"
    while True:
        asked = time.monotonic()
        try:
            action, assistant = policy.act(_for_policy(messages, info, tools), tools)
        except LLMError as exc:  # the model server failed: not the policy's fault, so not a reward
            env.end_episode()
            status = "usage_error" if is_usage_error(exc) else "infra_failure"
            return _ended(row, started, None, {"reason": f"{POLICY_FAILURE}{exc}"}, status, gateway, episode_id)
        row["llm_s"] += time.monotonic() - asked
        messages.append(assistant or {"role": "assistant", "content": action_text(action)})
        observation, reward, terminated, truncated, step_info = env.step(action)
        reward = None if "infra_failure" in step_info else reward  # the env's NaN: rows say there is none
        row["env_s"] += step_info["env_s"]
        row["steps"] += 1
        row["step_rewards"].append(reward)
        messages.append({"role": "user", "content": observation})
        if terminated or truncated:
            break
    row["messages"], row["patch"] = messages, step_info.get("patch", "")
    if env.settings.reward == "localization" and reward is not None:
        reward = sum(r for r in row["step_rewards"] if r is not None)
    status = "infra_failure" if "infra_failure" in step_info else "terminated" if terminated else "truncated"
    reward_info = {k: step_info.get(k) for k in ("outcome", "unit", "edit", "grade_s", "truncated_by")}
    if status == "infra_failure":
        reward_info["reason"] = step_info["infra_failure"]
    return _ended(row, started, reward, reward_info, status, gateway, episode_id)


def _decoding(policy_spec: str, llm: LLMConfig | None) -> str:
    """The decoding mode a policy starts with (the client may drop the constraint on a server that refuses it)."""
    if policy_spec in SCRIPTED_POLICIES or llm is None:
        return "scripted"
    return "json" if llm.constrain_actions else "free"  # a model policy always speaks the text action format


def _for_policy(messages: list[dict], info: dict, tools: list | None) -> list[dict]:
    """A model policy gets the tool schemas apart (its client writes them into the system prompt in text mode)."""
    if tools is None:
        return messages
    return [{"role": "system", "content": info["system_without_tools"]}, *messages[1:]]


def _ended(row: dict[str, Any], started: float, reward: float | None, reward_info: dict, status: str,
           gateway: RecordingGateway | None = None, episode_id: str = "") -> dict[str, Any]:
    tokens = gateway.pop(episode_id) if gateway is not None else EpisodeTokens.empty()
    row.update(reward=reward, reward_info=reward_info, status=status, prompt_ids=tokens.prompt_ids,
               response_ids=tokens.response_ids, response_mask=tokens.response_mask,
               rollout_logprobs=tokens.rollout_logprobs, segments=len(tokens.segments),
               wall_s=time.monotonic() - started)
    if tokens.calls:
        row["llm_s"] = tokens.llm_s
    return row
