"""The apps in a team's real project (this package's settings): an email-login user model
without username, names or is_active, listed after the apps, with its own ModelAdmin; the
team's own NinjaAPI at /api/ under the namespace `api`; bearer tokens for the memory API.
Run by `tests/memory_app/test_team_host.py` in a pytest of its own (`--ds settings`)."""

import io
import json
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib import admin
from django.contrib.auth.admin import GroupAdmin
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.urls import reverse

from accounts.admin import EmailUserAdmin
from accounts.models import ApiToken, EmailUser
from conversations.models import AgentRun, Conversation, ErasureFence, Message, ToolCall
from memory_app.models import MemoryEvent, UserConfig
from memory_app.runtime import ChatError, chat
from memory_app.services import erase_user, set_memory_enabled
from memory_app.views import page_languages

pytestmark = pytest.mark.django_db(transaction=True)

APPS_MODELS = (Conversation, Message, ToolCall, AgentRun, UserConfig, MemoryEvent)


@pytest.fixture(autouse=True)
def _workspace(settings, tmp_path):
    settings.WORKSPACE_ROOT = tmp_path / "workspaces"


@pytest.fixture
def ada() -> EmailUser:
    user = EmailUser.objects.create_user("ada@example.com", password="ada-pass")
    set_memory_enabled(user=user, enabled=True, actor=user)
    return user


@pytest.fixture
def staff(client) -> EmailUser:
    user = EmailUser.objects.create_superuser("staff@example.com", password="staff-pass")
    client.force_login(user)
    return user


def _memory(user) -> str:
    path = Path(settings.WORKSPACE_ROOT) / str(user.pk) / "agents" / "MEMORY.md"
    return path.read_text() if path.exists() else ""


def test_check_is_clean():
    out = io.StringIO()
    call_command("check", "--fail-level", "WARNING", stdout=out, stderr=out)
    assert "no issues" in out.getvalue()


def test_the_team_keeps_its_own_user_and_group_admins():
    assert type(admin.site._registry[EmailUser]) is EmailUserAdmin
    assert type(admin.site._registry[Group]) is GroupAdmin


def test_every_admin_page_of_the_apps_renders_searched_and_ordered(client, staff, ada):
    chat(user_id=ada.pk, message="remember that I drink oolong tea")
    for model in APPS_MODELS:
        url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
        for query in ("", "?q=ada%40example.com", "?o=1", f"?user={ada.pk}"):
            response = client.get(url + query)
            assert response.status_code == 200, (url + query, response.status_code)
        row = model.objects.order_by("pk").first()
        change = reverse(
            f"admin:{model._meta.app_label}_{model._meta.model_name}_change", args=[row.pk]
        )
        assert client.get(change).status_code == 200, change


def test_a_users_staff_page_by_id_and_by_email(client, staff, ada):
    chat(user_id=ada.pk, message="remember that I drink oolong tea")
    page = client.get(reverse("admin:yuxi_user", args=[ada.pk]))
    assert page.status_code == 200
    html = page.content.decode()
    assert "ada@example.com" in html and "I drink oolong tea" in html
    found = client.get(reverse("admin:yuxi_user_find") + "?name=ada%40example.com")
    assert found.status_code == 302 and found["Location"] == reverse(
        "admin:yuxi_user", args=[ada.pk]
    )


def test_the_erase_page_erases_through_erase_user(client, staff, ada):
    chat(user_id=ada.pk, message="remember that I drink oolong tea")
    url = reverse("admin:yuxi_user_erase", args=[ada.pk])
    assert "threads: 1" in client.get(url).content.decode()
    assert client.post(url).status_code == 302
    assert not EmailUser.objects.filter(pk=ada.pk).exists()
    assert not (Path(settings.WORKSPACE_ROOT) / str(ada.pk)).exists()


def test_deleting_the_user_in_the_teams_own_admin_removes_the_workspace(client, staff, ada):
    chat(user_id=ada.pk, message="remember that I drink oolong tea")
    assert "oolong" in _memory(ada)
    url = reverse("admin:accounts_emailuser_delete", args=[ada.pk])
    assert client.post(url, {"post": "yes"}).status_code == 302
    assert not EmailUser.objects.filter(pk=ada.pk).exists()
    assert not (Path(settings.WORKSPACE_ROOT) / str(ada.pk)).exists()


def test_erasure_fences_a_user_model_without_is_active(ada, monkeypatch):
    from memory_app import user_data

    def broken(user_id):
        raise RuntimeError("deletion failed")

    monkeypatch.setattr(user_data, "_delete_everything", broken)
    with pytest.raises(RuntimeError):
        erase_user(user=ada, actor=ada)
    assert ErasureFence.objects.filter(user=ada).exists()
    with pytest.raises(ChatError):
        chat(user_id=ada.pk, message="remember that I drink oolong tea")


def test_a_user_without_is_active_counts_as_active(ada):
    turn = chat(user_id=ada.pk, message="remember that I drink oolong tea")
    assert turn.tool_calls == [{"name": "remember_memory", "status": "success"}]
    assert "I drink oolong tea" in _memory(ada)


def test_the_export_names_the_user_by_email(client, ada):
    client.force_login(ada)
    response = client.get("/memory/api/export/")
    assert response.status_code == 200
    document = json.loads(b"".join(response.streaming_content))
    assert document["user"]["username"] == "ada@example.com"
    assert document["user"]["username_field"] == "email"
    assert "first_name" not in document["user"]


def test_a_chat_over_the_teams_bearer_token(client, ada):
    ApiToken.objects.create(key="tok-ada", user=ada)
    response = client.post(
        "/memory/api/chat/",
        {"message": "remember that my cat is called Miso"},
        content_type="application/json",
        HTTP_AUTHORIZATION="Bearer tok-ada",
    )
    assert response.status_code == 200, response.content
    assert "my cat is called Miso" in _memory(ada)
    wrong = client.get("/memory/api/memory/", HTTP_AUTHORIZATION="Bearer nope")
    assert wrong.status_code == 401


def test_the_teams_api_keeps_its_routes_names_and_answers(client, ada):
    assert reverse("api:ping") == "/api/ping"
    assert client.get("/api/ping").json() == {"pong": True}
    form = client.post("/api/echo", "a=1", content_type="application/x-www-form-urlencoded")
    assert form.status_code == 200 and form.json()["body"] == "a=1"
    # The memory API's documents are for logged-in users only.
    assert client.get("/memory/api/openapi.json").status_code == 302
    client.force_login(ada)
    paths = client.get("/memory/api/openapi.json").json()["paths"]
    assert paths and all(path.startswith("/memory/api/") for path in paths)
    refused = client.post("/memory/api/chat/", "a=1", content_type="text/plain")
    assert refused.status_code == 415


def test_the_page_renders_in_the_guides_minimal_host(client, ada):
    client.force_login(ada)
    response = client.get("/memory/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "ada@example.com" in html
    # no set_language route here: no language switch, and no logout route: no logout button
    assert 'class="lang"' not in html and 'class="logout"' not in html


def test_the_page_offers_only_the_languages_it_speaks(client, ada, settings):
    """A host that never set LANGUAGES has Django's hundred; the page speaks two."""
    assert len(settings.LANGUAGES) > 50
    assert [language["code"] for language in page_languages()] == ["en", "zh-hans"]


def test_the_commands_take_the_email(ada):
    out = io.StringIO()
    call_command("memory", "--user", "ada@example.com", "show", stdout=out)
    assert "memory on" in out.getvalue()
    call_command("erase_user", "--user", "ada@example.com", "--yes", stdout=out)
    assert not EmailUser.objects.filter(pk=ada.pk).exists()
