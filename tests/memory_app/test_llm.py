import json

import pytest

from memory_app import llm
from memory_app.llm import (
    ModelError,
    ModelReply,
    ModelToolCall,
    OpenAIChatModel,
    ScriptedModel,
    assistant_message,
)
from memory_app.tools import Tool
from tests.memory_app.wire_server import WireServer, completion

REMEMBER = Tool(
    name="remember_memory",
    description="Save a fact",
    schema={"type": "object", "properties": {"content": {"type": "string"}}},
    invoke=lambda arguments: "{}",
)
SEARCH = Tool(
    name="search_thread_messages",
    description="Search history",
    schema={"type": "object", "properties": {"query": {"type": "string"}}},
    invoke=lambda arguments: "{}",
)


def client(server: WireServer, api_key: str = "sk-test") -> OpenAIChatModel:
    return OpenAIChatModel(base_url=server.url + "/", api_key=api_key, model="m-1", timeout=5)


def test_client_posts_messages_and_function_tools_in_the_wire_format():
    messages = [{"role": "system", "content": "rules"}, {"role": "user", "content": "hi"}]
    with WireServer([completion({"role": "assistant", "content": "hello"})]) as server:
        reply = client(server).complete(messages=messages, tools=[REMEMBER])
    sent = server.requests[0]
    assert sent["path"] == "/v1/chat/completions"
    assert sent["authorization"] == "Bearer sk-test"
    assert sent["body"] == {
        "model": "m-1",
        "messages": messages,
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "remember_memory",
                    "description": "Save a fact",
                    "parameters": REMEMBER.schema,
                },
            }
        ],
    }
    assert reply == ModelReply(text="hello", tool_calls=[])


def test_client_sends_no_tools_key_and_no_authorization_when_unset():
    with WireServer([completion({"role": "assistant", "content": "ok"})]) as server:
        client(server, api_key="").complete(messages=[{"role": "user", "content": "x"}], tools=[])
    assert "tools" not in server.requests[0]["body"]
    assert server.requests[0]["authorization"] is None


def test_client_parses_tool_calls_and_flags_arguments_that_are_not_an_object():
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "remember_memory", "arguments": '{"content": "茶"}'},
            },
            {
                "id": "call_2",
                "type": "function",
                "function": {"name": "search_thread_messages", "arguments": "[1, 2"},
            },
        ],
    }
    with WireServer([completion(message)]) as server:
        reply = client(server).complete(messages=[{"role": "user", "content": "x"}], tools=[])
    assert reply == ModelReply(
        text="",
        tool_calls=[
            ModelToolCall("call_1", "remember_memory", {"content": "茶"}),
            ModelToolCall("call_2", "search_thread_messages", None),
        ],
    )


def test_client_flags_tool_arguments_nested_too_deep_to_parse_as_not_an_object():
    deep = "[" * 100_000 + "]" * 100_000
    call = {"id": "c1", "type": "function", "function": {"name": "n", "arguments": deep}}
    message = {"role": "assistant", "content": "", "tool_calls": [call]}
    with WireServer([completion(message)]) as server:
        reply = client(server).complete(messages=[{"role": "user", "content": "x"}], tools=[])
    assert reply.tool_calls == [ModelToolCall("c1", "n", None)]


@pytest.mark.parametrize(
    "answer",
    [
        (500, b'{"error": {"message": "boom"}}'),
        (200, b"not json"),
        (200, b'{"choices": []}'),
        (200, b'{"choices": [{"message": {"content": 42}}]}'),
        (200, b"[" * 100_000 + b"]" * 100_000),
    ],
)
def test_client_turns_http_errors_and_malformed_answers_into_model_error(answer):
    with WireServer([answer]) as server, pytest.raises(ModelError):
        client(server).complete(messages=[{"role": "user", "content": "x"}], tools=[])


def test_client_refuses_a_response_over_its_byte_cap(monkeypatch):
    monkeypatch.setattr(llm, "MODEL_RESPONSE_MAX_BYTES", 64)
    big = completion({"role": "assistant", "content": "x" * 200})
    with WireServer([big]) as server, pytest.raises(ModelError, match="too large"):
        client(server).complete(messages=[{"role": "user", "content": "x"}], tools=[])


def test_client_reports_an_unreachable_endpoint_as_model_error():
    with WireServer([]) as server:
        url = server.url
    model = OpenAIChatModel(base_url=url, api_key="", model="m", timeout=2)
    with pytest.raises(ModelError, match="unreachable"):
        model.complete(messages=[{"role": "user", "content": "x"}], tools=[])


def test_settings_choose_the_http_client_only_when_a_base_url_is_set(settings):
    settings.LLM_BASE_URL = ""
    assert isinstance(llm.chat_model_from_settings(), ScriptedModel)
    settings.LLM_BASE_URL = "http://127.0.0.1:9/v1"
    settings.LLM_MODEL = "m-2"
    model = llm.chat_model_from_settings()
    assert isinstance(model, OpenAIChatModel)
    assert (model.url, model.model) == ("http://127.0.0.1:9/v1/chat/completions", "m-2")


def test_assistant_message_round_trips_tool_calls_through_the_wire_parser():
    reply = ModelReply(
        text="", tool_calls=[ModelToolCall("c1", "remember_memory", {"content": "a"})]
    )
    wire = json.dumps({"choices": [{"message": assistant_message(reply)}]}).encode()
    assert llm._parse_completion(wire) == reply


@pytest.mark.parametrize(
    ("text", "name", "arguments"),
    [
        (
            "Please remember that I drink oolong tea",
            "remember_memory",
            {"content": "I drink oolong tea"},
        ),
        ("记住：我喜欢乌龙茶", "remember_memory", {"content": "我喜欢乌龙茶"}),
        ("search my history for oolong", "search_thread_messages", {"query": "oolong"}),
    ],
)
def test_scripted_model_calls_an_offered_tool_for_an_explicit_request(text, name, arguments):
    reply = ScriptedModel().complete(
        messages=[{"role": "user", "content": text}], tools=[REMEMBER, SEARCH]
    )
    assert [(call.name, call.arguments) for call in reply.tool_calls] == [(name, arguments)]


def test_scripted_model_only_echoes_when_the_tool_is_not_offered():
    reply = ScriptedModel().complete(
        messages=[{"role": "user", "content": "remember that I drink tea"}], tools=[]
    )
    assert reply == ModelReply(text="You said: remember that I drink tea")


def test_scripted_model_reports_tool_results_by_tool_name():
    reply = ModelReply(
        text="", tool_calls=[ModelToolCall("c1", "remember_memory", {"content": "a"})]
    )
    messages = [
        {"role": "user", "content": "remember a"},
        assistant_message(reply),
        {"role": "tool", "tool_call_id": "c1", "content": '{"status": "added"}'},
    ]
    answer = ScriptedModel().complete(messages=messages, tools=[REMEMBER])
    assert answer.text == 'Tool results:\nremember_memory: {"status": "added"}'


def test_scripted_model_recalls_only_the_memory_block_of_the_system_prompt():
    system = (
        "rules\n<<<BEGIN USER MEMORY ab12>>>\nI drink oolong tea\n<<<END USER MEMORY ab12>>>\nmore"
    )
    messages = [
        {"role": "system", "content": system},
        {"role": "user", "content": "What do you remember?"},
    ]
    assert ScriptedModel().complete(messages=messages, tools=[]).text == (
        "From memory:\nI drink oolong tea"
    )
    messages[0]["content"] = "rules only"
    assert ScriptedModel().complete(messages=messages, tools=[]).text == "I have no saved memory."
