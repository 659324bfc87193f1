"""`manage.py memory` and `manage.py erase_user` as an operator uses them."""

import hashlib
import json
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from memory_app.models import MemoryEvent, UserConfig
from memory_app.services import write_memory_file
from tests.factories import ConversationFactory, StaffUserFactory, UserFactory

pytestmark = pytest.mark.django_db(transaction=True)


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_on_show_clear_off_as_the_user_themself():
    user = UserFactory(username="carol")
    assert run("memory", "--user", "carol", "on") == "memory on\n"
    empty = "sha256:" + hashlib.sha256(b"").hexdigest()
    write_memory_file(user=user, text="I drink oolong tea\n", if_match=empty, actor=user)
    shown = run("memory", "--user", "carol", "show")
    assert "memory on" in shown and "I drink oolong tea" in shown
    assert run("memory", "--user", "carol", "clear") == "memory cleared\n"
    assert "oolong" not in run("memory", "--user", "carol", "show")
    assert run("memory", "--user", "carol", "off") == "memory off\n"
    assert not UserConfig.objects.get(user=user).enable_memory
    assert set(MemoryEvent.objects.values_list("actor_id", flat=True)) == {user.pk}


def test_actor_must_be_staff_and_is_recorded():
    UserFactory(username="carol")
    UserFactory(username="mallory")
    staff = StaffUserFactory(username="root")
    with pytest.raises(CommandError, match="not staff"):
        run("memory", "--user", "carol", "--actor", "mallory", "on")
    run("memory", "--user", "carol", "--actor", "root", "on")
    assert MemoryEvent.objects.get().actor_id == staff.pk


def test_export_writes_the_json_document(tmp_path):
    user = UserFactory(username="carol")
    ConversationFactory(user=user, status="deleted")
    target = tmp_path / "carol.json"
    run("memory", "--user", "carol", "export", "--output", str(target))
    document = json.loads(target.read_text())
    assert [t["status"] for t in document["threads"]] == ["deleted"]


def test_erase_user_needs_yes_then_erases_and_is_idempotent():
    user = UserFactory(username="carol")
    ConversationFactory(user=user)
    with pytest.raises(CommandError, match="--yes"):
        run("erase_user", "--user", "carol")
    assert "threads 1" in run("erase_user", "--user", "carol", "--yes")
    assert not get_user_model().objects.filter(username="carol").exists()
    assert not (Path(settings.WORKSPACE_ROOT) / str(user.pk)).exists()
    assert "nothing to erase" in run("erase_user", "--user", "carol", "--yes")


def test_approval_on_and_off_set_the_flag_and_the_ledger():
    user = UserFactory()
    assert run("memory", "--user", user.username, "approval-on") == "memory write approval on\n"
    assert UserConfig.objects.get(user=user).memory_write_approval is True
    assert run("memory", "--user", user.username, "approval-off") == "memory write approval off\n"
    assert UserConfig.objects.get(user=user).memory_write_approval is False
    kinds = list(MemoryEvent.objects.filter(user=user).values_list("kind", "actor"))
    assert kinds == [("approval_on", user.pk), ("approval_off", user.pk)]
