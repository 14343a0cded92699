"""verl's agent loop on RepairEnv (needs verl: without it, importing this module raises `MissingTrainer`).

In verl's agent-loop config (`actor_rollout_ref.rollout.agent.agent_loop_config_path`):

    - name: pinpoint_repair
      _target_: pinpoint.rl.verl_loop.PinpointAgentLoop
      env_config: {reward: precise, on_failure: mask, pool_size: 32, pool_wait_s: 300}   # optional

(`env_config`: EnvSettings fields and the trainer settings of `pinpoint.rl.trainer_config`) and in each dataset row
`agent_name: pinpoint_repair` and the task (`task`, or `extra_info.task`: a tasks-file row), optionally
`env_settings` (EnvSettings fields over the loop's). Generation goes through verl's server manager in token ids
(token in, token out: nothing is re-tokenized); the prompt and each observation (a user message, mask 0) are
tokenized as verl's own tool loop does it. Two shapes of `AgentLoopBase`, told apart by what it has:

- verl 0.9.1 (`continuous_token_builder`, verl/experimental/agent_loop/agent_loop.py and tool_agent_loop.py): the
  prompt by `ct_build_initial_tokens`, each reply through `ct_merge_assistant_token` and each observation through
  `ct_merge_context_msg` over the episode's chat (a builder may insert boundary ids, mask 0, or drop the context's
  last id: the recorder drops it too, so the ids recorded are the ids the model is sent);
- verl b178a3cd (`apply_chat_template`), and any tokenizer verl has no builder for: the prompt by
  `apply_chat_template`, each observation by `apply_chat_template([user message], remove_system_prompt=True)`,
  after the chat template's end of the assistant turn (`turn_end_ids`: what the recording gateway's rendering
  writes there, so a reply cut at the length limit is closed the same way on both paths).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from uuid import uuid4

from pinpoint.rl.adapters import (
    MissingTrainer,
    TokenIO,
    env_settings,
    run_sample,
    shared_pool,
    task_of,
    turn_end_ids,
    verl_agent_loop_output,
)
from pinpoint.rl.env import RepairEnv
from pinpoint.rl.trainer_config import split_config

try:
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register
except ImportError as exc:
    if not (exc.name or "").startswith("verl"):
        raise
    raise MissingTrainer("the verl agent loop needs verl: pip install verl (with its vLLM or SGLang rollout); "
                         "the output builders in pinpoint.rl.adapters work without it") from exc


class ContinuousChat:
    """The episode's chat for verl 0.9.1's Continuous Token builder: the loop's `ct_*` methods over the messages
    so far (the env's prompt, each decoded reply as an assistant message, each observation as a user message)."""

    def __init__(self, loop: Any) -> None:
        self.loop, self.messages = loop, []

    async def prompt_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        """The first prompt, as the tool loop builds it (left-truncated to rollout.prompt_length by verl)."""
        self.messages = list(messages)
        return list(await self.loop.ct_build_initial_tokens(self.messages))

    async def generated(self, context: list[int], ids: list[int], text: str) -> None:
        """A reply: the builder must append it as it was generated (else the record would not be what was seen)."""
        merge, _, _ = await self.loop.ct_merge_assistant_token(context, ids, [])
        if list(merge.token_ids) != context + ids:
            raise RuntimeError(f"{type(self.loop.continuous_token_builder).__name__} rewrites generated tokens; "
                               "the pinpoint loop records them as generated and cannot follow it")
        self.messages.append({"role": "assistant", "content": text})

    async def observation(self, text: str, context: list[int]) -> tuple[list[int], int]:
        """The observation merged as the tool loop merges a tool response: (ids to append, context ids dropped)."""
        previous = list(self.messages)
        self.messages.append({"role": "user", "content": text})
        merge, _, _ = await self.loop.ct_merge_context_msg(previous, self.messages, context, [])
        kept = len(context) - merge.removed_prefix_token_count
        merged = list(merge.token_ids)
        if merged[:kept] != context[:kept]:
            raise RuntimeError("the Continuous Token merge changed the context before its last ids")
        return merged[kept:], merge.removed_prefix_token_count


@register("pinpoint_repair")
class PinpointAgentLoop(AgentLoopBase):
    """One RepairEnv episode per sample; reward from the env; an infrastructure failure is masked, retried or
    raised as `env_config`'s `on_failure` says (default: masked)."""

    def __init__(self, *args: Any, env_config: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # 0.9.1: trainer_config, ..., hf_model_type, tools=...; b178a3cd: its own
        self.env_part, self.trainer = split_config(env_config)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        response_length = self.config.actor_rollout_ref.rollout.response_length
        preempted: list[int] = []
        io = self._token_io(sampling_params, uuid4().hex, preempted)
        row = kwargs.get("env_settings")
        both = isinstance(row, Mapping) and isinstance(self.env_part, Mapping)
        settings = env_settings({**self.env_part, **row} if both else row if row is not None else self.env_part)
        with RepairEnv(settings, pool=shared_pool(self.trainer)) as env:
            result = await run_sample(env, task_of(kwargs), io, self.trainer, max_response_tokens=response_length)
        fields = verl_agent_loop_output(result, response_length=response_length)
        if preempted:
            fields["metrics"]["num_preempted"] = sum(preempted)
        return AgentLoopOutput(**fields)

    def _token_io(self, sampling_params: dict[str, Any], request_id: str, preempted: list[int]) -> TokenIO:
        """The episode's TokenIO on this verl's shape; `request_id` is sticky (every turn on one server: its
        prefix cache); `preempted` collects the server's preemption counts where it reports them."""
        chat = ContinuousChat(self) if hasattr(self, "continuous_token_builder") else None

        def decode(ids: list[int]) -> str:
            return self.tokenizer.decode(ids, skip_special_tokens=True)

        async def generate(prompt_ids: list[int]) -> tuple[list[int], list[float] | None]:
            output = await self.server_manager.generate(request_id=request_id, prompt_ids=prompt_ids,
                                                        sampling_params=sampling_params)
            ids = list(output.token_ids)
            if getattr(output, "num_preempted", None) is not None:
                preempted.append(int(output.num_preempted))
            if chat is not None:
                await chat.generated(list(prompt_ids), ids, decode(ids))
            return ids, list(output.log_probs) if output.log_probs else None

        async def observation_ids(text: str) -> list[int]:
            return await self.apply_chat_template([{"role": "user", "content": text}], remove_system_prompt=True)

        if chat is not None:
            return TokenIO(prompt_ids=chat.prompt_ids, generate=generate, decode=decode,
                           observation_ids=observation_ids, merge_observation=chat.observation)
        return TokenIO(prompt_ids=self.apply_chat_template, generate=generate, decode=decode,
                       observation_ids=observation_ids, turn_end=tuple(turn_end_ids(self.tokenizer)))

