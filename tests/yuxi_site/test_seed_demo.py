import io
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from conversations.models import AgentRun, Conversation, Message, ToolCall
from memory_app.models import UserConfig
from memory_app.runtime import chat
from memory_app.selectors import read_memory_for_prompt
from memory_app.workspace import Workspace
from memory_app.workspace.paths import AGENTS_RELPATH, MEMORY_RELPATH, USER_RELPATH

pytestmark = pytest.mark.django_db


def test_seed_demo_covers_every_kind_of_record_and_is_idempotent():
    call_command("seed_demo")
    call_command("seed_demo")
    assert set(Conversation.objects.values_list("status", flat=True)) == set(
        Conversation.Status.values
    )
    assert set(Conversation.objects.values_list("source", flat=True)) == set(
        Conversation.Source.values
    )
    assert Conversation.objects.filter(parent__isnull=False).count() == 1
    assert set(Message.objects.values_list("role", flat=True)) == set(Message.Role.values)
    assert set(Message.objects.values_list("message_type", flat=True)) == set(Message.Type.values)
    assert ToolCall.objects.count() == 1
    assert AgentRun.objects.filter(parent_run__isnull=False).count() == 1
    assert set(UserConfig.objects.values_list("enable_memory", flat=True)) == {True, False}
    staff = get_user_model().objects.get(username="admin")
    assert staff.is_staff and staff.check_password("yuxi-admin")


@pytest.mark.django_db(transaction=True)
def test_seed_demo_gives_each_demo_user_the_three_workspace_files():
    call_command("seed_demo")
    User = get_user_model()
    for username in ("alice", "bob"):
        workspace = Workspace.for_user(User.objects.get(username=username).pk)
        for relpath in (AGENTS_RELPATH, USER_RELPATH, MEMORY_RELPATH):
            data, truncated = workspace.read_bounded(relpath, 4096)
            assert data.decode("utf-8").strip() and not truncated
    alice_memory = read_memory_for_prompt(User.objects.get(username="alice").pk)
    assert "对花生过敏 🥜" in alice_memory.text
    assert "花生" not in read_memory_for_prompt(User.objects.get(username="bob").pk).text


def test_seed_demo_twice_keeps_a_changed_admin_password_and_flags():
    call_command("seed_demo")
    User = get_user_model()
    admin = User.objects.get(username="admin")
    admin.set_password("a-new-admin-password")
    admin.is_superuser = False
    admin.save()
    alice = User.objects.get(username="alice")
    alice.set_password("alices-own-password")
    alice.is_active = False
    alice.save()
    UserConfig.objects.filter(user=alice).update(enable_memory=False)

    call_command("seed_demo")
    call_command("seed_demo")

    admin.refresh_from_db()
    alice.refresh_from_db()
    assert admin.check_password("a-new-admin-password")
    assert not admin.check_password("yuxi-admin")
    assert (admin.is_staff, admin.is_superuser) == (True, False)
    assert alice.check_password("alices-own-password")
    assert not alice.is_active
    assert UserConfig.objects.get(user=alice).enable_memory is False
    assert User.objects.filter(username__in=["admin", "alice", "bob"]).count() == 3


def test_seed_demo_creates_only_the_missing_demo_user():
    User = get_user_model()
    User.objects.create_user("bob", password="bobs-own-password")
    call_command("seed_demo")
    bob = User.objects.get(username="bob")
    assert bob.check_password("bobs-own-password")
    assert not UserConfig.objects.filter(user=bob).exists()
    assert not Conversation.objects.filter(user=bob).exists()
    assert Conversation.objects.filter(thread_id="demo-alice-chat").exists()
    assert User.objects.get(username="admin").check_password("yuxi-admin")


@pytest.mark.django_db(transaction=True)
def test_seed_demo_admin_remembers_the_readme_example_and_demo_passwords_work(settings):
    """The README's first example, as admin, remembers; alice and bob log in as documented."""
    call_command("seed_demo")
    User = get_user_model()
    admin = User.objects.get(username="admin")
    turn = chat(user_id=admin.pk, message="remember that I drink oolong tea")
    assert turn.tool_calls == [{"name": "remember_memory", "status": "success"}]
    data, _ = Workspace.for_user(admin.pk).read_bounded(MEMORY_RELPATH, 4096)
    assert b"oolong" in data
    for username, password in (("alice", "alice-demo"), ("bob", "bob-demo")):
        assert User.objects.get(username=username).check_password(password)


def test_reset_is_refused_without_debug(settings):
    settings.DEBUG = False
    call_command("seed_demo")
    before = set(get_user_model().objects.values_list("pk", flat=True))
    with pytest.raises(CommandError, match="only with DEBUG on"):
        call_command("seed_demo", "--reset")
    assert set(get_user_model().objects.values_list("pk", flat=True)) == before


@pytest.mark.django_db(transaction=True)
def test_reset_erases_the_demo_users_and_seeds_them_afresh(settings):
    settings.DEBUG = True
    call_command("seed_demo")
    User = get_user_model()
    alice = User.objects.get(username="alice")
    chat(user_id=alice.pk, message="remember that I drink oolong tea")
    alice.set_password("changed")
    alice.save()
    workspace = Path(settings.WORKSPACE_ROOT) / str(alice.pk)
    assert workspace.exists()
    other = UserConfig.objects.create(user=User.objects.create_user("carol")).user
    out = io.StringIO()
    call_command("seed_demo", "--reset", stdout=out)
    assert "Demo users erased: admin, alice, bob." in out.getvalue()
    fresh = User.objects.get(username="alice")
    assert fresh.pk != alice.pk and fresh.check_password("alice-demo")
    assert not Conversation.objects.filter(user_id=alice.pk).exists()
    assert not workspace.exists()
    assert User.objects.filter(pk=other.pk).exists()  # not a demo user: untouched
    assert "oolong" not in read_memory_for_prompt(fresh.pk).text
