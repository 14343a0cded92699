"""LLMClient against the FAKE scripted OpenAI-compatible server (real HTTP, real `openai` client)."""

from __future__ import annotations

import json

import pytest
from fake_llm_server import (
    FakeScriptedLLMServer,
    delay,
    empty_reply,
    garbage_reply,
    http_error,
    malformed_tool_call,
    text,
    text_action,
    tool_call,
)
from pinpoint.agent.embedded_model import resolve_config
from pinpoint.agent.llm import (
    LLMBadResponse,
    LLMClient,
    LLMConfig,
    LLMContextLengthExceeded,
    LLMError,
    LLMTimeout,
)
from pinpoint.tools.protocol import parse_text_actions, to_text_mode_messages

VIEW = {"type": "function", "function": {
    "name": "view", "description": "Show a file with line numbers.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}
SUBMIT = {"type": "function", "function": {
    "name": "submit", "description": "Submit the current diff.", "parameters": {"type": "object", "properties": {}}}}
TOOLS = [VIEW, SUBMIT]
ASK = [{"role": "system", "content": "You repair code."}, {"role": "user", "content": "Fix the bug in a.py"}]


def client_for(fake: FakeScriptedLLMServer, **overrides) -> LLMClient:
    settings = {"base_url": fake.base_url, "model": "fake", "retry_backoff_s": 0.01, "timeout_s": 10.0, **overrides}
    return LLMClient(LLMConfig(**settings))


def test_native_tool_call_is_parsed_with_logprobs_and_history_shape():
    with FakeScriptedLLMServer([tool_call("view", {"path": "a.py"}, call_id="call_1")]) as fake:
        reply = client_for(fake).complete(ASK, TOOLS)
        sent = fake.chat_requests[0]

    assert [(c.id, c.name, c.arguments, c.parse_error) for c in reply.tool_calls] == [
        ("call_1", "view", {"path": "a.py"}, None)]
    assert sent["tools"] == TOOLS and sent["messages"] == ASK
    assert sent["logprobs"] is True and sent["top_logprobs"] >= 1
    assert reply.logprobs and all(isinstance(t.token_id, int) for t in reply.logprobs)
    assert "".join(t.token for t in reply.logprobs) == '{"path": "a.py"}'
    assert reply.finish_reason == "tool_calls"
    assert reply.assistant_message() == {
        "role": "assistant", "content": "",
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "view", "arguments": '{"path": "a.py"}'}}],
    }


def test_text_mode_describes_tools_in_the_prompt_and_parses_the_action():
    script = [text_action("view", {"path": "a.py"}), text("I think the fix is done.")]
    with FakeScriptedLLMServer(script) as fake:
        client = client_for(fake, tool_mode="text")
        first = client.complete(ASK, TOOLS)
        history = [*ASK, first.assistant_message(),
                   {"role": "tool", "tool_call_id": first.tool_calls[0].id, "content": "1 x = 1"}]
        second = client.complete(history, TOOLS)
        sent_first, sent_second = fake.chat_requests

    assert "tools" not in sent_first
    system = sent_first["messages"][0]
    assert system["role"] == "system" and system["content"].startswith("You repair code.")
    assert '"tool": "<tool name>"' in system["content"] and "- view: Show a file" in system["content"]
    assert "    path (string, required)" in system["content"] and "- submit: Submit" in system["content"]
    assert [(c.name, c.arguments, c.parse_error) for c in first.tool_calls] == [("view", {"path": "a.py"}, None)]
    # a server without tool calling never sees tool roles or tool_calls fields
    assert [m["role"] for m in sent_second["messages"]] == ["system", "user", "assistant", "user"]
    assert all(set(m) == {"role", "content"} for m in sent_second["messages"])
    assert sent_second["messages"][-1]["content"] == "Result of view:\n1 x = 1"
    assert second.tool_calls == [] and second.content == "I think the fix is done."


def test_text_actions_parsing_rules():
    bare = parse_text_actions('{"tool": "submit", "arguments": {}}')
    assert [(c.name, c.arguments, c.parse_error) for c in bare] == [("submit", {}, None)]
    aliases = parse_text_actions('Let me look.\n```json\n{"name": "view", "args": {"path": "b.py"}}\n```')
    assert [(c.name, c.arguments) for c in aliases] == [("view", {"path": "b.py"})]
    assert parse_text_actions("```python\nprint({'tool': 1})\n```\nplain prose") == []
    broken = parse_text_actions('```json\n{"tool": "view", "arguments": {"path": "a.py"\n```')
    assert len(broken) == 1 and broken[0].name == "view" and broken[0].arguments == {}
    assert "not valid JSON" in broken[0].parse_error


def test_cut_off_action_says_so():
    with FakeScriptedLLMServer([text('{"tool": "view", "arguments": {"path": "a.', finish_reason="length")]) as fake:
        reply = client_for(fake, tool_mode="text", constrain_actions=True, max_tokens=16).complete(ASK, TOOLS)
    assert len(reply.tool_calls) == 1 and reply.tool_calls[0].name == "view"
    assert reply.tool_calls[0].parse_error.endswith("(the reply was cut off at max_tokens=16)")


def test_native_history_keeps_its_actions_when_sent_in_text_mode():
    history = [*ASK, {"role": "assistant", "content": "Let me look.", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "view", "arguments": '{"path": "a.py"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "1 x = 1"}]
    converted = to_text_mode_messages(history, TOOLS)
    assert converted[2]["content"] == 'Let me look.\n```json\n{"tool": "view", "arguments": {"path": "a.py"}}\n```'
    assert [(c.name, c.arguments) for c in parse_text_actions(converted[2]["content"])] == [("view", {"path": "a.py"})]
    assert converted[3] == {"role": "user", "content": "Result of view:\n1 x = 1"}


def test_unknown_tool_name_is_reported_not_raised():
    with FakeScriptedLLMServer([tool_call("rm_rf", {"path": "/"})]) as fake:
        reply = client_for(fake).complete(ASK, TOOLS)
    assert reply.tool_calls[0].parse_error == "unknown tool 'rm_rf'; available tools: view, submit"


@pytest.mark.parametrize("failure", [http_error(500), http_error(429, "slow down", retry_after=0), http_error(503)])
def test_transient_failures_are_retried_then_succeed(failure):
    with FakeScriptedLLMServer([failure, failure, text("recovered")]) as fake:
        client = client_for(fake, max_retries=3)
        reply = client.complete(ASK)
        assert len(fake.chat_requests) == 3
    assert reply.content == "recovered"
    assert client.usage.retries == 2 and client.usage.calls == 1


def test_retries_are_bounded_and_the_error_says_so():
    with FakeScriptedLLMServer([http_error(500, "overloaded")] * 3) as fake:
        client = client_for(fake, max_retries=2)
        with pytest.raises(LLMError, match=r"gave up after 3 attempts: HTTP 500: overloaded"):
            client.complete(ASK)
        assert len(fake.chat_requests) == 3


def test_unreachable_endpoint_is_retried_then_reported():
    with FakeScriptedLLMServer() as fake:
        url = fake.base_url
    client = LLMClient(LLMConfig(base_url=url, model="m", max_retries=1, retry_backoff_s=0.01, timeout_s=5))
    with pytest.raises(LLMError, match=r"gave up after 2 attempts: APIConnectionError") as info:
        client.complete(ASK)
    assert url in str(info.value) and client.usage.retries == 1


def test_context_overflow_has_its_own_error():
    overflow = http_error(400, "the request exceeds the available context size, try increasing it")
    with FakeScriptedLLMServer([overflow]) as fake, pytest.raises(LLMContextLengthExceeded, match="context size"):
        client_for(fake).complete(ASK)


def test_reasoning_model_parameters_are_adapted_once():
    def reasoning_model(request):
        if "max_tokens" in request:
            return http_error(400, "Unsupported parameter: 'max_tokens' is not supported with this model. "
                                   "Use 'max_completion_tokens' instead.")
        if "temperature" in request:
            return http_error(400, "Unsupported value: 'temperature' does not support 0.0 with this model.")
        return text("ok")

    with FakeScriptedLLMServer(default=reasoning_model) as fake:
        client = client_for(fake, logprobs=False, max_tokens=77)
        assert client.complete(ASK).content == "ok"
        assert client.complete(ASK).content == "ok"
        last = fake.chat_requests[-1]
        assert len(fake.chat_requests) == 4
    assert last["max_completion_tokens"] == 77 and "temperature" not in last and "max_tokens" not in last


def test_client_errors_are_not_retried(monkeypatch):
    monkeypatch.delenv("PINPOINT_MISSING_KEY", raising=False)
    with FakeScriptedLLMServer([http_error(401, "invalid api key"), text("never")]) as fake:
        with pytest.raises(LLMError, match=r"HTTP 401: invalid api key \(the key is read from \$PINPOINT_MISSING_KEY, "
                                           r"which is NOT set\)"):
            client_for(fake, api_key_env="PINPOINT_MISSING_KEY").complete(ASK)
        assert len(fake.chat_requests) == 1


def test_timeout_raises_llm_timeout():
    with FakeScriptedLLMServer([delay(30, "too late")]) as fake, pytest.raises(LLMTimeout, match=r"within 0.3s"):
        client_for(fake, timeout_s=0.3).complete(ASK)


def test_malformed_tool_call_arguments_yield_parse_error():
    with FakeScriptedLLMServer([malformed_tool_call("view", '{"path": "a.py",')]) as fake:
        reply = client_for(fake).complete(ASK, TOOLS)
    call = reply.tool_calls[0]
    assert call.name == "view" and call.arguments == {} and call.raw_arguments == '{"path": "a.py",'
    assert call.parse_error.startswith("arguments are not valid JSON")
    # the history entry stays valid JSON so strict servers accept it back
    assert reply.assistant_message()["tool_calls"][0]["function"]["arguments"] == "{}"


@pytest.mark.parametrize("step, message", [
    (empty_reply(), "reply has no choices"),
    (garbage_reply("<html>502 Bad Gateway</html>"), "reply is not JSON"),
])
def test_unusable_replies_raise_bad_response(step, message):
    """A garbled reply is retried like a 500 (the server answers the same every time here)."""
    with FakeScriptedLLMServer([step], default=step) as fake, pytest.raises(LLMBadResponse, match=message):
        client_for(fake).complete(ASK)


def test_usage_and_cost_accumulate():
    with FakeScriptedLLMServer([text("one two three"), text("four")]) as fake:
        client = client_for(fake, price_per_mtok_in=2.0, price_per_mtok_out=10.0)
        first = client.complete(ASK)
        second = client.complete(ASK)
    assert first.completion_tokens == 3 and second.completion_tokens == 1
    assert first.cost_usd == pytest.approx((first.prompt_tokens * 2.0 + 3 * 10.0) / 1e6)
    usage = client.usage
    assert usage.calls == 2
    assert usage.prompt_tokens == first.prompt_tokens + second.prompt_tokens > 0
    assert usage.completion_tokens == 4
    assert usage.cost_usd == pytest.approx(first.cost_usd + second.cost_usd)


@pytest.mark.parametrize("prices", [{}, {"price_per_mtok_in": 1.0}])
def test_unknown_price_gives_no_cost_and_no_crash(prices):
    with FakeScriptedLLMServer([text("a"), text("b")]) as fake:
        client = client_for(fake, **prices)
        replies = [client.complete(ASK), client.complete(ASK)]
    assert [r.cost_usd for r in replies] == [None, None]
    assert client.usage.cost_usd is None and client.usage.completion_tokens == 2


def test_key_is_read_from_the_environment_and_never_in_the_public_config(monkeypatch):
    secret = "sk-test-0123456789abcdef"
    monkeypatch.setenv("PINPOINT_TEST_KEY", secret)
    with FakeScriptedLLMServer([text("hi")]) as fake:
        client = client_for(fake, api_key_env="PINPOINT_TEST_KEY")
        client.complete(ASK)
        assert fake.headers[0]["authorization"] == f"Bearer {secret}"
    public = client.config.to_public_dict()
    assert public["api_key_env"] == "PINPOINT_TEST_KEY"
    assert secret not in json.dumps(public) and secret not in repr(client.config)
    with pytest.raises(ValueError, match="api_key_env: expected the name of an environment variable"):
        LLMConfig(base_url="http://127.0.0.1:9/v1", model="m", api_key_env=secret)


def test_logprobs_rejected_once_are_dropped_and_remembered():
    def rejects_logprobs(request):
        return http_error(400, "logprobs is not supported by this model") if request.get("logprobs") else text("ok")

    with FakeScriptedLLMServer(default=rejects_logprobs) as fake:
        client = client_for(fake)
        assert client.complete(ASK).logprobs is None
        assert client.complete(ASK).content == "ok"
        assert [bool(r.get("logprobs")) for r in fake.chat_requests] == [True, False, False]


def test_server_without_native_tools_falls_back_to_text_mode():
    def llama_cpp_without_jinja(request):
        if "tools" in request:
            return http_error(500, "tools param requires --jinja flag")
        return text_action("submit", {})

    with FakeScriptedLLMServer([llama_cpp_without_jinja] * 2) as fake:
        client = client_for(fake)
        reply = client.complete(ASK, TOOLS)
        assert len(fake.chat_requests) == 2 and "tools" not in fake.chat_requests[1]
    assert client.tool_mode == "text"
    assert [(c.name, c.parse_error) for c in reply.tool_calls] == [("submit", None)]


def test_constrained_text_mode_sends_an_action_schema():
    with FakeScriptedLLMServer([text('{"tool": "view", "arguments": {"path": "a.py"}}')]) as fake:
        reply = client_for(fake, tool_mode="text", constrain_actions=True).complete(ASK, TOOLS)
        schema = fake.chat_requests[0]["response_format"]["schema"]
    assert [v["properties"]["tool"]["const"] for v in schema["anyOf"]] == ["view", "submit"]
    assert schema["anyOf"][0]["properties"]["arguments"] == VIEW["function"]["parameters"]
    assert reply.tool_calls[0].arguments == {"path": "a.py"}


def test_action_schema_the_server_cannot_compile_is_dropped():
    def strict_server(request):
        if "response_format" in request:
            return http_error(400, "failed to parse grammar: unsupported JSON schema keyword")
        return text_action("submit", {})

    with FakeScriptedLLMServer(default=strict_server) as fake:
        client = client_for(fake, tool_mode="text", constrain_actions=True)
        assert [c.name for c in client.complete(ASK, TOOLS).tool_calls] == ["submit"]
        client.complete(ASK, TOOLS)
        assert ["response_format" in r for r in fake.chat_requests] == [True, False, False]


def test_bad_config_names_the_field():
    with pytest.raises(ValueError, match=r"llm.tool_mode: expected 'native' or 'text', got 'json'"):
        LLMConfig(base_url="http://x/v1", model="m", tool_mode="json")
    with pytest.raises(ValueError, match=r"llm: unknown field\(s\) temprature"):
        LLMConfig.from_dict({"model": "m", "temprature": 0.2})
    with pytest.raises(ValueError, match="resolve_config"):
        LLMClient(LLMConfig(base_url=None))


def test_resolve_config_keeps_a_configured_endpoint():
    config = LLMConfig(base_url="http://127.0.0.1:9/v1", model="m")
    assert resolve_config(config) is config
