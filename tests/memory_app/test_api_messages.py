"""GET /api/threads/<id>/messages/ and GET /api/approvals/: what a client needs to show a past
conversation and the memory writes waiting for the user, and nothing of anyone else's."""

import json
from datetime import timedelta

import pytest
from django.core import signing
from django.test import Client
from django.utils import timezone

from conversations.models import Conversation, Message, ToolCall
from conversations.selectors.pages import list_thread_messages
from memory_app.runtime import chat
from memory_app.services import set_memory_write_approval
from tests.factories import (
    ConversationFactory,
    MessageFactory,
    ToolCallFactory,
    UserConfigFactory,
    UserFactory,
)

T0 = timezone.now() - timedelta(days=1)


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def message(thread, n: int, **fields) -> Message:
    """The thread's n-th message, n seconds after T0 (explicit times: the order is the test's)."""
    fields.setdefault("role", Message.Role.USER if n % 2 else Message.Role.ASSISTANT)
    return MessageFactory(
        conversation=thread, content=f"m{n}", created_at=T0 + timedelta(seconds=n), **fields
    )


def messages_of(client: Client, thread_id: str, **params) -> dict:
    response = client.get(f"/api/threads/{thread_id}/messages/", params)
    assert response.status_code == 200, response.content
    return response.json()


@pytest.mark.django_db
class TestThreadMessages:
    def test_a_page_is_the_newest_messages_oldest_first_and_pages_back_to_the_start(self):
        thread = ConversationFactory()
        for n in range(1, 8):
            message(thread, n)
        client = client_for(thread.user)
        first = messages_of(client, thread.thread_id, limit=3)
        assert [m["content"] for m in first["messages"]] == ["m5", "m6", "m7"]
        second = messages_of(client, thread.thread_id, limit=3, cursor=first["next_cursor"])
        assert [m["content"] for m in second["messages"]] == ["m2", "m3", "m4"]
        last = messages_of(client, thread.thread_id, limit=3, cursor=second["next_cursor"])
        assert [m["content"] for m in last["messages"]] == ["m1"]
        assert last["next_cursor"] is None

    def test_order_is_by_time_then_id_even_when_ids_do_not_follow_time(self):
        thread = ConversationFactory()
        late = message(thread, 9)
        early = message(thread, 1)
        same_time = MessageFactory(conversation=thread, content="m1b", created_at=early.created_at)
        body = messages_of(client_for(thread.user), thread.thread_id, limit=2)
        assert [m["id"] for m in body["messages"]] == [same_time.pk, late.pk]
        rest = messages_of(client_for(thread.user), thread.thread_id, cursor=body["next_cursor"])
        assert [m["id"] for m in rest["messages"]] == [early.pk]

    def test_only_user_and_assistant_text_is_listed_with_the_turns_tool_calls(self):
        thread = ConversationFactory()
        message(thread, 1, role=Message.Role.USER)
        only_calls = message(
            thread, 2, role=Message.Role.ASSISTANT, message_type=Message.Type.TOOL_CALL
        )
        ToolCallFactory(message=only_calls, name="search_thread_messages")
        message(thread, 3, role=Message.Role.TOOL, message_type=Message.Type.TOOL_RESULT)
        reply = message(thread, 4, role=Message.Role.ASSISTANT)
        ToolCallFactory(message=reply, name="remember_memory", status=ToolCall.Status.ERROR)
        message(thread, 5, role=Message.Role.SYSTEM)
        message(thread, 6, role=Message.Role.USER)
        message(thread, 7, role=Message.Role.ASSISTANT)
        body = messages_of(client_for(thread.user), thread.thread_id)
        assert [(m["role"], m["content"], m["tool_calls"]) for m in body["messages"]] == [
            ("user", "m1", []),
            (
                "assistant",
                "m4",
                [
                    {"name": "search_thread_messages", "status": "success"},
                    {"name": "remember_memory", "status": "error"},
                ],
            ),
            ("user", "m6", []),
            ("assistant", "m7", []),
        ]
        assert set(body["messages"][0]) == {"id", "role", "content", "created_at", "tool_calls"}

    def test_a_reply_first_on_its_page_still_gets_the_calls_stored_just_before_it(self):
        thread = ConversationFactory()
        message(thread, 1, role=Message.Role.USER)
        calls = message(thread, 2, role=Message.Role.ASSISTANT, message_type=Message.Type.TOOL_CALL)
        ToolCallFactory(message=calls)
        message(thread, 3, role=Message.Role.ASSISTANT)
        message(thread, 4, role=Message.Role.USER)
        client = client_for(thread.user)
        newest = messages_of(client, thread.thread_id, limit=1)
        older = messages_of(client, thread.thread_id, limit=1, cursor=newest["next_cursor"])
        assert older["messages"][0]["content"] == "m3"
        assert older["messages"][0]["tool_calls"] == [
            {"name": "remember_memory", "status": "success"}
        ]
        oldest = messages_of(client, thread.thread_id, limit=1, cursor=older["next_cursor"])
        assert [m["content"] for m in oldest["messages"]] == ["m1"]
        assert oldest["next_cursor"] is None

    def test_archived_and_deleted_threads_of_the_list_can_be_read(self):
        user = UserFactory()
        for status in (Conversation.Status.ARCHIVED, Conversation.Status.DELETED):
            thread = ConversationFactory(user=user, status=status)
            message(thread, 1)
            assert messages_of(client_for(user), thread.thread_id)["messages"][0]["content"] == "m1"

    @pytest.mark.parametrize("whose", ["another user's", "unknown", "sub-agent's", "agent traffic"])
    def test_a_thread_the_user_may_not_list_is_404(self, whose):
        user = UserFactory()
        own = ConversationFactory(user=user)
        message(own, 1)
        thread_id = {
            "another user's": lambda: ConversationFactory(),
            "unknown": lambda: None,
            "sub-agent's": lambda: ConversationFactory(user=user, parent=own),
            "agent traffic": lambda: ConversationFactory(
                user=user, source=Conversation.Source.AGENT_CALL
            ),
        }[whose]()
        if thread_id is not None:
            message(thread_id, 1)
            thread_id = thread_id.thread_id
        response = client_for(user).get(f"/api/threads/{thread_id or 'thread-nope'}/messages/")
        assert response.status_code == 404
        assert response.json() == {"error": "no such thread"}

    def test_a_forged_altered_or_foreign_cursor_is_400(self):
        user = UserFactory()
        thread, other = ConversationFactory(user=user), ConversationFactory(user=user)
        for n in range(1, 4):
            message(thread, n)
            message(other, n)
        client = client_for(user)
        real = messages_of(client, thread.thread_id, limit=1)["next_cursor"]
        other_cursor = messages_of(client, other.thread_id, limit=1)["next_cursor"]
        stranger = ConversationFactory()
        forged = signing.dumps(
            [user.pk, thread.thread_id, T0.isoformat(), 10**9],
            salt="conversations.selectors.thread-cursor",
        )
        for cursor in ("garbage", real[:-2] + "xx", other_cursor, forged):
            response = client.get(f"/api/threads/{thread.thread_id}/messages/", {"cursor": cursor})
            assert response.status_code == 400, cursor
            assert response.json() == {"error": "cursor is not one this list returned"}
        message(stranger, 1)
        response = client_for(stranger.user).get(
            f"/api/threads/{thread.thread_id}/messages/", {"cursor": real}
        )
        assert response.status_code == 404

    @pytest.mark.parametrize("limit", [0, 101, "x"])
    def test_limit_outside_1_to_100_is_400(self, limit):
        thread = ConversationFactory()
        message(thread, 1)
        response = client_for(thread.user).get(
            f"/api/threads/{thread.thread_id}/messages/", {"limit": limit}
        )
        assert response.status_code == 400

    def test_default_page_is_50_and_costs_two_queries_however_deep(self, django_assert_num_queries):
        thread = ConversationFactory()
        for n in range(1, 61):
            message(thread, n)
        client = client_for(thread.user)
        body = messages_of(client, thread.thread_id)
        assert len(body["messages"]) == 50
        with django_assert_num_queries(2):
            page = list_thread_messages(
                user_id=thread.user_id, conversation=thread, cursor=body["next_cursor"]
            )
        assert [m.content for m in page.messages] == [f"m{n}" for n in range(1, 11)]


@pytest.mark.django_db(transaction=True)
def test_approvals_lists_the_users_pending_writes_across_threads_and_no_one_elses():
    user, other = UserConfigFactory().user, UserConfigFactory().user
    for someone in (user, other):
        set_memory_write_approval(user=someone, enabled=True, actor=someone)
    first = chat(user_id=user.pk, message="remember that I drink oolong tea")
    second = chat(user_id=user.pk, message="remember that my cat is Mochi")
    chat(user_id=other.pk, message="remember that I live in Hangzhou")
    chat(user_id=user.pk, message="hello")  # a thread with nothing pending
    body = client_for(user).get("/api/approvals/").json()
    assert [
        (a["thread_id"], a["run_id"], a["tool_call_id"], a["content"], a["replaces"])
        for a in body["approvals"]
    ] == [
        (turn.thread_id, turn.run_id, turn.approval["tool_call_id"], content, None)
        for turn, content in ((first, "I drink oolong tea"), (second, "my cat is Mochi"))
    ]
    assert all(a["created_at"] for a in body["approvals"])
    decided = chat(user_id=user.pk, thread_id=first.thread_id, resume={"decision": "reject"})
    assert decided.status == "succeeded"
    remaining = client_for(user).get("/api/approvals/").json()["approvals"]
    assert [a["thread_id"] for a in remaining] == [second.thread_id]


@pytest.mark.django_db
def test_both_reads_need_a_login():
    thread = ConversationFactory()
    for path in (f"/api/threads/{thread.thread_id}/messages/", "/api/approvals/"):
        response = Client().get(path)
        assert response.status_code == 401
        assert json.loads(response.content) == {"error": "authentication required"}
