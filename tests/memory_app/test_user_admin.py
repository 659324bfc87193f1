"""A superuser deletes a user with history in the admin: counts on the page, then erasure."""

from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.test import Client

from conversations.models import Conversation, Message
from tests.factories import (
    ConversationFactory,
    MessageFactory,
    RunningAgentRunFactory,
    ToolCallFactory,
    UserFactory,
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


def _log(**filters) -> list[tuple[int, str]]:
    return list(
        LogEntry.objects.filter(**filters)
        .order_by("id")
        .values_list("action_flag", "change_message")
    )


def _user_log(user) -> list[int]:
    user_type = ContentType.objects.get_for_model(get_user_model())
    return [flag for flag, _ in _log(content_type=user_type, object_id=str(user.pk))]


def test_every_change_a_superuser_makes_to_a_user_is_in_the_admin_log_on_the_users_page(
    staff_client,
):
    response = staff_client.post(
        "/admin/auth/user/add/",
        {"username": "newcomer", "password1": "A-long-pass-123", "password2": "A-long-pass-123"},
    )
    assert response.status_code == 302
    user = get_user_model().objects.get(username="newcomer")
    form = {
        "username": "newcomer",
        "first_name": "New",
        "last_name": "",
        "email": "new@example.com",
        "is_active": "on",
        "date_joined_0": "2026-12-01",
        "date_joined_1": "00:00:00",
        "initial-date_joined_0": "2026-12-01",
        "initial-date_joined_1": "00:00:00",
    }
    assert staff_client.post(f"/admin/auth/user/{user.pk}/change/", form).status_code == 302
    password_url = f"/admin/auth/user/{user.pk}/password/"
    response = staff_client.post(
        password_url, {"password1": "Another-pass-456", "password2": "Another-pass-456"}
    )
    assert response.status_code == 302
    assert _user_log(user) == [ADDITION, CHANGE, CHANGE]
    page = staff_client.get(f"/admin/auth/user/{user.pk}/change/").content.decode()
    log = page[page.index("Changes by staff") :]
    assert log.index("changed: Changed password.") < log.index("changed: Changed First name")
    assert "added: Added." in log


def test_erasing_a_user_in_the_admin_leaves_its_entry_in_the_admin_log(staff_client):
    user = user_with_history(2)
    staff_client.post(f"/admin/auth/user/{user.pk}/delete/", {"post": "yes"})
    assert gone(user)
    assert _user_log(user) == [DELETION]


def test_group_changes_are_in_the_admin_log(staff_client):
    assert staff_client.post("/admin/auth/group/add/", {"name": "auditors"}).status_code == 302
    group = Group.objects.get(name="auditors")
    url = f"/admin/auth/group/{group.pk}/change/"
    assert staff_client.post(url, {"name": "auditors-2"}).status_code == 302
    group_type = ContentType.objects.get_for_model(Group)
    assert [flag for flag, _ in _log(content_type=group_type)] == [ADDITION, CHANGE]


@pytest.fixture
def powerful_staff_client(client):
    """Staff, not a superuser, granted every auth permission: still only views users and
    groups."""
    staff = UserFactory(is_staff=True)
    staff.user_permissions.set(Permission.objects.filter(content_type__app_label="auth"))
    client.force_login(staff)
    return client


def test_staff_who_are_not_superusers_cannot_add_change_or_erase_users_or_groups(
    powerful_staff_client,
):
    user = user_with_history(1)
    group = Group.objects.create(name="ops")
    client = powerful_staff_client
    assert client.get(f"/admin/auth/user/{user.pk}/change/").status_code == 200  # may view
    for url in (
        "/admin/auth/user/add/",
        f"/admin/auth/user/{user.pk}/delete/",
        f"/admin/auth/user/{user.pk}/password/",
        "/admin/auth/group/add/",
        f"/admin/auth/group/{group.pk}/delete/",
    ):
        assert client.post(url, {"post": "yes", "name": "x"}).status_code == 403, url
    client.post(f"/admin/auth/user/{user.pk}/change/", {"username": "renamed"})
    client.post(f"/admin/auth/group/{group.pk}/change/", {"name": "renamed"})
    form = {"action": "delete_selected", "_selected_action": [user.pk], "post": "yes"}
    client.post("/admin/auth/user/", form)
    user.refresh_from_db()
    group.refresh_from_db()
    assert user.username != "renamed" and group.name == "ops"
    assert not gone(user)
    assert not LogEntry.objects.exists()
