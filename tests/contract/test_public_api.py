"""The public modules and their signatures, imported through their documented paths."""

import inspect

import pytest

from conversations.repository import read_thread_messages, search_thread_messages
from memory_app.context import build_agent_input_context
from memory_app.runtime import build_chatbot_graph, build_subagent_graph
from memory_app.services import remember_memory
from memory_app.workspace import Workspace
from yuxi_site.utils.string_utils import truncate_utf8


def test_truncate_utf8_keeps_the_longest_whole_code_point_prefix_and_says_if_it_cut():
    assert truncate_utf8("aé字", 6) == ("aé字", False)
    assert truncate_utf8("aé字", 5) == ("aé", True)
    assert truncate_utf8("aé字", 2) == ("a", True)
    assert truncate_utf8("😀", 3) == ("", True)
    assert truncate_utf8("", 0) == ("", False)
    assert truncate_utf8("x", 0) == ("", True)


def test_truncate_utf8_refuses_a_negative_budget_with_value_error():
    with pytest.raises(ValueError):
        truncate_utf8("text", -1)


def test_repository_functions_have_the_spec_signatures():
    search = inspect.signature(search_thread_messages).parameters
    assert list(search) == ["uid", "query", "limit", "since", "until"]
    assert all(
        search[name].kind is inspect.Parameter.KEYWORD_ONLY for name in ("limit", "since", "until")
    )
    defaults = {name: search[name].default for name in ("limit", "since", "until")}
    assert defaults == {"limit": 5, "since": None, "until": None}
    read = inspect.signature(read_thread_messages).parameters
    assert list(read) == ["uid", "thread_id", "message_id", "limit", "include_tools"]
    defaults = {name: read[name].default for name in ("message_id", "limit", "include_tools")}
    assert defaults == {"message_id": None, "limit": 20, "include_tools": False}
    assert all(
        read[name].kind is inspect.Parameter.KEYWORD_ONLY
        for name in ("message_id", "limit", "include_tools")
    )


def test_remember_memory_takes_ctx_content_and_an_optional_replaces():
    params = inspect.signature(remember_memory).parameters
    assert list(params) == ["ctx", "content", "replaces"]
    assert params["replaces"].default is None


def test_workspace_exposes_for_user_read_bounded_and_replace_authorized_file():
    assert list(inspect.signature(Workspace.for_user).parameters) == ["uid"]
    assert list(inspect.signature(Workspace.read_bounded).parameters) == [
        "self",
        "relpath",
        "max_bytes",
    ]
    assert list(inspect.signature(Workspace.replace_authorized_file).parameters) == [
        "self",
        "relpath",
        "data",
    ]


def test_graph_builders_take_the_context_and_keyword_only_model_and_tools():
    chatbot = inspect.signature(build_chatbot_graph).parameters
    assert list(chatbot) == ["ctx", "model", "extra_tools", "checkpointer"]
    assert (chatbot["model"].default, tuple(chatbot["extra_tools"].default)) == (None, ())
    assert chatbot["checkpointer"].default is None
    subagent = inspect.signature(build_subagent_graph).parameters
    assert list(subagent) == ["ctx", "model"]
    assert all(
        p.kind is inspect.Parameter.KEYWORD_ONLY
        for p in [*list(chatbot.values())[1:], *list(subagent.values())[1:]]
    )
    assert list(inspect.signature(build_agent_input_context).parameters) == ["uid"]
