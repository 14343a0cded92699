"""The trainer adapters: contract tests against verl's `AgentLoopOutput` and SkyRL's `GeneratorOutput` as read from
their sources (transcribed below, commits cited), SkyRL's `BaseTextEnv` on a real RepairEnv episode (the demo's
real bug as a local task, the scripted gold policy: a fake), and the token-in, token-out episode behind the verl
loop, run with a fake token policy and, for the loop's wiring, a fake `verl` package (both named as fakes)."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import sys
import types
from pathlib import Path
from typing import Any, Optional

import pydantic
import pytest
import skyrl_gym
from pinpoint.environments.errors import UsageError
from pinpoint.environments.runtime import RuntimeSettings
from pinpoint.rl.adapters import (
    EpisodeResult,
    MissingTrainer,
    PinpointSkyRLEnv,
    TokenIO,
    env_settings,
    register_skyrl_env,
    run_token_episode,
    skyrl_generator_output,
    verl_agent_loop_output,
)
from pinpoint.rl.env import INFRA_FAILURE_REWARD, EnvSettings, InfraFailure, RepairEnv
from pinpoint.rl.policies import GoldPolicy, action_text
from pinpoint.rl.tasks import RlTask
from pinpoint.rl.tokens import EpisodeRecorder
from pydantic import BaseModel, ConfigDict
from typing_extensions import TypedDict

# -- the contracts, transcribed ------------------------------------------------------------------------------------
# verl b178a3cd56f58b2d502255daba591e92833930a7, verl/experimental/agent_loop/agent_loop.py: AgentLoopMetrics and
# AgentLoopOutput (pydantic models there too); strict and closed here, so a wrong type or a stray field fails.


class VerlAgentLoopMetrics(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    generate_sequences: float = 0.0
    tool_calls: float = 0.0
    num_preempted: int = -1


class VerlAgentLoopOutput(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: Optional[list[float]] = None  # noqa: UP045 (as verl writes it)
    routed_experts: Optional[Any] = None  # noqa: UP045
    multi_modal_data: Optional[dict[str, Any]] = None  # noqa: UP045
    reward_score: Optional[float] = None  # noqa: UP045
    num_turns: int = 0
    metrics: VerlAgentLoopMetrics
    extra_fields: dict[str, Any] = {}


# SkyRL a9564572eb8e91076be43c1bd5e4615e3de17265, skyrl/train/generators/base.py: GeneratorOutput (a total
# TypedDict: every key present). TrajectoryID, RoutedExpertIndices and torch.Tensor are Any here.
class SkyRLGeneratorOutput(TypedDict):
    __pydantic_config__ = ConfigDict(extra="forbid", strict=True)  # type: ignore[misc]
    prompt_token_ids: list[list[int]]
    response_ids: list[list[int]]
    rewards: list[float] | list[list[float]]
    loss_masks: list[list[int]]
    stop_reasons: Optional[list[str]]  # noqa: UP045
    rollout_metrics: Optional[dict[str, Any]]  # noqa: UP045
    rollout_logprobs: Optional[list[list[float]]]  # noqa: UP045
    trajectory_ids: Optional[list[Any]]  # noqa: UP045
    trajectory_generation_times: Optional[list[float]]  # noqa: UP045
    trajectory_time_splits: Optional[dict[str, list[float]]]  # noqa: UP045
    rollout_expert_indices: Optional[list[Any]]  # noqa: UP045
    is_last_step: Optional[list[bool]]  # noqa: UP045
    env_metrics: Optional[list[dict[str, Any]]]  # noqa: UP045
    pixel_values: Optional[list[Any]]  # noqa: UP045
    image_grid_thw: Optional[list[Any]]  # noqa: UP045


SKYRL_OUTPUT = pydantic.TypeAdapter(SkyRLGeneratorOutput)


def _two_turns() -> EpisodeRecorder:
    """Prompt [1, 2, 3]; generated [10, 11]; observation [4, 5]; generated [12]."""
    recorder = EpisodeRecorder()
    recorder.record_call([1, 2, 3], [], [10, 11], [-0.5, -0.25], 0.75)
    recorder.record_call(None, [4, 5], [12], [-1.0], 0.25)
    return recorder


def test_verl_fields_are_agent_loop_outputs() -> None:
    result = EpisodeResult(_two_turns().snapshot(), 1.0, env_s=2.0, trajectory_id="t")
    fields = verl_agent_loop_output(result)
    output = VerlAgentLoopOutput(**fields)
    assert set(fields) == set(VerlAgentLoopOutput.model_fields)
    assert (output.prompt_ids, output.response_ids, output.response_mask) == ([1, 2, 3], [10, 11, 4, 5, 12],
                                                                              [1, 1, 0, 0, 1])
    assert output.response_logprobs == [-0.5, -0.25, 0.0, 0.0, -1.0]  # aligned with response_ids, as verl pads
    assert (output.reward_score, output.num_turns) == (1.0, 4)
    assert output.metrics == VerlAgentLoopMetrics(generate_sequences=1.0, tool_calls=2.0, num_preempted=-1)
    cut = VerlAgentLoopOutput(**verl_agent_loop_output(result, response_length=3))
    assert (cut.response_ids, cut.response_mask, cut.response_logprobs) == ([10, 11, 4], [1, 1, 0], [-0.5, -0.25, 0.0])
    no_logprobs = dataclasses.replace(result, logprobs=False)
    assert VerlAgentLoopOutput(**verl_agent_loop_output(no_logprobs)).response_logprobs is None


def test_skyrl_fields_are_generator_outputs_per_episode_and_step_wise() -> None:
    single = EpisodeResult(_two_turns().snapshot(), 0.5, env_s=1.0, trajectory_id="a")
    rewritten = _two_turns()
    rewritten.record_call([7, 8], [], [13], [-2.0], 0.5)  # a client rewrote its history: a second segment
    double = EpisodeResult(rewritten.snapshot(), 1.0, env_s=3.0, trajectory_id="b", stop_reason="length")
    output = SKYRL_OUTPUT.validate_python(skyrl_generator_output([single, double]))
    assert set(output) == set(SkyRLGeneratorOutput.__annotations__)
    assert output["prompt_token_ids"] == [[1, 2, 3], [7, 8]] and output["response_ids"] == [[10, 11, 4, 5, 12], [13]]
    assert output["loss_masks"] == [[1, 1, 0, 0, 1], [1]] and output["rewards"] == [0.5, 1.0]
    assert output["rollout_logprobs"] == [[-0.5, -0.25, 0.0, 0.0, -1.0], [-2.0]]
    assert output["trajectory_time_splits"] == {"llm": [1.0, 1.5], "env": [1.0, 3.0]}
    assert output["trajectory_generation_times"] == [2.0, 4.5] and output["stop_reasons"] == ["stop", "length"]
    assert output["trajectory_ids"] == ["a", "b"] and output["is_last_step"] is None
    steps = SKYRL_OUTPUT.validate_python(skyrl_generator_output([single, double], step_wise=True))
    assert steps["is_last_step"] == [True, False, True] and steps["trajectory_ids"] == ["a", "b", "b"]
    assert steps["rewards"] == [[0.0, 0.0, 0.0, 0.0, 0.5], [0.0] * 5, [1.0]]
    assert steps["prompt_token_ids"] == [[1, 2, 3], [1, 2, 3], [7, 8]]


def test_an_infrastructure_failure_is_never_a_training_sample() -> None:
    failed = EpisodeResult(_two_turns().snapshot(), None, infra_failure="container died")
    for build in (verl_agent_loop_output, lambda r: skyrl_generator_output([r])):
        with pytest.raises(InfraFailure, match="container died"):
            build(failed)


class FakeFailingEnv:
    """FAKE RepairEnv whose one step is an infrastructure failure."""

    def reset(self, **kwargs: Any) -> tuple[str, dict]:
        return "task", {"messages": [{"role": "user", "content": "task"}], "task_id": "t", "env_s": 0.0}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        return "[infra]", INFRA_FAILURE_REWARD, False, True, {"infra_failure": "container died"}

    def end_episode(self) -> None:
        pass

    def close(self) -> None:
        pass


@dataclasses.dataclass
class SkyRLStyleEnvConfig:
    """An env config as SkyRL writes them (a dataclass under skyrl_gym's config)."""

    reward: str = "precise"
    max_steps: int = 5


def test_skyrl_env_runs_a_real_episode(demo_task: RlTask) -> None:
    env_id = register_skyrl_env()
    assert register_skyrl_env() == env_id  # once
    env = skyrl_gym.make(env_id, env_config={"reward": "unit"}, extras={"task": demo_task.to_row(), "max_turns": 4})
    try:
        assert isinstance(env, PinpointSkyRLEnv) and env.max_turns == 4
        messages, meta = env.init([{"role": "user", "content": "ignored"}])
        assert [m["role"] for m in messages] == ["system", "user"] and '"tool"' in messages[0]["content"]
        assert meta["task_id"] == "demo-Python-2"
        gold = GoldPolicy(demo_task.gold_patch)
        edit = env.step(action_text(gold.act([])[0]))
        assert (edit["done"], edit["reward"]) == (False, 0.0) and edit["observations"][0]["role"] == "user"
        submitted = env.step(action_text(gold.act([])[0]))
        assert (submitted["done"], submitted["reward"], submitted["observations"]) == (True, 1.0, [])
        assert env.get_metrics()["steps"] == 2 and env.get_metrics()["unit"] == 1.0
    finally:
        env.close()
    failing = PinpointSkyRLEnv({"on_failure": "raise"}, extras={"task": demo_task.to_row()}, env=FakeFailingEnv())
    failing.init([])
    with pytest.raises(InfraFailure, match="container died"):
        failing.step("anything")
    with pytest.raises(UsageError, match="no_such_field"):
        env_settings({"no_such_field": 1})
    assert env_settings(SkyRLStyleEnvConfig()).reward == "precise"
    assert env_settings({"max_steps": 3, "runtime": {"mem_limit": "2g"}}).runtime.mem_limit == "2g"
    with pytest.raises(UsageError, match='"task"'):
        PinpointSkyRLEnv(extras={})


# -- token in, token out --------------------------------------------------------------------------------------------

def fake_ids(text: str) -> list[int]:
    """FAKE tokenizer: a character's code point + 10."""
    return [ord(c) + 10 for c in text]


def fake_text(ids: list[int]) -> str:
    return "".join(chr(i - 10) for i in ids)


class FakeTokenPolicy:
    """FAKE policy in token space: generates the ids of its scripted action texts, logprob -0.5 each, and records
    the contexts it was sent."""

    def __init__(self, actions: list[str]) -> None:
        self.actions = actions
        self.contexts: list[list[int]] = []

    async def generate(self, context: list[int]) -> tuple[list[int], list[float]]:
        self.contexts.append(list(context))
        ids = fake_ids(self.actions.pop(0))
        return ids, [-0.5] * len(ids)

    def io(self) -> TokenIO:
        async def prompt(messages: list[dict]) -> list[int]:
            return fake_ids("".join(m["content"] for m in messages))

        async def observation(text: str) -> list[int]:
            return fake_ids(text[:50])

        return TokenIO(prompt_ids=prompt, generate=self.generate, decode=fake_text, observation_ids=observation)


def _gold_texts(task: RlTask) -> list[str]:
    gold = GoldPolicy(task.gold_patch)
    return [action_text(gold.act([])[0]) for _ in range(2)]


def test_a_token_episode_records_exactly_what_was_generated(demo_task: RlTask) -> None:
    policy = FakeTokenPolicy(_gold_texts(demo_task))
    with RepairEnv(EnvSettings(reward="unit")) as env:
        result = asyncio.run(run_token_episode(env, demo_task.to_row(), policy.io()))
    tokens = result.tokens
    edit, submit = (fake_ids(t) for t in _gold_texts(demo_task))
    observation = len(tokens.response_ids) - len(edit) - len(submit)
    assert (result.reward, result.stop_reason, tokens.calls, len(tokens.segments)) == (1.0, "stop", 2, 1)
    assert tokens.response_mask == [1] * len(edit) + [0] * observation + [1] * len(submit)
    assert tokens.response_ids[: len(edit)] == edit and tokens.response_ids[-len(submit):] == submit
    assert policy.contexts == [tokens.prompt_ids, tokens.prompt_ids + tokens.response_ids[: -len(submit)]]
    assert tokens.generated_logprobs == [-0.5] * (len(edit) + len(submit)) and result.env_s > 0
    VerlAgentLoopOutput(**verl_agent_loop_output(result))
    # a response budget smaller than the episode: submitted as it stands (the dense reward: no grading to wait for)
    with RepairEnv(EnvSettings(reward="localization")) as env:
        short = asyncio.run(run_token_episode(env, demo_task.to_row(), FakeTokenPolicy(_gold_texts(demo_task)).io(),
                                              max_response_tokens=len(edit) + 10))
    assert (short.stop_reason, short.tokens.calls, short.metrics["steps"]) == ("length", 1, 2)
    assert isinstance(short.reward, float)


def test_a_token_episode_is_rewarded_with_its_return_under_the_dense_reward(demo_task: RlTask) -> None:
    """Under the `localization` reward each step gives its delta: the sample's reward is their sum (the return),
    as the same actions stepped through RepairEnv by hand add up to, not the last step's delta alone."""
    with RepairEnv(EnvSettings(reward="localization")) as env:
        env.reset(options={"task": demo_task})
        by_hand = [env.step(action)[1] for action in _gold_texts(demo_task)]
    with RepairEnv(EnvSettings(reward="localization")) as env:
        result = asyncio.run(run_token_episode(env, demo_task.to_row(), FakeTokenPolicy(_gold_texts(demo_task)).io()))
    assert result.tokens.calls == len(by_hand) == 2
    assert by_hand[0] > 0.0  # the edit lands on the gold lines: the shaping is not all in the last step
    assert result.reward == pytest.approx(sum(by_hand))


def _install_fake_verl(monkeypatch: pytest.MonkeyPatch, base: type, output: type) -> dict[str, type]:
    """Put a FAKE `verl.experimental.agent_loop.agent_loop` (AgentLoopBase, AgentLoopOutput, register) in place."""
    registered: dict[str, type] = {}

    def register(name: str):
        def decorator(cls: type) -> type:
            registered[name] = cls
            return cls
        return decorator

    module = types.ModuleType("verl.experimental.agent_loop.agent_loop")
    module.AgentLoopBase, module.AgentLoopOutput, module.register = base, output, register
    for name in ("verl", "verl.experimental", "verl.experimental.agent_loop"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.delitem(sys.modules, "pinpoint.rl.verl_loop", raising=False)
    return registered


def _fake_verl(monkeypatch: pytest.MonkeyPatch) -> dict[str, type]:
    """FAKE `verl` package: just the names verl_loop imports, shaped as verl b178a3cd defines them."""

    class FakeAgentLoopBase:
        def __init__(self, config: Any, server_manager: Any, tokenizer: Any) -> None:
            self.config, self.server_manager, self.tokenizer = config, server_manager, tokenizer

        async def apply_chat_template(self, messages: list[dict], remove_system_prompt: bool = False) -> list[int]:
            return fake_ids("".join(m["content"] for m in messages))[:80]

    return _install_fake_verl(monkeypatch, FakeAgentLoopBase, VerlAgentLoopOutput)


def _load_verl_loop() -> type:
    """The class verl's agent-loop config names: `_target_: pinpoint.rl.verl_loop.PinpointAgentLoop`."""
    return importlib.import_module("pinpoint.rl.verl_loop").PinpointAgentLoop


class FakeServerManager:
    """FAKE verl server manager: verl's `generate(request_id, prompt_ids=, sampling_params=)` -> TokenOutput-like."""

    def __init__(self, policy: FakeTokenPolicy) -> None:
        self.policy, self.request_ids = policy, set()

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict) -> Any:
        self.request_ids.add(request_id)
        ids, logprobs = await self.policy.generate(prompt_ids)
        return types.SimpleNamespace(token_ids=ids, log_probs=logprobs)


def test_the_verl_loop_returns_an_agent_loop_output(demo_task: RlTask, monkeypatch) -> None:
    registered = _fake_verl(monkeypatch)
    loop_class = _load_verl_loop()
    assert registered == {"pinpoint_repair": loop_class}
    config = types.SimpleNamespace(actor_rollout_ref=types.SimpleNamespace(
        rollout=types.SimpleNamespace(response_length=4096)))
    manager = FakeServerManager(FakeTokenPolicy(_gold_texts(demo_task)))
    tokenizer = types.SimpleNamespace(decode=lambda ids, skip_special_tokens: fake_text(ids))
    loop = loop_class(config, manager, tokenizer)
    output = asyncio.run(loop.run({"temperature": 1.0}, raw_prompt=[], extra_info={"task": demo_task.to_row()},
                                  env_settings={"reward": "localization"}))  # dense: no grading to wait for
    assert isinstance(output, VerlAgentLoopOutput) and output.num_turns == 4
    edit, submit = (fake_ids(t) for t in _gold_texts(demo_task))
    generated = [i for i, m in zip(output.response_ids, output.response_mask, strict=True) if m]
    assert generated == edit + submit and output.metrics.tool_calls > 0
    assert output.response_logprobs == [-0.5 if m else 0.0 for m in output.response_mask]
    assert len(manager.request_ids) == 1  # one sticky session per episode


# verl 0.9.1 (PyPI), transcribed: verl/experimental/agent_loop/agent_loop.py (AgentLoopMetrics, AgentLoopOutput,
# DictConfigWrap, AgentLoopBase.__init__ and its ct_* methods, AgentLoopWorker._run_agent_loop's instantiate call),
# verl/utils/tokenizer/continuous_token.py (MergeResult, ContinuousTokenBuilder.align_response_metadata),
# verl/workers/rollout/replica.py (TokenOutput), verl/workers/rollout/llm_server.py (LLMServerClient.generate).
class Verl091AgentLoopMetrics(VerlAgentLoopMetrics):
    compute_score: float = 0.0


class Verl091AgentLoopOutput(VerlAgentLoopOutput):
    metrics: Verl091AgentLoopMetrics
    mm_processor_kwargs: Optional[dict[str, Any]] = None  # noqa: UP045
    mm_processor_output: Optional[list[dict[str, Any]]] = None  # noqa: UP045


class Verl091TokenOutput(BaseModel):
    token_ids: list[int]
    log_probs: Optional[list[float]] = None  # noqa: UP045
    routed_experts: Optional[Any] = None  # noqa: UP045
    stop_reason: Optional[str] = None  # noqa: UP045
    num_preempted: Optional[int] = None  # noqa: UP045
    extra_fields: dict[str, Any] = {}


@dataclasses.dataclass(frozen=True)
class Verl091MergeResult:
    token_ids: list[int]
    appended_token_count: int
    kind: str = "context"
    inserted_token_ids: list[int] = dataclasses.field(default_factory=list)
    removed_prefix_token_count: int = 0


@dataclasses.dataclass
class DictConfigWrap:
    config: Any


BOUNDARY = 3  # FAKE special id: the fake model ends each reply with it; the fake builder drops it before a message
USER = 4  # FAKE special id the fake builder opens a user message with


class FakeContinuousTokenBuilder:
    """FAKE Continuous Token builder, shaped like 0.9.1's GLM builder: merging a message drops a trailing BOUNDARY
    (removed_prefix_token_count 1) and inserts USER (inserted_token_ids)."""

    def build_initial_tokens(self, messages: list[dict], *, tools: Any = None, images: Any = None,
                             videos: Any = None, audios: Any = None, mm_inputs_out: Any = None) -> list[int]:
        return fake_ids("".join(m["content"] for m in messages))

    def merge_assistant_tokens(self, runtime_token_ids: list[int], assistant_token_ids: list[int]) -> Any:
        return Verl091MergeResult(runtime_token_ids + assistant_token_ids, len(assistant_token_ids), "assistant")

    def merge_context_tokens(self, previous_messages: list[dict], updated_messages: list[dict],
                             runtime_token_ids: list[int], *, tools: Any = None) -> Any:
        assert updated_messages[: len(previous_messages)] == previous_messages  # append-only, as verl checks
        appended = [i for m in updated_messages[len(previous_messages):] for i in fake_ids(m["content"][:50])]
        removed = int(bool(runtime_token_ids) and runtime_token_ids[-1] == BOUNDARY)
        kept = runtime_token_ids[: len(runtime_token_ids) - removed]
        return Verl091MergeResult(kept + [USER] + appended, len(appended), "context", [USER], removed)

    def align_response_metadata(self, merge: Any, response_mask: list[int], response_logprobs: Any = None,
                                *, assistant_logprobs: Any = None) -> tuple[list[int], Any]:
        mask = response_mask[: len(response_mask) - merge.removed_prefix_token_count]
        mask += [0] * len(merge.inserted_token_ids) + [int(merge.kind == "assistant")] * merge.appended_token_count
        return mask, None


class FakeAgentLoopBase091:
    """FAKE 0.9.1 `AgentLoopBase`: its constructor and ct_* signatures, over the fake builder."""

    def __init__(self, trainer_config: DictConfigWrap, server_manager: Any, tokenizer: Any, processor: Any,
                 dataset_cls: type, data_config: DictConfigWrap, hf_model_type: str | None = None,
                 **kwargs: Any) -> None:
        self.config = trainer_config.config
        self.rollout_config = self.config.actor_rollout_ref.rollout
        self.server_manager, self.tokenizer, self.processor = server_manager, tokenizer, processor
        self.dataset_cls, self.data_config = dataset_cls, data_config.config
        self.continuous_token_builder = FakeContinuousTokenBuilder()

    async def ct_build_initial_tokens(self, messages: list[dict], tools: Any = None, images: Any = None,
                                      videos: Any = None, audios: Any = None, mm_inputs_out: Any = None) -> list[int]:
        ids = self.continuous_token_builder.build_initial_tokens(messages, tools=tools)
        return ids[-self.rollout_config.prompt_length:]  # verl left-truncates to rollout.prompt_length

    async def ct_merge_context_msg(self, previous_messages: list[dict], updated_messages: list[dict],
                                   runtime_token_ids: list[int], response_mask: list[int],
                                   response_logprobs: Any = None, tools: Any = None) -> tuple[Any, list[int], Any]:
        merge = self.continuous_token_builder.merge_context_tokens(previous_messages, updated_messages,
                                                                   runtime_token_ids, tools=tools)
        return (merge, *self.continuous_token_builder.align_response_metadata(merge, response_mask))

    async def ct_merge_assistant_token(self, runtime_token_ids: list[int], assistant_token_ids: list[int],
                                       response_mask: list[int], response_logprobs: Any = None,
                                       assistant_logprobs: Any = None) -> tuple[Any, list[int], Any]:
        merge = self.continuous_token_builder.merge_assistant_tokens(runtime_token_ids, assistant_token_ids)
        return (merge, *self.continuous_token_builder.align_response_metadata(merge, response_mask))


class FakeLLMServerClient091:
    """FAKE 0.9.1 server manager: `generate(request_id, *, prompt_ids, sampling_params, image_data=None, ...)` ->
    TokenOutput; the fake model ends each reply with BOUNDARY and reports one preemption per call."""

    def __init__(self, policy: FakeTokenPolicy) -> None:
        self.policy, self.request_ids = policy, set()

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict,
                       image_data: Any = None, video_data: Any = None, audio_data: Any = None,
                       mm_processor_kwargs: Any = None, **kwargs: Any) -> Verl091TokenOutput:
        self.request_ids.add(request_id)
        ids, logprobs = await self.policy.generate(prompt_ids)
        return Verl091TokenOutput(token_ids=ids + [BOUNDARY], log_probs=logprobs + [-0.1], num_preempted=1)


def test_the_verl_loop_runs_on_the_091_agent_loop_base(demo_task: RlTask, monkeypatch) -> None:
    registered = _install_fake_verl(monkeypatch, FakeAgentLoopBase091, Verl091AgentLoopOutput)
    loop_class = _load_verl_loop()
    assert registered == {"pinpoint_repair": loop_class}
    config = types.SimpleNamespace(actor_rollout_ref=types.SimpleNamespace(
        rollout=types.SimpleNamespace(response_length=4096, prompt_length=8192)))
    policy = FakeTokenPolicy(_gold_texts(demo_task))
    manager = FakeLLMServerClient091(policy)
    tokenizer = types.SimpleNamespace(decode=lambda ids, skip_special_tokens: fake_text([i for i in ids if i > 9]))
    loop = loop_class(trainer_config=DictConfigWrap(config), server_manager=manager, tokenizer=tokenizer,
                      processor=None, hf_model_type="glm4", dataset_cls=object, data_config=DictConfigWrap({}),
                      tools=types.SimpleNamespace(tools=[]))  # as AgentLoopWorker._run_agent_loop instantiates it
    output = asyncio.run(loop.run({"temperature": 1.0}, raw_prompt=[], extra_info={"task": demo_task.to_row()},
                                  env_settings={"reward": "localization"}))
    assert isinstance(output, Verl091AgentLoopOutput) and output.num_turns == 4
    edit, submit = (fake_ids(t) for t in _gold_texts(demo_task))
    # the first reply's BOUNDARY was dropped by the merge (as the model is sent it), the last one's kept
    generated = [i for i, m in zip(output.response_ids, output.response_mask, strict=True) if m]
    assert generated == edit + submit + [BOUNDARY]
    assert output.response_ids[len(edit)] == USER and output.response_mask[len(edit)] == 0
    sequence = output.prompt_ids + output.response_ids  # every context sent is a prefix of what is recorded
    assert [sequence[: len(c)] for c in policy.contexts] == policy.contexts and len(policy.contexts) == 2
    assert policy.contexts[1] == sequence[: len(sequence) - len(submit) - 1]
    assert output.response_logprobs == [(-0.1 if i == BOUNDARY else -0.5) if m else 0.0
                                        for i, m in zip(output.response_ids, output.response_mask, strict=True)]
    assert output.metrics.num_preempted == 2 and len(manager.request_ids) == 1


def test_without_verl_the_loop_says_how_to_get_it(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "verl", None)
    monkeypatch.delitem(sys.modules, "pinpoint.rl.verl_loop", raising=False)
    with pytest.raises(MissingTrainer, match="pip install verl"):
        _load_verl_loop()


def test_a_skyrl_dictconfig_with_a_partial_runtime_section_builds_settings() -> None:
    """SkyRL and Hydra hand OmegaConf DictConfigs: a partial `runtime:` keeps the other defaults; a wrong type is
    one error that names the field."""
    from omegaconf import OmegaConf

    config = OmegaConf.create({"reward": "precise", "max_steps": 12, "runtime": {"mem_limit": "2g"}})
    settings = env_settings(config)
    assert settings.max_steps == 12
    assert settings.runtime.mem_limit == "2g"
    assert settings.runtime.pids_limit == RuntimeSettings().pids_limit
    with pytest.raises(UsageError, match=r"'env_settings.runtime.pids_limit': expected an integer, got 'many'"):
        env_settings(OmegaConf.create({"runtime": {"pids_limit": "many"}}))


# -- issue 24: the documented task rows, the failure policy, the pool from the trainer's config ---------------------

def test_adapters_take_the_documented_task_rows(demo_task: RlTask) -> None:
    """docs/rl.md's rows: an instance id (looked up in the default dataset, as load_tasks does), a full SWE-bench
    row, a local task's fields; at verl's `extra_info.task` and SkyRL's `env_extras`, also as a DictConfig."""
    from omegaconf import OmegaConf
    from pinpoint.rl.adapters import task_of
    from pinpoint.rl.tasks import task_from

    by_id = task_from({"instance_id": "psf__requests-1142"})
    assert (by_id.kind, by_id.task_id) == ("swebench", "psf__requests-1142") and by_id.gold_patch
    full = task_of({"extra_info": {"task": by_id.to_row()}})
    assert full == by_id
    assert task_of({"extra_info": {"task": {"instance_id": "psf__requests-1142"}}}) == by_id
    assert task_of(OmegaConf.create({"task": {"instance_id": "psf__requests-1142"}})) == by_id
    assert task_of({"task": demo_task.to_row()}) == demo_task
    skyrl = PinpointSkyRLEnv(extras={"task": {"instance_id": "psf__requests-1142"}, "max_turns": 3},
                             env=FakeFailingEnv())
    assert skyrl.task == by_id and skyrl.max_turns == 3
    with pytest.raises(UsageError, match="'nobody__nothing-1' is not in the default dataset") as caught:
        task_of({"task": {"instance_id": "nobody__nothing-1"}})
    assert "\n" not in str(caught.value)


class FlakyEnv:
    """A real RepairEnv behind a FAKE fault: its first `failures` resets raise InfraFailure (as a box that cannot
    start), then it is the real env."""

    def __init__(self, env: RepairEnv, failures: int) -> None:
        self.env, self.failures, self.resets = env, failures, 0

    def reset(self, **kwargs: Any) -> tuple[str, dict]:
        self.resets += 1
        if self.resets <= self.failures:
            raise InfraFailure(f"fake fault: box {self.resets} did not start")
        return self.env.reset(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)


def test_one_failure_never_aborts_a_generation_batch(demo_task: RlTask) -> None:
    """Three samples gathered as verl and SkyRL gather them (no return_exceptions): a task whose box cannot be
    made (a local repository that does not exist: a real failure) is masked by default, the others are trained."""
    from pinpoint.rl.adapters import run_sample
    from pinpoint.rl.trainer_config import TrainerSettings

    broken = RlTask.local("broken", "/nonexistent/pinpoint-repo", "fix it", "true")
    settings = EnvSettings(reward="unit")

    async def batch() -> list[EpisodeResult]:
        envs = [RepairEnv(settings) for _ in range(3)]
        try:
            return await asyncio.gather(*(run_sample(env, task, FakeTokenPolicy(_gold_texts(demo_task)).io())
                                          for env, task in zip(envs, [demo_task, broken, demo_task], strict=True)))
        finally:
            for env in envs:
                env.close()

    good, masked, other = asyncio.run(batch())
    assert good.reward == other.reward == 1.0 and not good.masked
    assert masked.masked and "does not exist" in masked.infra_failure and masked.metrics["tries"] == 1
    fields = VerlAgentLoopOutput(**verl_agent_loop_output(masked))
    assert fields.reward_score == 0.0 and set(fields.response_mask) <= {0} and fields.prompt_ids
    assert "does not exist" in fields.extra_fields["infra_failure"]
    output = SKYRL_OUTPUT.validate_python(skyrl_generator_output([good, masked]))
    assert output["rewards"] == [1.0, 0.0] and not any(output["loss_masks"][1])
    assert any(output["loss_masks"][0]) and "does not exist" in output["env_metrics"][1]["infra_failure"]
    with RepairEnv(settings) as env, pytest.raises(InfraFailure, match="does not exist"):
        asyncio.run(run_sample(env, broken, FakeTokenPolicy([]).io(), TrainerSettings(on_failure="raise")))
    with RepairEnv(settings) as real:  # retry: the third try, on a fresh box, is a real episode
        flaky = FlakyEnv(real, failures=2)
        retried = asyncio.run(run_sample(flaky, demo_task, FakeTokenPolicy(_gold_texts(demo_task)).io(),
                                         TrainerSettings(on_failure="retry", retries=3)))
    assert (retried.reward, retried.masked, retried.metrics["tries"], flaky.resets) == (1.0, False, 3, 3)


def test_skyrl_env_masks_or_retries_and_sizes_the_pool_from_its_config(demo_task: RlTask) -> None:
    from omegaconf import OmegaConf
    from pinpoint.rl.adapters import shared_pool

    masked = PinpointSkyRLEnv(extras={"task": demo_task.to_row()}, env=FakeFailingEnv())
    masked.init([])
    out = masked.step("anything")
    assert (out["done"], out["reward"], out["metadata"]["masked"]) == (True, 0.0, True)
    assert masked.get_metrics()["infra_failure"] == "container died"
    with RepairEnv(EnvSettings(reward="localization")) as real:
        flaky = FlakyEnv(real, failures=1)
        retrying = PinpointSkyRLEnv({"on_failure": "retry", "retries": 2}, extras={"task": demo_task.to_row()},
                                    env=flaky)
        messages, meta = retrying.init([])
        assert meta["task_id"] == demo_task.task_id and flaky.resets == 2 and messages[0]["role"] == "system"
        gave_up = PinpointSkyRLEnv({"on_failure": "retry", "retries": 2}, extras={"task": demo_task.to_row()},
                                   env=FlakyEnv(real, failures=5))
        chat, meta = gave_up.init([])
        assert meta["masked"] and "did not start" in chat[0]["content"] and gave_up.step("x")["reward"] == 0.0
    config = OmegaConf.create({"reward": "unit", "pool_size": 3, "pool_wait_s": 5, "on_failure": "retry"})
    sized = PinpointSkyRLEnv(config, extras={"task": demo_task.to_row()})
    try:
        assert sized.env.pool is shared_pool() and (shared_pool().max_containers, shared_pool().wait_s) == (3, 5.0)
        assert sized.trainer.on_failure == "retry" and sized.env.settings.reward == "unit"
    finally:
        shared_pool().configure(16, 600.0)
    with pytest.raises(UsageError, match="'env_config.on_failure': expected one of 'mask', 'retry', 'raise'"):
        PinpointSkyRLEnv({"on_failure": "ignore"}, extras={"task": demo_task.to_row()})


def test_skyrl_times_count_only_the_episodes_it_keeps() -> None:
    """An episode without a model call has no row; its times must not shift the per-trajectory lists."""
    from pinpoint.rl.tokens import EpisodeTokens

    kept = EpisodeResult(_two_turns().snapshot(), 1.0, env_s=2.0, trajectory_id="a")
    dropped = EpisodeResult(EpisodeTokens.empty(), 0.0, env_s=5.0, trajectory_id="b")
    output = SKYRL_OUTPUT.validate_python(skyrl_generator_output([dropped, kept]))
    assert output["response_ids"] == [[10, 11, 4, 5, 12]] and output["trajectory_generation_times"] == [3.0]
    assert output["trajectory_time_splits"] == {"llm": [1.0], "env": [2.0]}


def test_a_reply_cut_at_max_tokens_is_closed_alike_on_the_verl_and_the_rollout_path() -> None:
    """The same ChatML model (tests/fake_vllm_server.py's FAKE vLLM and its tokenizer): a reply cut at the length
    limit, then an observation. The rollout path (recording gateway) and the token path verl's loop takes without a
    builder (observation ids from the chat template, after `turn_end_ids`) append the same ids after the reply:
    `<|im_end|>` and the newline the model did not write, then the user turn, all mask 0. After a reply that ends
    in the end-of-turn id, both append only the newline."""
    sys.path.insert(0, str(Path(__file__).parent))
    from fake_vllm_server import EOS, FakeVllmServer, render, tokenize
    from pinpoint.agent.llm import LLMClient, LLMConfig
    from pinpoint.rl.adapters import TokenIO, turn_end_ids
    from pinpoint.rl.gateway import RecordingGateway

    chatml = tokenize  # the template's tokenizer (the lambdas' own argument is named `tokenize`, as in HF)
    tokenizer = types.SimpleNamespace(apply_chat_template=lambda messages, tokenize: render(messages, False),
                                      encode=lambda text, add_special_tokens: chatml(text))
    end = tuple(turn_end_ids(tokenizer))
    assert end == tuple(tokenize("<|im_end|>\n"))

    async def observation(text: str) -> list[int]:  # verl b178a3cd: apply_chat_template([user], no system prompt)
        return tokenize(render([{"role": "user", "content": text}]))

    io = TokenIO(prompt_ids=None, generate=None, decode=None, observation_ids=observation, turn_end=end)
    turns = [{"role": "system", "content": "s"}, {"role": "user", "content": "task"}]
    fake = FakeVllmServer("abcdef")
    try:
        with RecordingGateway(fake.url, backend="vllm") as gw:
            for max_tokens in (3, 64):  # cut, then whole (its EOS generated)
                client = LLMClient(LLMConfig(base_url=gw.episode_url(f"e{max_tokens}"), model="fake-vllm",
                                             max_retries=0, tool_mode="text", max_tokens=max_tokens))
                reply = client.complete(turns).content
                client.complete([*turns, {"role": "assistant", "content": reply},
                                 {"role": "user", "content": "obs"}])
                tokens = gw.pop(f"e{max_tokens}")
                generated = tokenize("abcdef")[:3] if max_tokens == 3 else tokenize("abcdef") + [EOS]
                context = tokens.prompt_ids + generated
                appended, replaced = asyncio.run(io.observation("obs", context))
                after = tokens.response_ids[len(generated):]
                assert replaced == 0 and after[: len(appended)] == appended
                assert tokens.response_mask[len(generated): len(generated) + len(appended)] == [0] * len(appended)
                assert appended[:2] == (tokenize("<|im_end|>\n") if max_tokens == 3 else tokenize("\n<|im_start|>"))
    finally:
        fake.close()
