"""Where each memory line came from, and forgetting one line, over HTTP: GET /api/memory/lines/
and DELETE /api/memory/lines/<number>/ with real writes, real kept versions and the ledger."""

import hashlib
from pathlib import Path

import pytest
from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.test import Client

from memory_app.memory_file import MEMORY_FILE_MAX_BYTES
from memory_app.models import MemoryEvent
from tests.memory_app.helpers import etag, remember, unsafe_headers

URL = "/api/memory/lines/"

pytestmark = pytest.mark.django_db


def as_json(value: object) -> str:
    """How the API writes a datetime (Django's JSON encoder: milliseconds, `Z`)."""
    return DjangoJSONEncoder().default(value)


@pytest.fixture
def memory_file(user) -> Path:
    return Path(settings.WORKSPACE_ROOT) / str(user.pk) / "agents" / "MEMORY.md"


def forget(client: Client, number: object, if_match: str | None):
    return client.delete(f"{URL}{number}/", **unsafe_headers(if_match))


def put_text(client: Client, text: str) -> None:
    current = client.get("/api/memory/").json()["etag"]
    response = client.put(
        "/api/memory/",
        data={"text": text},
        content_type="application/json",
        **unsafe_headers(current),
    )
    assert response.status_code == 200


def test_get_lists_each_line_with_its_origin_and_the_files_etag(session, user, memory_file):
    memory_file.parent.mkdir(parents=True)
    memory_file.write_bytes(b"from before\n")
    run = remember(user, "drinks oolong tea")
    put_text(session, "from before\r\ndrinks oolong tea\r\n- has a cat\r\n")
    response = session.get(URL)
    assert response.status_code == 200
    data = memory_file.read_bytes()
    assert response["ETag"] == f'"{etag(data)}"'
    added = MemoryEvent.objects.get(kind="agent_added")
    edited = MemoryEvent.objects.get(kind="user_edited")
    assert response.json() == {
        "etag": etag(data),
        "lines": [
            {"number": 1, "text": "from before", "origin": {"kind": "earlier"}},
            {
                "number": 2,
                "text": "drinks oolong tea",
                "origin": {
                    "kind": "agent_added",
                    "at": as_json(added.created_at),
                    "by": "agent",
                    "run_id": str(run.run_id),
                    "thread_id": run.conversation.thread_id,
                },
            },
            {
                "number": 3,
                "text": "- has a cat",
                "origin": {
                    "kind": "user_edited",
                    "at": as_json(edited.created_at),
                    "by": "you",
                    "run_id": None,
                    "thread_id": None,
                },
            },
        ],
    }


def test_no_file_has_no_lines(session):
    assert session.get(URL).json() == {"etag": etag(b""), "lines": []}


@pytest.mark.parametrize("data", [b"caf\xe9\n", b"x\n" * 70000])
def test_a_file_the_agent_cannot_use_is_a_409_with_its_etag(session, memory_file, data):
    memory_file.parent.mkdir(parents=True)
    memory_file.write_bytes(data)
    response = session.get(URL)
    assert response.status_code == 409
    assert response["ETag"] == f'"{etag(data)}"'
    body = response.json()
    assert (body["etag"], body["size_bytes"]) == (etag(data), len(data))
    assert "replace it (PUT) or clear it (DELETE)" in body["error"]
    chinese = session.get(URL, HTTP_ACCEPT_LANGUAGE="zh-hans").json()["error"]
    assert "请替换它（PUT）或清空它（DELETE）" in chinese
    if len(data) > MEMORY_FILE_MAX_BYTES:
        assert f"超过了 {MEMORY_FILE_MAX_BYTES} 字节" in chinese


def test_delete_forgets_that_line_as_your_edit_and_keeps_the_file_it_replaced(
    session, user, memory_file
):
    remember(user, "drinks oolong tea")
    dog = remember(user, "has a dog")
    remember(user, "lives in Lisbon")
    before = memory_file.read_bytes()
    listed = session.get(URL).json()
    assert listed["lines"][1]["origin"]["run_id"] == str(dog.run_id)
    response = forget(session, 2, f'"{listed["etag"]}"')
    assert response.status_code == 200
    assert memory_file.read_bytes() == b"drinks oolong tea\nlives in Lisbon\n"
    assert response.json() == {
        "enable_memory": True,
        "text": "drinks oolong tea\nlives in Lisbon\n",
        "size_bytes": 34,
        "etag": etag(memory_file.read_bytes()),
    }
    assert response["ETag"] == f'"{etag(memory_file.read_bytes())}"'
    event = MemoryEvent.objects.latest("id")
    assert (event.kind, event.actor_id, event.run_id) == ("user_edited", user.pk, None)
    kept = memory_file.parent / ".memory-versions" / hashlib.sha256(before).hexdigest()
    assert kept.read_bytes() == before
    after = session.get(URL).json()["lines"]
    assert [(line["text"], line["origin"]["kind"]) for line in after] == [
        ("drinks oolong tea", "agent_added"),
        ("lives in Lisbon", "agent_added"),
    ]


@pytest.mark.parametrize(
    ("if_match", "status", "said"),
    [
        (None, 428, "If-Match is required"),
        ("*", 412, "exact etag"),
        ("W/stale", 412, "exact etag"),
        ("stale", 412, "malformed"),
        (etag(b"another file"), 412, "changed since you read it"),
    ],
)
def test_delete_without_the_current_strong_etag_is_refused_and_changes_nothing(
    session, user, memory_file, if_match, status, said
):
    remember(user, "drinks oolong tea")
    before, events = memory_file.read_bytes(), MemoryEvent.objects.count()
    response = forget(session, 1, if_match)
    assert response.status_code == status
    assert said in response.json()["error"]
    assert memory_file.read_bytes() == before
    assert MemoryEvent.objects.count() == events


@pytest.mark.parametrize("number", [0, 2, -1, 10**30])
def test_delete_of_a_line_the_file_does_not_have_is_404(session, user, memory_file, number):
    remember(user, "drinks oolong tea")
    before = memory_file.read_bytes()
    response = forget(session, number, etag(before))
    assert response.status_code == 404
    assert response.json() == {"error": "the memory has no such line: GET /api/memory/lines/ again"}
    assert memory_file.read_bytes() == before


def test_delete_with_a_number_that_is_not_one_is_400(session, user, memory_file):
    remember(user, "drinks oolong tea")
    response = forget(session, "first", etag(memory_file.read_bytes()))
    assert response.status_code == 400
    assert "number" in response.json()["error"]


def test_a_stale_etag_is_412_even_for_a_number_the_file_lacks(session, user, memory_file):
    remember(user, "drinks oolong tea")
    stale = etag(memory_file.read_bytes())
    remember(user, "has a cat")
    assert forget(session, 7, stale).status_code == 412


def edit(client: Client, number: object, text: object, if_match: str | None):
    return client.patch(
        f"{URL}{number}/",
        {"text": text},
        content_type="application/json",
        **unsafe_headers(if_match),
    )


def test_patch_edits_one_line_in_place_as_a_user_edit_keeping_the_file_before(session, memory_file):
    put_text(session, "# Memory\r\n- I live in Porto\r\n- tea\r\n")
    before = memory_file.read_bytes()
    response = edit(session, 2, "- I live in Lisbon", etag(before))
    assert response.status_code == 200
    assert memory_file.read_bytes() == b"# Memory\r\n- I live in Lisbon\r\n- tea\r\n"
    body = response.json()
    assert body["text"] == "# Memory\r\n- I live in Lisbon\r\n- tea\r\n"
    assert body["etag"] == etag(memory_file.read_bytes()) and body["warnings"] == []
    assert response["ETag"] == f'"{body["etag"]}"'
    assert MemoryEvent.objects.order_by("id").last().kind == "user_edited"
    versions = session.get("/api/memory/versions/").json()["versions"]
    assert versions[0]["sha256"] == hashlib.sha256(before).hexdigest()


def test_patch_names_a_credential_at_the_line_it_edited(session, memory_file):
    put_text(session, "a\nb\n")
    response = edit(session, 2, "wifi password: Tr0ub4dor&3", etag(memory_file.read_bytes()))
    assert response.status_code == 200
    assert [w["line"] for w in response.json()["warnings"]] == [2]


def test_patch_refuses_as_put_does_and_an_unknown_line_is_404(session, memory_file):
    put_text(session, "a\nb\n")
    current = etag(memory_file.read_bytes())
    assert edit(session, 1, "x", None).status_code == 428
    assert edit(session, 1, "x", etag(b"other")).status_code == 412
    assert edit(session, 3, "x", current).status_code == 404
    assert edit(session, 0, "x", current).status_code == 404
    assert edit(session, 1, "two\nlines", current).status_code == 400
    assert edit(session, 1, "  ", current).status_code == 400
    assert memory_file.read_bytes() == b"a\nb\n"
