"""A superuser deletes a user with history in the admin: counts on the page, then erasure."""

from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client

from conversations.models import Conversation, Message
from tests.factories import (
    ConversationFactory,
    MessageFactory,
    RunningAgentRunFactory,
    ToolCallFactory,
    memory_user,
)

pytestmark = pytest.mark.django_db(transaction=True)


def user_with_history(messages: int = 30):
    user = memory_user()
    thread = ConversationFactory(user=user)
    for index in range(messages):
        MessageFactory(conversation=thread, content=f"message {index}")
    ToolCallFactory(message=MessageFactory(conversation=thread, role="assistant"))
    RunningAgentRunFactory(conversation=thread)
    agents = Path(settings.WORKSPACE_ROOT) / str(user.pk) / "agents"
    agents.mkdir(parents=True)
    (agents / "MEMORY.md").write_text("a fact\n")
    return user


def gone(user) -> bool:
    return (
        not get_user_model().objects.filter(pk=user.pk).exists()
        and not Conversation.objects.filter(user_id=user.pk).exists()
        and not Message.objects.filter(owner_id=user.pk).exists()
        and not (Path(settings.WORKSPACE_ROOT) / str(user.pk)).exists()
    )


def test_the_change_page_delete_shows_counts_not_rows_and_erases_the_user(staff_client):
    user = user_with_history()
    Client().force_login(user)
    url = f"/admin/auth/user/{user.pk}/delete/"
    page = staff_client.get(url)
    assert page.status_code == 200
    text = page.content.decode()
    assert "messages: 31" in text.lower()
    assert "sessions: 1" in text.lower()
    assert "message 7" not in text  # no row is listed
    response = staff_client.post(url, {"post": "yes"})
    assert response.status_code == 302
    assert gone(user)


def test_the_bulk_delete_action_shows_counts_and_erases_every_selected_user(staff_client):
    users = [user_with_history(3), user_with_history(4)]
    keep = user_with_history(2)
    form = {"action": "delete_selected", "_selected_action": [u.pk for u in users]}
    page = staff_client.post("/admin/auth/user/", form)
    assert page.status_code == 200
    assert "threads: 2" in page.content.decode().lower()
    response = staff_client.post("/admin/auth/user/", {**form, "post": "yes"})
    assert response.status_code == 302
    assert all(gone(user) for user in users)
    assert not gone(keep)
