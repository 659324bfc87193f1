"""The user's own controls: the switch, reading, replacing and clearing MEMORY.md."""

import hashlib

import pytest
from django.db import connection

from memory_app.locks import memory_lock_key
from memory_app.memory_file import MEMORY_FILE_MAX_BYTES
from memory_app.models import MemoryEvent, UserConfig
from memory_app.selectors import (
    MemoryFile,
    memory_enabled,
    read_memory_file,
    read_memory_for_prompt,
)
from memory_app.services import (
    MemoryAccessDenied,
    MemoryConflict,
    MemoryFileTooLarge,
    MemoryInputError,
    MemoryUnavailable,
    clear_memory,
    remember_memory,
    set_memory_enabled,
    write_memory_file,
)
from memory_app.workspace import Workspace
from memory_app.workspace.paths import MEMORY_RELPATH
from tests.concurrency import race
from tests.factories import (
    ConversationFactory,
    RunningAgentRunFactory,
    UserFactory,
    context_for,
    memory_user,
)
from tests.memory_app.helpers import etag

pytestmark = pytest.mark.django_db


def _path(settings, uid: int):
    return settings.WORKSPACE_ROOT / str(uid) / "agents" / "MEMORY.md"


def _seed(uid: int, data: bytes) -> None:
    Workspace.for_user(uid).replace_authorized_file(MEMORY_RELPATH, data)


# -- read ------------------------------------------------------------------------------------


def test_a_missing_file_reads_as_empty_with_the_etag_of_no_bytes():
    user = UserFactory()
    assert read_memory_file(user=user) == MemoryFile(
        text="", etag=etag(b""), size_bytes=0, problem=None
    )


def test_the_whole_file_is_read_with_its_sha256etag():
    user = UserFactory()
    data = "对花生过敏 🥜\nPrefers tea.\n".encode()
    _seed(user.pk, data)
    assert read_memory_file(user=user) == MemoryFile(
        text=data.decode(), etag=etag(data), size_bytes=len(data), problem=None
    )


def test_an_oversize_file_is_reported_with_the_etag_of_all_its_bytes(os_read_sizes):
    user = UserFactory()
    data = b"x" * (200 * 1024)
    _seed(user.pk, data)
    os_read_sizes.clear()
    assert read_memory_file(user=user) == MemoryFile(
        text=None, etag=etag(data), size_bytes=len(data), problem="too_large"
    )
    # Memory stays bounded: the rest of the file is hashed in chunks as it streams past.
    assert max(os_read_sizes) <= MEMORY_FILE_MAX_BYTES + 1


def test_a_non_utf8_file_is_reported_not_raised():
    user = UserFactory()
    data = b"good\n\xff\xfe bad\n"
    _seed(user.pk, data)
    assert read_memory_file(user=user) == MemoryFile(
        text=None, etag=etag(data), size_bytes=len(data), problem="invalid_encoding"
    )


# -- write -----------------------------------------------------------------------------------


def test_a_current_etag_replaces_the_whole_file_as_given(settings):
    user = memory_user()
    _seed(user.pk, b"old\n")
    text = "  Line with trailing space   \r\nno final newline"
    result = write_memory_file(user=user, text=text, if_match=etag(b"old\n"), actor=user)
    assert _path(settings, user.pk).read_bytes() == text.encode()
    assert result == MemoryFile(
        text=text, etag=etag(text.encode()), size_bytes=len(text.encode()), problem=None
    )
    assert read_memory_file(user=user) == result


def test_a_stale_etag_is_refused_and_changes_nothing(settings):
    user = memory_user()
    _seed(user.pk, b"old\n")
    stale = read_memory_file(user=user).etag
    run = RunningAgentRunFactory(conversation=ConversationFactory(user=user))
    remember_memory(context_for(run), "an agent's fact")
    before = _path(settings, user.pk).read_bytes()
    events = MemoryEvent.objects.count()
    for if_match in (stale, "*", 'W/"' + stale + '"', ""):
        with pytest.raises(MemoryConflict) as excinfo:
            write_memory_file(user=user, text="mine\n", if_match=if_match, actor=user)
        assert excinfo.value.reason == MemoryConflict.STALE == "stale"
    assert _path(settings, user.pk).read_bytes() == before
    assert MemoryEvent.objects.count() == events


@pytest.mark.parametrize(
    "text, error",
    [
        ("nul \x00 inside", MemoryInputError),
        ("lone \ud800 surrogate", MemoryInputError),
        (None, MemoryInputError),
        (b"bytes", MemoryInputError),
        ("x" * (MEMORY_FILE_MAX_BYTES + 1), MemoryFileTooLarge),
        ("é" * (MEMORY_FILE_MAX_BYTES // 2 + 1), MemoryFileTooLarge),
    ],
)
def test_bad_text_is_refused_and_changes_nothing(settings, text, error):
    user = memory_user()
    _seed(user.pk, b"old\n")
    with pytest.raises(error):
        write_memory_file(user=user, text=text, if_match=etag(b"old\n"), actor=user)
    assert _path(settings, user.pk).read_bytes() == b"old\n"
    assert not MemoryEvent.objects.exists()


def test_text_of_exactly_the_limit_is_accepted(settings):
    user = memory_user()
    text = "x" * MEMORY_FILE_MAX_BYTES
    assert write_memory_file(user=user, text=text, if_match=etag(b""), actor=user).size_bytes == (
        MEMORY_FILE_MAX_BYTES
    )


def test_an_etag_that_is_not_text_is_refused():
    user = memory_user()
    with pytest.raises(MemoryInputError):
        write_memory_file(user=user, text="x", if_match=None, actor=user)


def test_writes_work_with_the_switch_off(settings):
    user = UserFactory()
    write_memory_file(user=user, text="edited while off\n", if_match=etag(b""), actor=user)
    assert _path(settings, user.pk).read_bytes() == b"edited while off\n"
    assert not memory_enabled(user.pk)


def test_the_same_text_again_publishes_and_records_nothing(settings):
    user = memory_user()
    _seed(user.pk, b"same\n")
    inode = _path(settings, user.pk).stat().st_ino
    result = write_memory_file(user=user, text="same\n", if_match=etag(b"same\n"), actor=user)
    assert result.etag == etag(b"same\n")
    assert _path(settings, user.pk).stat().st_ino == inode
    assert not MemoryEvent.objects.exists()


@pytest.mark.parametrize("active", [False, None])
def test_an_inactive_or_missing_user_is_denied_and_no_workspace_is_created(settings, active):
    user = memory_user()
    if active is None:
        user_id = user.pk
        user.delete()
        user.pk = user_id
    else:
        user.is_active = False
        user.save(update_fields=["is_active"])
    for call in (
        lambda: write_memory_file(user=user, text="x", if_match=etag(b""), actor=None),
        lambda: clear_memory(user=user, actor=None),
        lambda: set_memory_enabled(user=user, enabled=True, actor=None),
    ):
        with pytest.raises(MemoryAccessDenied):
            call()
    assert not (settings.WORKSPACE_ROOT / str(user.pk)).exists()


@pytest.mark.parametrize("problem", ["too_large", "invalid_encoding"])
def test_a_file_with_a_problem_can_be_replaced_or_cleared(settings, problem):
    user = memory_user()
    data = b"y" * (200 * 1024) if problem == "too_large" else b"ok\n\xc3\x28 broken\n"
    _seed(user.pk, data)
    seen = read_memory_file(user=user)
    assert seen.problem == problem
    write_memory_file(user=user, text="repaired\n", if_match=seen.etag, actor=user)
    assert read_memory_file(user=user).text == "repaired\n"
    _seed(user.pk, data)
    clear_memory(user=user, actor=user)
    assert read_memory_file(user=user) == MemoryFile(
        text="", etag=etag(b""), size_bytes=0, problem=None
    )
    assert [e.before_sha256 for e in MemoryEvent.objects.filter(kind="user_cleared")] == [
        hashlib.sha256(data).hexdigest()
    ]


def test_a_symlinked_memory_file_is_denied_and_its_target_untouched(settings, tmp_path):
    user = memory_user()
    outside = tmp_path / "outside.md"
    outside.write_bytes(b"outside\n")
    _path(settings, user.pk).parent.mkdir(parents=True)
    _path(settings, user.pk).symlink_to(outside)
    with pytest.raises(MemoryAccessDenied):
        write_memory_file(user=user, text="x", if_match=etag(b""), actor=user)
    with pytest.raises(MemoryAccessDenied):
        clear_memory(user=user, actor=user)
    assert outside.read_bytes() == b"outside\n"


# -- clear -----------------------------------------------------------------------------------


def test_clear_while_memory_is_on_leaves_no_memory_block_and_the_next_fact_starts_fresh(settings):
    user = memory_user()
    run = RunningAgentRunFactory(conversation=ConversationFactory(user=user))
    remember_memory(context_for(run), "Likes oolong.")
    remember_memory(context_for(run), "Lives in Kyoto.")
    assert not read_memory_for_prompt(user.pk).is_empty
    clear_memory(user=user, actor=user)
    assert read_memory_for_prompt(user.pk).is_empty
    assert memory_enabled(user.pk)
    assert remember_memory(context_for(run), "Likes oolong.").status == "added"
    assert _path(settings, user.pk).read_bytes() == b"Likes oolong.\n"


# -- the switch ------------------------------------------------------------------------------


def test_set_memory_enabled_creates_the_row_and_flips_it():
    user = UserFactory()
    config = set_memory_enabled(user=user, enabled=True, actor=user)
    assert (config.user_id, config.enable_memory) == (user.pk, True)
    assert memory_enabled(user.pk)
    assert set_memory_enabled(user=user, enabled=False, actor=user).enable_memory is False
    assert UserConfig.objects.filter(user=user).count() == 1
    assert [e.kind for e in MemoryEvent.objects.filter(user=user)] == ["switch_on", "switch_off"]


def test_set_memory_enabled_refuses_anything_but_a_bool():
    user = UserFactory()
    with pytest.raises(MemoryInputError):
        set_memory_enabled(user=user, enabled="yes", actor=user)
    assert not UserConfig.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_set_memory_enabled_waits_for_the_users_advisory_lock(settings):
    settings.MEMORY_LOCK_TIMEOUT_MS = 150
    user = UserFactory()
    holder = connection.get_new_connection(connection.get_connection_params())
    holder.autocommit = True
    try:
        holder.execute("SELECT pg_advisory_lock(%s)", [memory_lock_key(str(user.pk))])
        with pytest.raises(MemoryUnavailable):
            set_memory_enabled(user=user, enabled=True, actor=user)
        assert not UserConfig.objects.exists()
    finally:
        holder.close()
    assert set_memory_enabled(user=user, enabled=True, actor=user).enable_memory


# -- racing agents ---------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("attempt", range(3))
def test_a_user_edit_racing_eight_agent_appends_loses_nothing(settings, attempt):
    user = memory_user()
    runs = [RunningAgentRunFactory(conversation=ConversationFactory(user=user)) for _ in range(8)]
    _seed(user.pk, b"seed\n")
    seen = read_memory_file(user=user)
    edited = "seed\nthe user's own line\n"

    def write(kind: str, index: int):
        if kind == "agent":
            return remember_memory(context_for(runs[index]), f"agent fact {index}").status
        try:
            write_memory_file(user=user, text=edited, if_match=seen.etag, actor=user)
            return "edited"
        except MemoryConflict as exc:
            return exc.reason

    calls = [("agent", i) for i in range(8)]
    calls.insert(attempt * 4, ("user", 0))
    outcomes = race(write, calls)
    agent_outcomes = [o for (kind, _), o in zip(calls, outcomes, strict=True) if kind == "agent"]
    assert agent_outcomes == ["added"] * 8
    final = _path(settings, user.pk).read_text()
    lines = final.splitlines()
    assert sorted(line for line in lines if line.startswith("agent fact")) == sorted(
        f"agent fact {i}" for i in range(8)
    )
    user_outcome = outcomes[calls.index(("user", 0))]
    assert user_outcome in ("edited", "stale")
    assert ("the user's own line" in lines) == (user_outcome == "edited")
    if user_outcome == "edited":
        assert final.startswith(edited)
