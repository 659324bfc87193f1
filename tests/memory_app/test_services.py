import os
import stat
import unicodedata
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.utils import timezone

from conversations.models import AgentRun
from memory_app import workspace as workspace_module
from memory_app.models import UserConfig
from memory_app.services import (
    MEMORY_ARG_MAX_BYTES,
    MEMORY_FILE_MAX_BYTES,
    MemoryAccessDenied,
    MemoryConflict,
    MemoryFileTooLarge,
    MemoryInputError,
    MemoryUnavailable,
    MemoryWriteError,
    MemoryWriteResult,
    normalize_memory_text,
    remember_memory,
)
from memory_app.workspace import MEMORY_RELPATH, Workspace
from tests.factories import (
    AgentRunFactory,
    ConversationFactory,
    RunningAgentRunFactory,
    UserConfigFactory,
    context_for,
    memory_user,
)

pytestmark = pytest.mark.django_db

ORIGINAL = "# Memory\n对花生过敏 🥜\nPrefers tea.\n".encode()


@pytest.fixture
def run():
    return RunningAgentRunFactory(conversation=ConversationFactory(user=memory_user()))


def _memory_path(settings, uid: int):
    return settings.WORKSPACE_ROOT / str(uid) / "agents" / "MEMORY.md"


def _seed(uid: int, data: bytes = ORIGINAL) -> None:
    Workspace.for_user(uid).replace_authorized_file(MEMORY_RELPATH, data)


def _memory(settings, uid: int) -> bytes:
    return _memory_path(settings, uid).read_bytes()


def _assert_refused(settings, run, error, ctx=None, content="New fact.", replaces=None):
    """The call raises `error` and the memory directory is byte-for-byte as before."""
    if not _memory_path(settings, run.user_id).exists():
        _seed(run.user_id)
    agents = _memory_path(settings, run.user_id).parent
    before = {name: (agents / name).read_bytes() for name in os.listdir(agents)}
    with pytest.raises(error) as excinfo:
        remember_memory(ctx or context_for(run), content, replaces)
    after = {name: (agents / name).read_bytes() for name in os.listdir(agents)}
    assert after == before
    return excinfo.value


# -- success paths ---------------------------------------------------------------------------


def test_the_first_fact_creates_the_file(settings, run):
    result = remember_memory(context_for(run), "Allergic to peanuts 🥜")
    assert result == MemoryWriteResult(
        status="added", size_bytes=len("Allergic to peanuts 🥜\n".encode())
    )
    assert _memory(settings, run.user_id) == "Allergic to peanuts 🥜\n".encode()
    assert stat.S_IMODE(_memory_path(settings, run.user_id).stat().st_mode) == 0o600


def test_a_new_fact_is_appended_as_its_own_line(settings, run):
    _seed(run.user_id)
    result = remember_memory(context_for(run), "  Lives in 東京.  \r\n")
    assert _memory(settings, run.user_id) == ORIGINAL + "Lives in 東京.\n".encode()
    assert result == MemoryWriteResult(
        status="added", size_bytes=len(_memory(settings, run.user_id))
    )


def test_an_append_to_a_file_without_a_final_newline_adds_one_first(settings, run):
    _seed(run.user_id, b"no newline at end")
    remember_memory(context_for(run), "next fact")
    assert _memory(settings, run.user_id) == b"no newline at end\nnext fact\n"


@pytest.mark.parametrize(
    "again",
    [
        "Prefers tea.",
        "Prefers tea.   ",
        "\n\n  Prefers tea.\r\n\r\n",
        "对花生过敏 🥜",
    ],
)
def test_the_same_fact_again_is_unchanged(settings, run, again):
    _seed(run.user_id)
    result = remember_memory(context_for(run), again)
    assert result == MemoryWriteResult(status="unchanged", size_bytes=len(ORIGINAL))
    assert _memory(settings, run.user_id) == ORIGINAL


def test_a_fact_in_nfd_matches_the_same_fact_stored_in_nfc(settings, run):
    nfc = unicodedata.normalize("NFC", "Café crème brûlée")
    nfd = unicodedata.normalize("NFD", nfc)
    assert nfc != nfd
    assert remember_memory(context_for(run), nfd).status == "added"
    assert nfc.encode() in _memory(settings, run.user_id)
    assert remember_memory(context_for(run), nfc).status == "unchanged"
    assert remember_memory(context_for(run), nfd).status == "unchanged"


def test_a_fact_in_a_file_with_crlf_and_trailing_spaces_is_unchanged(settings, run):
    _seed(run.user_id, b"first   \r\nsecond\t\r\nthird\r\n")
    assert remember_memory(context_for(run), "first\nsecond").status == "unchanged"
    assert _memory(settings, run.user_id) == b"first   \r\nsecond\t\r\nthird\r\n"


@pytest.mark.parametrize("fact", ["Prefers", "tea.", "Prefers tea", "Prefers tea.\nMore"])
def test_a_fact_that_is_only_part_of_longer_lines_is_added(settings, run, fact):
    _seed(run.user_id)
    assert remember_memory(context_for(run), fact).status == "added"
    assert _memory(settings, run.user_id) == ORIGINAL + fact.encode() + b"\n"


def test_a_retried_append_converges_to_unchanged(settings, run):
    assert remember_memory(context_for(run), "once").status == "added"
    assert remember_memory(context_for(run), "once").status == "unchanged"
    assert _memory(settings, run.user_id) == b"once\n"


def test_replaces_swaps_the_one_exact_occurrence_for_the_normalized_content(settings, run):
    _seed(run.user_id)
    result = remember_memory(context_for(run), "Prefers green tea.  ", replaces="Prefers tea.")
    expected = ORIGINAL.replace(b"Prefers tea.", b"Prefers green tea.")
    assert _memory(settings, run.user_id) == expected
    assert result == MemoryWriteResult(status="replaced", size_bytes=len(expected))


def test_a_retried_replacement_reports_a_conflict(settings, run):
    _seed(run.user_id)
    remember_memory(context_for(run), "Prefers coffee.", replaces="Prefers tea.")
    error = _assert_refused(
        settings, run, MemoryConflict, content="Prefers coffee.", replaces="Prefers tea."
    )
    assert error.reason == "not_found"


def test_the_normalization_of_content(run):
    raw = "\r\n  \n  line one  \r\n" + unicodedata.normalize("NFD", "é") + "\t\rthree \n\n"
    assert normalize_memory_text(raw) == "line one\né\nthree"


# -- input refusals --------------------------------------------------------------------------


def test_content_of_exactly_the_limit_is_accepted(settings, run):
    content = "记" * (MEMORY_ARG_MAX_BYTES // 3) + "x"
    assert len(content.encode()) == MEMORY_ARG_MAX_BYTES
    assert remember_memory(context_for(run), content).status == "added"


@pytest.mark.parametrize(
    ("content", "replaces"),
    [
        ("记" * (MEMORY_ARG_MAX_BYTES // 3) + "xy", None),
        ("", None),
        (" \r\n\t ", None),
        ("nul\x00byte", None),
        (None, None),
        (42, None),
        ("lone \ud800 surrogate", None),
        ("fine", "x" * (MEMORY_ARG_MAX_BYTES + 1)),
        ("fine", ""),
        ("fine", "Prefers\x00tea."),
        ("fine", 3),
    ],
)
def test_bad_arguments_are_rejected(settings, run, content, replaces):
    _assert_refused(settings, run, MemoryInputError, content=content, replaces=replaces)


# -- context and run refusals ---------------------------------------------------------------

FIELDS = ("uid", "thread_id", "run_id", "request_id", "worker_id")


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize(
    "value", [None, "", "forged", "999999", "00000000-0000-0000-0000-000000000000"]
)
def test_a_missing_empty_or_forged_context_field_is_denied(settings, run, field, value):
    ctx = context_for(run, **{field: value})
    _assert_refused(settings, run, MemoryAccessDenied, ctx=ctx)


@pytest.mark.parametrize("field", FIELDS)
def test_a_context_without_a_field_at_all_is_denied(settings, run, field):
    fields = {name: getattr(context_for(run), name) for name in FIELDS if name != field}
    _assert_refused(settings, run, MemoryAccessDenied, ctx=SimpleNamespace(**fields))


def test_another_users_run_is_denied_and_neither_file_changes(settings, run):
    other = RunningAgentRunFactory(conversation=ConversationFactory(user=memory_user()))
    _seed(other.user_id, b"other user's memory\n")
    ctx = context_for(other, uid=str(run.user_id))
    _assert_refused(settings, run, MemoryAccessDenied, ctx=ctx)
    assert _memory(settings, other.user_id) == b"other user's memory\n"


def test_a_uid_in_another_spelling_is_denied(settings, run):
    _assert_refused(settings, run, MemoryAccessDenied, ctx=context_for(run, uid=f"0{run.user_id}"))


def test_another_thread_or_request_of_the_same_user_is_denied(settings, run):
    sibling = ConversationFactory(user=run.user)
    _assert_refused(
        settings, run, MemoryAccessDenied, ctx=context_for(run, thread_id=sibling.thread_id)
    )
    other = RunningAgentRunFactory(conversation=sibling)
    _assert_refused(
        settings, run, MemoryAccessDenied, ctx=context_for(run, request_id=other.request_id)
    )


def test_a_subagent_run_is_denied(settings, run):
    child = RunningAgentRunFactory(
        conversation=run.conversation, run_type=AgentRun.RunType.SUBAGENT, parent_run=run
    )
    _assert_refused(settings, child, MemoryAccessDenied)


def test_a_run_with_a_parent_is_denied_even_if_typed_chat(settings, run):
    child = RunningAgentRunFactory(conversation=run.conversation, parent_run=run)
    _assert_refused(settings, child, MemoryAccessDenied)


@pytest.mark.parametrize("status", ["pending", "succeeded", "failed", "cancelled"])
def test_a_run_that_is_not_running_is_denied(settings, run, status):
    AgentRun.objects.filter(pk=run.pk).update(status=status)
    _assert_refused(settings, run, MemoryAccessDenied)


def test_another_worker_is_denied(settings, run):
    _assert_refused(
        settings, run, MemoryAccessDenied, ctx=context_for(run, worker_id="stale-worker")
    )


def test_an_expired_lease_is_denied(settings, run):
    AgentRun.objects.filter(pk=run.pk).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    _assert_refused(settings, run, MemoryAccessDenied)


def test_a_resume_run_may_write(settings):
    resume = RunningAgentRunFactory(
        conversation=ConversationFactory(user=memory_user()), run_type=AgentRun.RunType.RESUME
    )
    assert remember_memory(context_for(resume), "from a resume").status == "added"


@pytest.mark.parametrize("config", ["off", "missing"])
def test_memory_switched_off_or_never_configured_is_denied(settings, config):
    run = RunningAgentRunFactory()
    if config == "off":
        UserConfigFactory(user=run.user, enable_memory=False)
    _assert_refused(settings, run, MemoryAccessDenied)
    assert not UserConfig.objects.filter(user=run.user, enable_memory=True).exists()


def test_an_unclaimed_run_is_denied(settings):
    pending = AgentRunFactory(conversation=ConversationFactory(user=memory_user()))
    _assert_refused(settings, pending, MemoryAccessDenied, ctx=context_for(pending, worker_id="w"))


# -- file refusals ---------------------------------------------------------------------------


def test_a_source_file_over_the_limit_is_refused(settings, run):
    _seed(run.user_id, b"x" * (MEMORY_FILE_MAX_BYTES + 1))
    agents = _memory_path(settings, run.user_id).parent
    with pytest.raises(MemoryFileTooLarge):
        remember_memory(context_for(run), "one more")
    assert _memory(settings, run.user_id) == b"x" * (MEMORY_FILE_MAX_BYTES + 1)
    assert os.listdir(agents) == ["MEMORY.md"]


def test_a_source_of_exactly_the_limit_can_still_be_deduplicated(settings, run):
    data = (b"x" * (MEMORY_FILE_MAX_BYTES - 5)) + b"\nfact"
    _seed(run.user_id, data)
    assert len(data) == MEMORY_FILE_MAX_BYTES
    assert remember_memory(context_for(run), "fact").status == "unchanged"


def test_a_result_over_the_limit_is_refused(settings, run):
    _seed(run.user_id, b"x" * (MEMORY_FILE_MAX_BYTES - 10) + b"\n")
    _assert_refused(settings, run, MemoryFileTooLarge, content="y" * 10)


def test_a_replacement_whose_result_is_over_the_limit_is_refused(settings, run):
    _seed(run.user_id, b"x" * (MEMORY_FILE_MAX_BYTES - 10) + b"\nold\n")
    with pytest.raises(MemoryFileTooLarge):
        remember_memory(context_for(run), "n" * 20, replaces="old")
    assert _memory(settings, run.user_id).endswith(b"\nold\n")


@pytest.mark.parametrize(
    ("replaces", "reason"),
    [("Prefers coffee.", "not_found"), ("e", "ambiguous"), ("prefers tea.", "not_found")],
)
def test_replaces_matching_zero_or_several_places_is_a_conflict(settings, run, replaces, reason):
    error = _assert_refused(settings, run, MemoryConflict, content="x", replaces=replaces)
    assert error.reason == reason


def test_overlapping_occurrences_of_replaces_are_ambiguous(settings, run):
    _seed(run.user_id, b"aaa\n")
    with pytest.raises(MemoryConflict) as excinfo:
        remember_memory(context_for(run), "b", replaces="aa")
    assert excinfo.value.reason == "ambiguous"
    assert _memory(settings, run.user_id) == b"aaa\n"


def test_invalid_utf8_in_the_file_is_a_conflict_left_for_the_user(settings, run):
    _seed(run.user_id, b"good line\n\xff\xfe broken\n")
    agents = _memory_path(settings, run.user_id).parent
    for replaces in (None, "good line"):
        with pytest.raises(MemoryConflict) as excinfo:
            remember_memory(context_for(run), "new", replaces)
        assert excinfo.value.reason == "invalid_encoding"
    assert _memory(settings, run.user_id) == b"good line\n\xff\xfe broken\n"
    assert os.listdir(agents) == ["MEMORY.md"]


@pytest.mark.parametrize("where", ["file", "agents"])
def test_a_symlink_on_the_memory_path_is_denied_and_its_target_untouched(
    settings, run, tmp_path, where
):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "MEMORY.md").write_bytes(b"outside\n")
    agents = settings.WORKSPACE_ROOT / str(run.user_id) / "agents"
    if where == "file":
        agents.mkdir(parents=True)
        (agents / "MEMORY.md").symlink_to(outside / "MEMORY.md")
    else:
        agents.parent.mkdir(parents=True)
        agents.symlink_to(outside)
    with pytest.raises(MemoryAccessDenied):
        remember_memory(context_for(run), "planted")
    assert (outside / "MEMORY.md").read_bytes() == b"outside\n"
    assert os.listdir(outside) == ["MEMORY.md"]


def test_every_error_is_a_memory_write_error():
    for error in (
        MemoryInputError,
        MemoryConflict,
        MemoryFileTooLarge,
        MemoryAccessDenied,
        MemoryUnavailable,
    ):
        assert issubclass(error, MemoryWriteError)


@pytest.mark.parametrize(
    ("name", "fails_on"),
    [
        ("open", lambda path, flags, *a, **k: bool(flags & os.O_CREAT)),
        ("write", lambda *a: True),
        ("fsync", lambda fd: not stat.S_ISDIR(os.fstat(fd).st_mode)),
        ("rename", lambda *a, **k: True),
        ("fsync", lambda fd: stat.S_ISDIR(os.fstat(fd).st_mode)),
    ],
    ids=["temp create", "write", "file fsync", "rename", "directory fsync"],
)
def test_a_publish_failure_is_unavailable_and_keeps_the_old_file(
    settings, run, monkeypatch, name, fails_on
):
    _seed(run.user_id)
    real = getattr(os, name)

    def injected(*args, **kwargs):
        if fails_on(*args, **kwargs):
            raise OSError(5, "Input/output error")
        return real(*args, **kwargs)

    monkeypatch.setattr(workspace_module.os, name, injected)
    error = _assert_refused(settings, run, MemoryUnavailable)
    assert "MEMORY" not in str(error) and str(settings.WORKSPACE_ROOT) not in str(error)
    monkeypatch.undo()
    assert remember_memory(context_for(run), "New fact.").status == "added"
