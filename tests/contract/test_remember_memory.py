"""`remember_memory`: statuses, normalization, conflicts, refusals and the lock."""

import dataclasses
import os
import threading

import pytest
from django.conf import settings as django_settings
from django.db import connection

from memory_app.models import UserConfig
from memory_app.services import (
    MemoryAccessDenied,
    MemoryConflict,
    MemoryFileTooLarge,
    MemoryInputError,
    MemoryUnavailable,
    MemoryWriteError,
    MemoryWriteResult,
    remember_memory,
)
from tests.contract.helpers import (
    KIB,
    TOOL_STATUSES,
    call,
    memory_path,
    tools_by_name,
    write_agents_file,
)
from tests.factories import context_for


def test_memory_write_result_has_exactly_status_and_size_bytes():
    assert [field.name for field in dataclasses.fields(MemoryWriteResult)] == [
        "status",
        "size_bytes",
    ]
    assert MemoryWriteResult("added", 3) == MemoryWriteResult(status="added", size_bytes=3)


@pytest.mark.parametrize(
    "error",
    [MemoryInputError, MemoryConflict, MemoryFileTooLarge, MemoryAccessDenied, MemoryUnavailable],
)
def test_all_five_memory_errors_are_memory_write_errors(error):
    assert issubclass(error, MemoryWriteError)


@pytest.mark.django_db
def test_append_dedupe_and_replace_report_spec_statuses_and_the_file_size(ctx, run):
    path = memory_path(run.user_id)
    added = remember_memory(ctx, "  Likes tea.  \r\n")
    assert added == MemoryWriteResult(status="added", size_bytes=len(b"Likes tea.\n"))
    assert path.read_bytes() == b"Likes tea.\n"
    unchanged = remember_memory(ctx, "Likes tea.")
    assert unchanged == MemoryWriteResult(status="unchanged", size_bytes=path.stat().st_size)
    replaced = remember_memory(ctx, " Likes coffee. ", replaces="Likes tea.")
    assert replaced.status == "replaced"
    assert path.read_bytes() == b"Likes coffee.\n"
    assert replaced.size_bytes == path.stat().st_size


@pytest.mark.django_db
def test_normalization_is_nfc_lf_and_stripped_line_ends_and_edges(ctx, run):
    write_agents_file(run.user_id, "MEMORY.md", b"Old fact.")
    remember_memory(ctx, "\n  \r\n Cafe\u0301 line   \r second\t\r\n  \n")
    assert memory_path(run.user_id).read_text() == "Old fact.\nCafé line\n second\n"


@pytest.mark.django_db
def test_a_fact_indented_in_the_file_is_not_the_same_whole_line(ctx, run):
    write_agents_file(run.user_id, "MEMORY.md", b"  Likes tea.\n")
    assert remember_memory(ctx, "Likes tea.").status == "added"


@pytest.mark.django_db
def test_a_whitespace_only_replaces_that_occurs_once_is_replaced(ctx, run):
    write_agents_file(run.user_id, "MEMORY.md", b"Likes\ttea.\n")
    assert remember_memory(ctx, "-", replaces="\t").status == "replaced"
    assert memory_path(run.user_id).read_bytes() == b"Likes-tea.\n"


@pytest.mark.django_db
def test_a_retried_append_is_unchanged_and_a_retried_replacement_is_a_conflict(ctx, run):
    write_agents_file(run.user_id, "MEMORY.md", b"Lives in Paris.\n")
    assert remember_memory(ctx, "Has a cat.").status == "added"
    assert remember_memory(ctx, "Has a cat.").status == "unchanged"
    assert remember_memory(ctx, "Lives in Rome.", replaces="Lives in Paris.").status == "replaced"
    with pytest.raises(MemoryConflict, match="not_found"):
        remember_memory(ctx, "Lives in Rome.", replaces="Lives in Paris.")
    assert memory_path(run.user_id).read_bytes() == b"Lives in Rome.\nHas a cat.\n"


@pytest.mark.django_db
@pytest.mark.parametrize(("replaces", "reason"), [("Berlin", "not_found"), ("Lives", "ambiguous")])
def test_replaces_found_zero_or_several_times_is_a_conflict_and_leaves_the_file(
    ctx, run, replaces, reason
):
    original = b"Lives in Paris.\nLives alone.\n"
    write_agents_file(run.user_id, "MEMORY.md", original)
    with pytest.raises(MemoryConflict, match=reason):
        remember_memory(ctx, "New.", replaces=replaces)
    assert memory_path(run.user_id).read_bytes() == original


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("content", "replaces"),
    [
        ("", None),
        (" \n\t ", None),
        ("a" * (4 * KIB + 1), None),
        ("字" * 1366, None),
        ("a\x00b", None),
        ("ok", "a" * (4 * KIB + 1)),
        ("ok", "x\x00"),
    ],
)
def test_bad_arguments_are_memory_input_errors_and_the_tool_says_rejected(
    ctx, run, content, replaces
):
    write_agents_file(run.user_id, "MEMORY.md", b"a\n")
    with pytest.raises(MemoryInputError):
        remember_memory(ctx, content, replaces)
    result = call(tools_by_name(ctx)["remember_memory"], {"content": content, "replaces": replaces})
    assert result["status"] == "rejected"
    assert memory_path(run.user_id).read_bytes() == b"a\n"


@pytest.mark.django_db
def test_arguments_of_exactly_4_kib_are_accepted(ctx, run):
    write_agents_file(run.user_id, "MEMORY.md", ("b" * 4 * KIB + "\n").encode())
    assert remember_memory(ctx, "c" * 4 * KIB, replaces="b" * 4 * KIB).status == "replaced"


@pytest.mark.django_db
def test_a_file_or_result_over_128_kib_is_too_large_and_the_tool_says_rejected(ctx, run):
    path = write_agents_file(run.user_id, "MEMORY.md", b"x" * (128 * KIB + 1))
    with pytest.raises(MemoryFileTooLarge):
        remember_memory(ctx, "New.")
    assert call(tools_by_name(ctx)["remember_memory"], {"content": "New."})["status"] == "rejected"
    full = b"x" * (128 * KIB - 4) + b"\n"
    path.write_bytes(full)
    with pytest.raises(MemoryFileTooLarge):
        remember_memory(ctx, "New.")
    assert path.read_bytes() == full
    path.write_bytes(full[:-1])
    assert remember_memory(ctx, "ab").size_bytes == 128 * KIB


@pytest.mark.django_db
def test_a_file_that_is_not_utf8_is_an_invalid_encoding_conflict(ctx, run):
    path = write_agents_file(run.user_id, "MEMORY.md", b"caf\xe9\n")
    with pytest.raises(MemoryConflict, match="invalid_encoding"):
        remember_memory(ctx, "New.")
    assert call(tools_by_name(ctx)["remember_memory"], {"content": "New."})["status"] == "conflict"
    assert path.read_bytes() == b"caf\xe9\n"


@pytest.mark.django_db
def test_memory_switched_off_after_the_graph_was_built_is_denied_at_the_call(ctx, run):
    tools = tools_by_name(ctx)
    UserConfig.objects.filter(user=run.user).update(enable_memory=False)
    with pytest.raises(MemoryAccessDenied):
        remember_memory(ctx, "New.")
    for name, arguments in [
        ("remember_memory", {"content": "New."}),
        ("search_thread_messages", {"query": "x"}),
        ("read_thread_messages", {"thread_id": run.conversation.thread_id}),
    ]:
        assert call(tools[name], arguments)["status"] == "denied"
    assert not memory_path(run.user_id).exists()


@pytest.mark.django_db
def test_a_symlinked_memory_file_is_access_denied_and_its_target_untouched(ctx, run, tmp_path):
    target = tmp_path / "elsewhere.md"
    target.write_bytes(b"outside\n")
    memory_path(run.user_id).parent.mkdir(parents=True)
    memory_path(run.user_id).symlink_to(target)
    with pytest.raises(MemoryAccessDenied):
        remember_memory(ctx, "New.")
    assert call(tools_by_name(ctx)["remember_memory"], {"content": "New."})["status"] == "denied"
    assert target.read_bytes() == b"outside\n"


@pytest.mark.django_db
@pytest.mark.parametrize("planted", ["directory", "fifo", "agents_is_a_file", "agents_symlink"])
def test_a_non_regular_file_or_symlinked_component_is_access_denied(ctx, run, tmp_path, planted):
    agents = memory_path(run.user_id).parent
    agents.parent.mkdir(parents=True)
    if planted == "agents_is_a_file":
        agents.write_bytes(b"not a directory")
    elif planted == "agents_symlink":
        (tmp_path / "real").mkdir()
        agents.symlink_to(tmp_path / "real")
    else:
        agents.mkdir()
        if planted == "directory":
            memory_path(run.user_id).mkdir()
        else:
            os.mkfifo(memory_path(run.user_id))
    with pytest.raises(MemoryAccessDenied):
        remember_memory(ctx, "New.")
    assert call(tools_by_name(ctx)["remember_memory"], {"content": "New."})["status"] == "denied"
    if planted == "agents_symlink":
        assert list((tmp_path / "real").iterdir()) == []


@pytest.mark.django_db(transaction=True)
def test_the_lock_held_from_outside_by_the_spec_key_makes_the_write_unavailable(settings, run):
    settings.MEMORY_LOCK_TIMEOUT_MS = 100
    ctx = context_for(run)
    path = write_agents_file(run.user_id, "MEMORY.md", b"Old.\n")
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pg_advisory_lock(hashtextextended('yuxi-memory:' || %s, 0))",
                    [ctx.uid],
                )
                held.set()
                release.wait()
                cursor.execute(
                    "SELECT pg_advisory_unlock(hashtextextended('yuxi-memory:' || %s, 0))",
                    [ctx.uid],
                )
        finally:
            held.set()
            connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        held.wait()
        with pytest.raises(MemoryUnavailable):
            remember_memory(ctx, "New.")
        result = call(tools_by_name(ctx)["remember_memory"], {"content": "New."})
        assert result["status"] == "unavailable"
        assert path.read_bytes() == b"Old.\n"
    finally:
        release.set()
        holder.join()
    assert remember_memory(ctx, "New.").status == "added"


@pytest.mark.django_db
def test_the_remember_tool_speaks_only_the_spec_status_vocabulary(ctx, run):
    tool = tools_by_name(ctx)["remember_memory"]
    results = [
        call(tool, {"content": "Fact."}),
        call(tool, {"content": "Fact."}),
        call(tool, {"content": "Other.", "replaces": "Fact."}),
        call(tool, {"content": "Other.", "replaces": "Fact."}),
        call(tool, {"content": ""}),
    ]
    assert [r["status"] for r in results] == [
        "added",
        "unchanged",
        "replaced",
        "conflict",
        "rejected",
    ]
    for result in results:
        assert set(result) == {"status", "message"}
        assert result["status"] in TOOL_STATUSES
        assert isinstance(result["message"], str)
        assert str(run.user_id) not in result["message"].split()
        assert str(django_settings.WORKSPACE_ROOT) not in result["message"]
