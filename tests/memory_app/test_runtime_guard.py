"""`RunGuard`'s tool-call ids: unique within a turn (a resumed turn included), so every stored
row holds its own call's name, arguments, status and output."""

import json

import pytest

from conversations.models import ToolCall
from memory_app.runtime import chat
from tests.factories import UserConfigFactory
from tests.memory_app.models import RecordingModel, tool_reply

pytestmark = pytest.mark.django_db(transaction=True)


def rows_by_name() -> dict[str, list[ToolCall]]:
    rows: dict[str, list[ToolCall]] = {}
    for row in ToolCall.objects.order_by("created_at", "id"):
        rows.setdefault(row.name, []).append(row)
    return rows


def assert_each_row_holds_its_own_call(agents_file, user) -> None:
    rows = rows_by_name()
    [search] = rows["search_thread_messages"]
    [remember] = rows["remember_memory"]
    assert search.input == {"query": "tea"} and search.status == "success"
    assert "results" in json.loads(search.output)
    assert remember.input == {"content": "I like tea"} and remember.status == "success"
    assert json.loads(remember.output)["status"] == "added"
    assert agents_file(user.pk, "MEMORY.md").read_bytes() == b"I like tea\n"
    ids = list(ToolCall.objects.values_list("tool_call_id", flat=True))
    assert len(ids) == len(set(ids)), ids


def test_two_calls_of_one_reply_sharing_an_id_are_stored_apart(agents_file):
    user = UserConfigFactory(enable_memory=True).user
    model = RecordingModel(
        replies=[
            tool_reply(
                ("call_0", "search_thread_messages", {"query": "tea"}),
                ("call_0", "remember_memory", {"content": "I like tea"}),
            )
        ]
    )
    chat(user_id=user.pk, message="remember that I like tea", model=model)
    assert_each_row_holds_its_own_call(agents_file, user)
    # The model saw one result per call, each under the id it was given.
    results = [m for m in model.calls[1]["messages"] if m.type == "tool"]
    assert len({r.tool_call_id for r in results}) == 2


def test_a_model_numbering_ids_per_reply_does_not_mix_calls_of_two_steps(agents_file):
    user = UserConfigFactory(enable_memory=True).user
    model = RecordingModel(
        replies=[
            tool_reply(("call_0", "search_thread_messages", {"query": "tea"})),
            tool_reply(("call_0", "remember_memory", {"content": "I like tea"})),
        ]
    )
    chat(user_id=user.pk, message="remember that I like tea", model=model)
    assert_each_row_holds_its_own_call(agents_file, user)


def test_an_id_seen_before_the_interrupt_is_fresh_after_the_resume(agents_file):
    user = UserConfigFactory(enable_memory=True, memory_write_approval=True).user
    model = RecordingModel(
        replies=[
            tool_reply(("call_0", "search_thread_messages", {"query": "tea"})),
            tool_reply(("call_0", "remember_memory", {"content": "I like tea"})),
        ]
    )
    first = chat(user_id=user.pk, message="remember that I like tea", model=model)
    assert first.status == "interrupted" and first.approval["tool_call_id"] != "call_0"
    model.replies = [tool_reply(("call_0", "remember_memory", {"content": "and jasmine"}))]
    again = chat(
        user_id=user.pk, thread_id=first.thread_id, resume={"decision": "approve"}, model=model
    )
    # The reply after the resume reused an id the turn had seen: it got a fresh one.
    assert again.status == "interrupted"
    assert again.approval["tool_call_id"] not in ("call_0", first.approval["tool_call_id"])
    rows = rows_by_name()
    assert [r.input["content"] for r in rows["remember_memory"]] == ["I like tea", "and jasmine"]
    assert [r.status for r in rows["remember_memory"]] == ["success", "pending"]
    ids = list(ToolCall.objects.values_list("tool_call_id", flat=True))
    assert len(ids) == len(set(ids)), ids
    [search] = rows["search_thread_messages"]
    assert "results" in json.loads(search.output)
    assert agents_file(user.pk, "MEMORY.md").read_bytes() == b"I like tea\n"
