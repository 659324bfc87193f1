import json
import os

import pytest
from langchain_core.utils.function_calling import convert_to_openai_tool

from memory_app.errors import MemoryConflict
from memory_app.models import UserConfig
from memory_app.tools import make_remember_memory_tool
from memory_app.workspace import Workspace
from memory_app.workspace import writes as workspace_writes
from memory_app.workspace.paths import MEMORY_RELPATH
from tests.factories import context_for

pytestmark = pytest.mark.django_db


def _call(ctx, arguments) -> dict:
    result = json.loads(make_remember_memory_tool(ctx).invoke(arguments))
    assert set(result) == {"status", "message"}
    return result


def _assert_leaks_nothing(result: dict, run, settings) -> None:
    text = json.dumps(result, ensure_ascii=False)
    for secret in (str(settings.WORKSPACE_ROOT), "MEMORY.md", "agents/", run.worker_id,
                   str(run.run_id), run.request_id, "Traceback"):  # fmt: skip
        assert secret not in text


def test_the_schema_exposes_only_content_and_replaces(run):
    tool = make_remember_memory_tool(context_for(run))
    schema = convert_to_openai_tool(tool)["function"]["parameters"]
    assert tool.name == "remember_memory"
    assert set(tool.args) == {"content", "replaces"}
    assert schema["type"] == "object"
    assert set(schema["properties"]) == {"content", "replaces"}
    assert schema["required"] == ["content"]
    assert schema["additionalProperties"] is False
    json.dumps(schema)


def test_added_unchanged_and_replaced_come_back_as_statuses(settings, run):
    ctx = context_for(run)
    assert _call(ctx, {"content": "Likes jasmine tea."})["status"] == "added"
    assert _call(ctx, {"content": "Likes jasmine tea.", "replaces": None})["status"] == "unchanged"
    replaced = _call(ctx, {"content": "Likes oolong.", "replaces": "Likes jasmine tea."})
    assert replaced["status"] == "replaced"
    assert Workspace.for_user(run.user_id).read_bounded(MEMORY_RELPATH, 100) == (
        b"Likes oolong.\n",
        False,
    )


@pytest.mark.parametrize(
    "arguments",
    [
        {},
        {"content": ""},
        {"content": "x" * 4097},
        {"content": "a\x00b"},
        {"content": 5},
        {"content": "fact", "uid": "1"},
        {"content": "fact", "path": "/etc/passwd"},
        ["content"],
        {"content": None},
        {"content": True},
        {"content": ["fact"]},
        {"content": {"text": "fact"}},
        {"content": "a lone surrogate \ud800"},
        {"content": "fact", "replaces": 10**100},
        {"content": "fact", "replaces": "\udc00"},
        {"content": float("nan")},
        {"content": "fact", "replaces": float("inf")},
        {"content": "fact", "replaces": 10**5000},
    ],
)
def test_bad_arguments_are_rejected(settings, run, arguments):
    result = _call(context_for(run), arguments)
    assert result["status"] == "rejected"
    assert not (settings.WORKSPACE_ROOT / str(run.user_id)).exists()


def test_a_file_too_large_is_rejected(settings, run):
    Workspace.for_user(run.user_id).replace_authorized_file(MEMORY_RELPATH, b"x" * 131073)
    assert _call(context_for(run), {"content": "fact"})["status"] == "rejected"


@pytest.mark.parametrize(
    ("replaces", "seed"), [("absent", b"a\n"), ("a", b"a\na\n"), ("a", b"\xff")]
)
def test_conflicts_come_back_as_conflict(run, replaces, seed):
    Workspace.for_user(run.user_id).replace_authorized_file(MEMORY_RELPATH, seed)
    assert _call(context_for(run), {"content": "b", "replaces": replaces})["status"] == "conflict"


def test_a_forged_context_or_switched_off_memory_is_denied_without_leaking(settings, run):
    result = _call(context_for(run, worker_id="forged"), {"content": "fact"})
    assert result["status"] == "denied"
    _assert_leaks_nothing(result, run, settings)
    UserConfig.objects.filter(user=run.user).update(enable_memory=False)
    assert _call(context_for(run), {"content": "fact"})["status"] == "denied"
    assert not (settings.WORKSPACE_ROOT / str(run.user_id)).exists()


def test_a_file_system_failure_is_unavailable_without_leaking(settings, run, monkeypatch):
    def failing_fsync(fd):
        raise OSError(5, f"Input/output error at {settings.WORKSPACE_ROOT}")

    monkeypatch.setattr(workspace_writes.os, "fsync", failing_fsync)
    result = _call(context_for(run), {"content": "fact"})
    assert result["status"] == "unavailable"
    _assert_leaks_nothing(result, run, settings)
    # Only the file fence's (empty) lock file: no temp file is left.
    assert os.listdir(settings.WORKSPACE_ROOT / str(run.user_id) / "agents") == [".memory.lock"]


def test_an_unexpected_fault_is_unavailable_without_a_traceback(settings, run):
    class BrokenContext:
        @property
        def uid(self):
            raise RuntimeError(f"secret detail {settings.WORKSPACE_ROOT}")

    result = _call(BrokenContext(), {"content": "fact"})
    assert result["status"] == "unavailable"
    _assert_leaks_nothing(result, run, settings)
    assert "secret detail" not in result["message"]


@pytest.mark.parametrize(
    "reason",
    [
        MemoryConflict.NOT_FOUND,
        MemoryConflict.AMBIGUOUS,
        MemoryConflict.INVALID_ENCODING,
        MemoryConflict.STALE,
    ],
)
def test_every_conflict_reason_comes_back_as_a_conflict_result_never_a_raise(
    run, monkeypatch, reason
):
    def conflicting(ctx, **arguments):
        raise MemoryConflict(reason)

    monkeypatch.setattr("memory_app.tools.remember_tool_call", conflicting)
    result = _call(context_for(run), {"content": "fact"})
    assert result["status"] == "conflict" and result["message"]
    assert reason not in result["message"]  # a text for the model, not the reason's code
