"""The rest of the inference path: SGLang's native token-id API (against a FAKE SGLang, tests/fake_sglang_server.py,
in SGLang's real shapes), hermes-style tool calls read as actions, several servers behind one gateway with sticky
episodes, and a plain OpenAI-compatible server's calls recorded retokenized by a local tokenizer. The model servers
here are fakes (named as such); the tokenizer is a real local Hugging Face tokenizer with the fakes' ids."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fake_http import serve_json
from fake_sglang_server import FakeSglangServer, write_fake_tokenizer
from fake_vllm_server import EOS, FakeVllmServer, render, tokenize
from pinpoint.agent.llm import LLMClient, LLMConfig, LLMError
from pinpoint.environments.errors import UsageError
from pinpoint.rl.env import EnvSettings, RepairEnv
from pinpoint.rl.gateway import RecordingGateway, SeedKey, turn_seed
from pinpoint.rl.tasks import RlTask
from pinpoint.tools.protocol import Action, parse_action, parse_text_actions


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_fake_tokenizer(tmp_path_factory.mktemp("tokenizer"))


def _turns(n: int, reply: str = "ok") -> list[dict]:
    messages = [{"role": "system", "content": "S"}]
    for i in range(n):
        messages += [{"role": "user", "content": f"u{i}"}] + ([{"role": "assistant", "content": reply}]
                                                              if i < n - 1 else [])
    return messages


def _client(url: str, **extra: Any) -> LLMClient:
    return LLMClient(LLMConfig(base_url=url, model="m", max_retries=0, tool_mode="text", **extra))


# -- hermes-style tool calls -----------------------------------------------------------------------------------


def test_hermes_tool_calls_are_read_once_into_tool_calls() -> None:
    text = ('I will look.\n<tool_call>\n{"name": "view", "arguments": {"path": "a.py"}}\n</tool_call>\n'
            '<tool_call>{"name": "search", "arguments": "{\\"pattern\\": \\"x\\"}"}</tool_call>')
    calls = parse_text_actions(text)
    assert [(c.name, c.arguments, c.parse_error) for c in calls] == [
        ("view", {"path": "a.py"}, None), ("search", {"pattern": "x"}, None)]
    cut = parse_text_actions('<tool_call>{"name": "view", "arguments": {"path": "a.py"}}')  # no closing tag
    assert (cut[0].name, cut[0].arguments) == ("view", {"path": "a.py"})
    broken = parse_text_actions('<tool_call>{"name": "view", "arguments": {</tool_call>')
    assert broken[0].name == "view" and "not valid JSON" in broken[0].parse_error
    assert parse_action('<tool_call>{"name": "submit", "arguments": {}}</tool_call>') == Action("submit", {})


def test_repair_env_steps_on_hermes_tool_calls(demo_task: RlTask) -> None:
    with RepairEnv(EnvSettings(reward="unit")) as env:
        env.reset(options={"task": demo_task})
        obs, _, terminated, _, _ = env.step(
            '<tool_call>\n{"name": "view", "arguments": {"path": "numeric/functions.py"}}\n</tool_call>')
        assert "def truncate_number" in obs and not terminated
        _, reward, terminated, _, info = env.step('<tool_call>{"name": "submit", "arguments": {}}</tool_call>')
        assert terminated and (reward, info["outcome"]) == (0.0, "empty_patch")


# -- SGLang ------------------------------------------------------------------------------------------------------


def test_sglang_backend_is_token_exact_against_a_fake_sglang(tokenizer_dir: Path) -> None:
    fake = FakeSglangServer("ok")
    try:
        with RecordingGateway(fake.url, backend="sglang", tokenizer=str(tokenizer_dir)) as gw:
            client = _client(gw.episode_url("s", seed=SeedKey(7, "t", 0)), temperature=0.5, max_tokens=64)
            first = client.complete(_turns(1))
            client.complete(_turns(2))
            tokens = gw.pop("s")
    finally:
        fake.close()
    ok_eos = tokenize("ok") + [EOS]
    assert first.content == "ok" and [t.token_id for t in first.logprobs] == ok_eos
    assert tokens.prompt_ids + tokens.response_ids == tokenize(render(_turns(2))) + ok_eos
    assert tokens.generated_logprobs == [-0.25] * 2 * len(ok_eos)
    first_body, second_body = fake.generates
    assert second_body["input_ids"] == tokens.prompt_ids + tokens.response_ids[: -len(ok_eos)]
    assert first_body["return_logprob"] is True and "text" not in first_body
    seed = turn_seed(SeedKey(7, "t", 0), 0)
    assert first_body["sampling_params"] == {"max_new_tokens": 64, "temperature": 0.5, "sampling_seed": seed}
    assert second_body["sampling_params"]["sampling_seed"] == turn_seed(SeedKey(7, "t", 0), 1) != seed


def test_sglang_needs_the_models_tokenizer() -> None:
    with pytest.raises(UsageError, match="--tokenizer"):
        RecordingGateway("http://127.0.0.1:9/v1", backend="sglang")
    with pytest.raises(UsageError, match="not a local Hugging Face tokenizer"):
        RecordingGateway("http://127.0.0.1:9/v1", backend="sglang", tokenizer="/nonexistent/tokenizer")


# -- several servers ---------------------------------------------------------------------------------------------


def test_episodes_are_spread_sticky_and_a_dead_servers_episodes_fail() -> None:
    fakes = [FakeVllmServer("ok", protocol="HTTP/1.0") for _ in range(2)]
    try:
        with RecordingGateway(",".join(f.url for f in fakes), backend="vllm", revive_s=3600) as gw:
            clients = {e: _client(gw.episode_url(e)) for e in ("a", "b")}
            for client in clients.values():
                client.complete(_turns(1))
            placed = {e: gw.server_of(e) for e in clients}
            assert sorted(placed.values()) == [0, 1]  # one episode per server
            for client in clients.values():
                client.complete(_turns(2))
            assert [len(f.completions) for f in fakes] == [2, 2]  # each episode's calls stayed on its server
            dead = placed["b"]
            fakes[dead].close()
            with pytest.raises(LLMError):
                clients["b"].complete(_turns(3))  # its server is gone: an infrastructure failure, not a reply
            assert gw.tokens("b").calls == 2  # the record is as it was
            for episode in ("c", "d"):
                _client(gw.episode_url(episode)).complete(_turns(1))
                assert gw.server_of(episode) == placed["a"]  # new episodes avoid the dead server
            clients["a"].complete(_turns(3))
            assert gw.pop("a").calls == 3
    finally:
        fakes[placed["a"]].close()


# -- a plain OpenAI-compatible server: retokenized -----------------------------------------------------------------


def _fake_openai_server(reply: str) -> tuple[Any, str, list[dict]]:
    """FAKE plain OpenAI-compatible server: chat completions with text only, no token ids."""
    bodies: list[dict] = []

    def answer(method: str, path: str, body: Any) -> tuple[int, Any]:
        if path != "/v1/chat/completions":
            return 404, {"error": {"message": "not found"}}
        bodies.append(body)
        return 200, {"id": "x", "object": "chat.completion", "model": "m",
                     "choices": [{"index": 0, "message": {"role": "assistant", "content": reply},
                                  "finish_reason": "stop"}]}

    server, url = serve_json(answer, protocol="HTTP/1.1")
    return server, url, bodies


def test_openai_backend_records_retokenized_ids(tokenizer_dir: Path) -> None:
    server, url, bodies = _fake_openai_server("ok")
    try:
        with RecordingGateway(url, backend="openai", tokenizer=str(tokenizer_dir)) as gw:
            client = _client(gw.episode_url("o", seed=SeedKey(3, "t", 0)))
            assert client.complete(_turns(1)).content == "ok"
            client.complete(_turns(2))
            tokens = gw.pop("o")
            assert gw.retokenized
        with RecordingGateway(url, backend="openai") as bare:
            _client(bare.episode_url("n")).complete(_turns(1))
            assert bare.pop("n").calls == 0 and not bare.retokenized  # no tokenizer: no ids, and it says so
    finally:
        server.shutdown()
        server.server_close()
    ok = tokenize("ok")
    assert tokens.prompt_ids == tokenize(render(_turns(1)))
    observation = tokenize("<|im_end|>\n<|im_start|>user\nu1<|im_end|>\n<|im_start|>assistant\n")
    assert tokens.response_ids == ok + observation + ok
    assert tokens.response_mask == [1] * len(ok) + [0] * len(observation) + [1] * len(ok)
    assert tokens.rollout_logprobs == [0.0] * len(tokens.response_ids)  # the server gave none
    assert bodies[0]["messages"] and bodies[0]["seed"] == turn_seed(SeedKey(3, "t", 0), 0)  # with the turn's seed
