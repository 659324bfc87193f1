"""`manage.py memory` and `manage.py erase_user` as an operator uses them."""

import hashlib
import json
import logging
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
    output = run("memory", "--user", "carol", "export", "--output", str(target))
    document = json.loads(target.read_text())
    assert [t["status"] for t in document["threads"]] == ["deleted"]
    size = target.stat().st_size
    assert output == f"exported 'carol' to {target} ({size} bytes)\n"


def test_an_unknown_actor_is_named_by_its_flag():
    UserFactory(username="carol")
    with pytest.raises(CommandError, match=r"^--actor: no user with username 'nosuch'$"):
        run("memory", "--user", "carol", "--actor", "nosuch", "on")
    with pytest.raises(CommandError, match=r"^--user: no user with username 'nobody'$"):
        run("memory", "--user", "nobody", "on")
    with pytest.raises(CommandError, match=r"^--actor: no user with username 'nosuch'$"):
        run("erase_user", "--user", "carol", "--actor", "nosuch", "--yes")


@pytest.mark.parametrize(("verbosity", "logged"), [("1", 0), ("2", 1)])
def test_the_answer_comes_without_info_log_lines_unless_verbose(caplog, verbosity, logged):
    UserFactory(username="carol")
    with caplog.at_level(logging.INFO):
        assert run("memory", "--user", "carol", "--verbosity", verbosity, "on") == "memory on\n"
    events = [r for r in caplog.records if r.name.startswith("yuxi") and r.levelno == logging.INFO]
    assert len(events) == logged  # the switch change's memory_changed line


def test_erase_user_needs_yes_then_erases_and_is_idempotent():
    user = UserFactory(username="carol")
    ConversationFactory(user=user)
    with pytest.raises(CommandError, match="--yes"):
        run("erase_user", "--user", "carol")
    assert "threads 1" in run("erase_user", "--user", "carol", "--yes")
    assert not get_user_model().objects.filter(username="carol").exists()
    assert not (Path(settings.WORKSPACE_ROOT) / str(user.pk)).exists()
    assert "nothing to erase" in run("erase_user", "--user", "carol", "--yes")


def test_versions_restore_and_forget_versions_from_the_terminal():
    user = UserFactory(username="carol")
    empty = "sha256:" + hashlib.sha256(b"").hexdigest()
    write_memory_file(user=user, text="I drink oolong tea\n", if_match=empty, actor=user)
    assert run("memory", "--user", "carol", "clear") == "memory cleared\n"
    sha = hashlib.sha256(b"I drink oolong tea\n").hexdigest()
    [line] = run("memory", "--user", "carol", "versions").splitlines()
    assert line.startswith(f"{sha} 19 bytes, made by user_edited, replaced ")
    assert line.endswith("by user_cleared, kept")
    restored = run("memory", "--user", "carol", "restore", sha)
    assert restored.startswith(f"restored {sha}: etag sha256:{sha}, 19 bytes")
    memory = Path(settings.WORKSPACE_ROOT) / str(user.pk) / "agents" / "MEMORY.md"
    assert memory.read_bytes() == b"I drink oolong tea\n"
    assert MemoryEvent.objects.latest("id").kind == "user_restored"
    assert run("memory", "--user", "carol", "forget-versions") == "kept versions forgotten\n"
    assert not any((memory.parent / ".memory-versions").iterdir())
    assert MemoryEvent.objects.latest("id").kind == "versions_forgotten"


def test_restore_refuses_an_unknown_version_a_missing_hash_and_a_stale_if_match():
    user = UserFactory(username="carol")
    empty = "sha256:" + hashlib.sha256(b"").hexdigest()
    write_memory_file(user=user, text="A\n", if_match=empty, actor=user)
    write_memory_file(user=user, text="B\n", if_match=f"sha256:{_sha(b'A')}", actor=user)
    with pytest.raises(CommandError, match="no such version is kept"):
        run("memory", "--user", "carol", "restore", "0" * 64)
    with pytest.raises(CommandError, match="needs the SHA-256"):
        run("memory", "--user", "carol", "restore")
    with pytest.raises(CommandError, match="go with restore only"):
        run("memory", "--user", "carol", "clear", _sha(b"A"))
    with pytest.raises(CommandError, match="stale"):
        run("memory", "--user", "carol", "--if-match", empty, "restore", _sha(b"A"))
    memory = Path(settings.WORKSPACE_ROOT) / str(user.pk) / "agents" / "MEMORY.md"
    assert memory.read_bytes() == b"B\n"
    assert run("memory", "--user", "carol", "versions").startswith(_sha(b"A"))


def _sha(line: bytes) -> str:
    return hashlib.sha256(line + b"\n").hexdigest()


def test_approval_on_and_off_set_the_flag_and_the_ledger():
    user = UserFactory()
    assert run("memory", "--user", user.username, "approval-on") == "memory write approval on\n"
    assert UserConfig.objects.get(user=user).memory_write_approval is True
    assert run("memory", "--user", user.username, "approval-off") == "memory write approval off\n"
    assert UserConfig.objects.get(user=user).memory_write_approval is False
    kinds = list(MemoryEvent.objects.filter(user=user).values_list("kind", "actor"))
    assert kinds == [("approval_on", user.pk), ("approval_off", user.pk)]


def _etag(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def test_scan_credentials_lists_lines_of_the_file_and_its_versions_never_their_text():
    user = UserFactory(username="carol")
    old = b"tea\nwifi password: Tr0ub4dor&3\n"
    write_memory_file(user=user, text=old.decode(), if_match=_etag(b""), actor=user)
    new = "tea\ncoffee\nmy p\u0430ssword is hunter2\nVisa 4111 1111 1111 1111\n"
    write_memory_file(user=user, text=new, if_match=_etag(old), actor=user)
    out = run("memory", "--user", "carol", "scan-credentials")
    assert out.splitlines() == [
        "carol: MEMORY.md line 3: password",
        "carol: MEMORY.md line 4: payment_card",
        f"carol: version {hashlib.sha256(old).hexdigest()} line 2: password",
        "3 line(s) holding a credential",
    ]
    for secret in ("Tr0ub4dor", "hunter2", "4111"):
        assert secret not in out


def test_scan_credentials_for_all_users_and_a_clean_user():
    for name, text in (("ann", "tea\n"), ("bob", "PIN 4821\n"), ("cy", "")):
        user = UserFactory(username=name)
        if text:
            write_memory_file(user=user, text=text, if_match=_etag(b""), actor=user)
    assert run("memory", "--all", "scan-credentials").splitlines() == [
        "bob: MEMORY.md line 1: password",
        "1 line(s) holding a credential",
    ]
    assert run("memory", "--user", "ann", "scan-credentials") == "0 line(s) holding a credential\n"


@pytest.mark.parametrize(
    "args",
    [
        ("--all", "show"),
        ("--all", "--user", "ann", "scan-credentials"),
        ("scan-credentials",),
        ("--user", "ann", "--actor", "ann", "scan-credentials"),
    ],
)
def test_scan_credentials_refuses_what_does_not_go_with_it(args):
    UserFactory(username="ann")
    with pytest.raises(CommandError):
        call_command("memory", *args, stdout=StringIO())
