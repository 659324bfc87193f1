"""Trusted identity: the run context is written by the Chat service and checked at every call."""

import dataclasses
import json

import pytest
from langchain_core.utils.function_calling import convert_to_openai_tool

from memory_app.runtime import ToolRuntimeContext, build_chatbot_graph
from memory_app.tools import build_memory_tools
from tests.contract.helpers import (
    CONTEXT_FIELDS,
    TOOL_NAMES,
    call,
    memory_path,
    tools_by_name,
    write_agents_file,
)
from tests.factories import ConversationFactory, MessageFactory, context_for, memory_run


def test_tool_runtime_context_has_the_five_string_fields_and_validates_nothing():
    assert [field.name for field in dataclasses.fields(ToolRuntimeContext)] == list(CONTEXT_FIELDS)
    nonsense = ToolRuntimeContext("", "no-thread", "not-a-uuid", "", "")
    assert nonsense.run_id == "not-a-uuid"


@pytest.mark.django_db
def test_remember_schema_exposes_no_context_field_and_history_schemas_no_identity(ctx):
    tools = tools_by_name(ctx)
    assert set(tools) == TOOL_NAMES
    for tool in tools.values():
        schema = convert_to_openai_tool(tool)["function"]["parameters"]
        assert schema["type"] == "object" and set(schema["properties"]) == set(tool.args)
        json.dumps(schema)  # a JSON schema is JSON
    assert set(tools["remember_memory"].args) == {"content", "replaces"}
    assert set(tools["search_thread_messages"].args) == {"query", "limit", "since", "until"}
    # `read_thread_messages` takes the thread to read; never whose or which run.
    assert set(tools["read_thread_messages"].args) == {
        "thread_id",
        "message_id",
        "limit",
        "include_tools",
    }
    assert not set().union(*(tool.args for tool in tools.values())) & set(CONTEXT_FIELDS) - {
        "thread_id"
    }


@pytest.mark.django_db
@pytest.mark.parametrize("field", ["thread_id", "run_id", "request_id", "worker_id", "uid"])
@pytest.mark.parametrize("forge", ["empty", "other"])
def test_every_tool_refuses_a_context_field_that_is_empty_or_does_not_match(run, field, forge):
    write_agents_file(run.user_id, "MEMORY.md", b"Old fact.\n")
    thread = ConversationFactory(user=run.user)
    MessageFactory(conversation=thread, content="findable words")
    # "other": a well-formed value of something real (another memory user, run or thread).
    other_run = memory_run()
    value = "" if forge == "empty" else getattr(context_for(other_run), field)
    forged = context_for(run, **{field: value})
    # The graph for a context naming no running run of that user registers no tool at all.
    assert tools_by_name(forged) == {}
    # Tools bound to it anyway (a team's own wiring) refuse at call time.
    tools = {tool.name: tool for tool in build_memory_tools(forged)}
    assert call(tools["remember_memory"], {"content": "New fact."})["status"] == "denied"
    assert call(tools["search_thread_messages"], {"query": "findable"})["status"] == "denied"
    read = call(tools["read_thread_messages"], {"thread_id": thread.thread_id})
    assert read["status"] == "denied"
    assert memory_path(run.user_id).read_bytes() == b"Old fact.\n"
    assert not memory_path(other_run.user_id).exists()


@pytest.mark.django_db
@pytest.mark.parametrize("uid", ["", "not-a-number", "-1"])
def test_a_graph_for_a_uid_naming_no_user_builds_without_memory(run, uid):
    write_agents_file(run.user_id, "MEMORY.md", b"Likes green tea.\n")
    graph = build_chatbot_graph(context_for(run, uid=uid))
    assert graph.tools == []
    assert "Likes green tea." not in graph.system_prompt
