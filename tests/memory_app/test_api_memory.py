"""The user's own MEMORY.md and switch over HTTP: etags, preconditions, sizes, broken files."""

import json
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client

from conversations.utils.string_utils import STORABLE_TEXT_REQUIREMENT
from memory_app.models import MemoryEvent
from memory_app.runtime import build_chatbot_graph
from memory_app.services import MEMORY_FILE_MAX_BYTES
from memory_app.tools import make_remember_memory_tool
from tests.factories import (
    ConversationFactory,
    RunningAgentRunFactory,
    UserConfigFactory,
    context_for,
)
from tests.memory_app.helpers import csrf_session, etag, sha, unsafe_headers

URL = "/api/memory/"


@pytest.fixture
def memory_file(user) -> Path:
    path = Path(settings.WORKSPACE_ROOT) / str(user.pk) / "agents" / "MEMORY.md"
    path.parent.mkdir(parents=True)
    return path


def put(client: Client, body: object, if_match: str | None):
    data = body if isinstance(body, str) else json.dumps(body)
    return client.put(URL, data=data, content_type="application/json", **unsafe_headers(if_match))


pytestmark = pytest.mark.django_db


def test_get_returns_text_size_switch_and_a_quoted_etag_header(session, memory_file):
    memory_file.write_bytes("I drink oolong tea 🍵\n".encode())
    response = session.get(URL)
    data = memory_file.read_bytes()
    assert response.status_code == 200
    assert response.json() == {
        "enable_memory": True,
        "text": "I drink oolong tea 🍵\n",
        "size_bytes": len(data),
        "etag": etag(data),
    }
    assert response["ETag"] == f'"{etag(data)}"'


def test_a_missing_file_reads_as_empty_with_the_etag_of_no_bytes(session):
    assert session.get(URL).json()["etag"] == etag(b"")


@pytest.mark.parametrize("quoted", [True, False])
def test_put_with_the_current_etag_replaces_the_file(session, memory_file, quoted):
    memory_file.write_bytes(b"old\n")
    tag = etag(b"old\n")
    response = put(session, {"text": "new fact\n"}, f'"{tag}"' if quoted else tag)
    assert response.status_code == 200
    assert response.json()["text"] == "new fact\n"
    new_tag = etag(b"new fact\n")
    assert response["ETag"] == f'"{new_tag}"'
    assert memory_file.read_bytes() == b"new fact\n"


@pytest.mark.parametrize(
    ("if_match", "status"),
    [
        (None, 428),
        ("", 428),
        ('"sha256:' + "0" * 64 + '"', 412),
        ("*", 412),
        ("W/{current}", 412),
    ],
)
def test_put_without_a_matching_strong_etag_is_refused_and_changes_nothing(
    session, memory_file, if_match, status
):
    memory_file.write_bytes(b"old\n")
    current = etag(b"old\n")
    header = None if if_match is None else if_match.replace("{current}", f'"{current}"')
    response = put(session, {"text": "new\n"}, header)
    assert (response.status_code, set(response.json())) == (status, {"error"})
    assert memory_file.read_bytes() == b"old\n"
    assert not MemoryEvent.objects.exists()


@pytest.mark.parametrize(
    "if_match",
    [
        "garbage",
        '"sha256:abc"',
        "sha256:" + "g" * 64,
        '"{current}',
        "{current}, {current}",
        "md5:0",
    ],
)
def test_a_malformed_if_match_is_called_malformed_not_stale(session, memory_file, if_match):
    memory_file.write_bytes(b"old\n")
    response = put(session, {"text": "new\n"}, if_match.replace("{current}", etag(b"old\n")))
    assert response.status_code == 412
    message = response.json()["error"]
    assert message.startswith("If-Match is malformed")
    assert "changed since you read it" not in message
    assert memory_file.read_bytes() == b"old\n"
    assert not MemoryEvent.objects.exists()


def test_a_stale_if_match_still_says_the_memory_changed(session, memory_file):
    memory_file.write_bytes(b"old\n")
    response = put(session, {"text": "new\n"}, etag(b"older\n"))
    assert response.status_code == 412
    assert "the memory changed since you read it" in response.json()["error"]


@pytest.mark.parametrize(
    ("text", "status"),
    [
        ("x" * (MEMORY_FILE_MAX_BYTES + 1), 413),
        ("a NUL \x00 here", 400),
        ("a lone surrogate \ud800", 400),
    ],
)
def test_put_of_text_that_cannot_be_stored_is_refused_and_changes_nothing(
    session, memory_file, text, status
):
    memory_file.write_bytes(b"old\n")
    response = put(session, {"text": text}, etag(b"old\n"))
    assert (response.status_code, set(response.json())) == (status, {"error"})
    if status == 400:
        assert response.json()["error"] == f"text must be {STORABLE_TEXT_REQUIREMENT}"
    assert memory_file.read_bytes() == b"old\n"
    assert not MemoryEvent.objects.exists()


@pytest.mark.parametrize(
    ("content", "problem"),
    [(b"x" * 200 * 1024, "over"), (b"caf\xe9 \xff\xfe\n", "not UTF-8")],
)
def test_a_file_the_agent_cannot_use_is_seen_as_409_with_its_etag_then_replaced(
    session, memory_file, content, problem
):
    memory_file.write_bytes(content)
    seen = session.get(URL)
    assert seen.status_code == 409
    body = seen.json()
    assert (body["etag"], body["size_bytes"]) == (etag(content), len(content))
    assert problem in body["error"]
    replaced = put(session, {"text": "repaired\n"}, body["etag"])
    assert replaced.status_code == 200
    assert memory_file.read_bytes() == b"repaired\n"


def test_a_broken_file_can_be_cleared_and_then_reads_as_empty(session, memory_file):
    memory_file.write_bytes(b"\xff" * 10)
    assert session.get(URL).status_code == 409
    response = session.delete(URL, **unsafe_headers())
    assert (response.status_code, response.content) == (204, b"")
    after = session.get(URL).json()
    assert (after["text"], after["size_bytes"]) == ("", 0)


def test_settings_patch_turns_memory_off_and_on(session):
    for enabled in (False, True):
        response = session.patch(
            "/api/settings/",
            data=json.dumps({"enable_memory": enabled}),
            content_type="application/json",
            **unsafe_headers(),
        )
        expected = {"enable_memory": enabled, "memory_write_approval": False}
        assert response.json() == expected
        assert session.get("/api/settings/").json() == expected


@pytest.mark.django_db(transaction=True)
def test_the_switch_set_through_the_api_is_what_the_next_run_and_the_next_tool_call_read(
    session, user
):
    run = RunningAgentRunFactory(conversation=ConversationFactory(user=user))
    ctx = context_for(run)
    tool = make_remember_memory_tool(ctx)  # built while memory was on
    assert build_chatbot_graph(ctx).tools

    def switch(enabled: bool) -> None:
        session.patch(
            "/api/settings/",
            data=json.dumps({"enable_memory": enabled}),
            content_type="application/json",
            **unsafe_headers(),
        )

    switch(False)
    assert build_chatbot_graph(ctx).tools == []
    assert json.loads(tool.invoke({"content": "a fact"}))["status"] == "denied"
    switch(True)
    assert [t.name for t in build_chatbot_graph(ctx).tools][0] == "remember_memory"
    assert json.loads(tool.invoke({"content": "a fact"}))["status"] == "added"


def test_a_symlinked_memory_file_is_refused_with_403_json_and_its_target_untouched(
    session, memory_file, tmp_path
):
    target = tmp_path / "elsewhere.txt"
    target.write_bytes(b"not yours\n")
    memory_file.symlink_to(target)
    response = session.get(URL)
    assert (response.status_code, set(response.json())) == (403, {"error"})
    assert str(tmp_path) not in response.json()["error"]
    replaced = put(session, {"text": "x\n"}, etag(b"not yours\n"))
    assert (replaced.status_code, set(replaced.json())) == (403, {"error"})
    assert target.read_bytes() == b"not yours\n"


# -- kept versions ---------------------------------------------------------------------------

VERSIONS_URL = "/api/memory/versions/"


def restore(client: Client, sha256: str, if_match: str | None):
    # No body is needed; the test client's default (an empty multipart form) is not JSON.
    return client.post(
        f"{VERSIONS_URL}{sha256}/restore/",
        content_type="application/json",
        **unsafe_headers(if_match),
    )


def test_a_cleared_memory_is_listed_read_and_restored_over_http(session, memory_file):
    original = "我喝乌龙茶 🍵\nI live in Lyon\n".encode()
    memory_file.write_bytes(b"")
    assert put(session, {"text": original.decode()}, etag(b"")).status_code == 200
    cleared = session.delete(URL, **unsafe_headers())
    assert cleared.status_code == 204 and memory_file.read_bytes() == b""

    listed = session.get(VERSIONS_URL)
    assert listed.status_code == 200
    [version] = listed.json()["versions"]
    assert set(version) == {
        "sha256",
        "size_bytes",
        "replaced_at",
        "kind",
        "replaced_by",
        "available",
    }
    assert (
        version["sha256"],
        version["size_bytes"],
        version["kind"],
        version["replaced_by"],
        version["available"],
    ) == (sha(original), len(original), "user_edited", "user_cleared", True)
    read = session.get(f"{VERSIONS_URL}{sha(original)}/")
    assert read.json() == {
        "sha256": sha(original),
        "text": original.decode(),
        "size_bytes": len(original),
    }

    restored = restore(session, sha(original), f'"{etag(b"")}"')
    assert restored.status_code == 200
    assert restored.json()["text"] == original.decode()
    assert restored["ETag"] == f'"{etag(original)}"'
    assert memory_file.read_bytes() == original
    assert MemoryEvent.objects.latest("id").kind == "user_restored"


@pytest.mark.parametrize(
    ("if_match", "status"),
    [(None, 428), ("", 428), ("stale", 412), ("*", 412), ("W/{current}", 412)],
)
def test_a_restore_without_a_matching_strong_etag_is_refused_and_changes_nothing(
    session, memory_file, if_match, status
):
    memory_file.write_bytes(b"A\n")
    assert put(session, {"text": "B\n"}, etag(b"A\n")).status_code == 200
    events = MemoryEvent.objects.count()
    current = etag(b"B\n")
    header = {None: None, "stale": etag(b"A\n")}.get(if_match, if_match)
    if header is not None:
        header = header.replace("{current}", f'"{current}"')
    response = restore(session, sha(b"A\n"), header)
    assert (response.status_code, set(response.json())) == (status, {"error"})
    assert memory_file.read_bytes() == b"B\n"
    assert MemoryEvent.objects.count() == events


def test_another_users_version_is_404_and_the_list_is_only_ones_own(session, memory_file):
    other = UserConfigFactory().user
    other_file = Path(settings.WORKSPACE_ROOT) / str(other.pk) / "agents" / "MEMORY.md"
    other_file.parent.mkdir(parents=True)
    other_file.write_bytes(b"other's secret\n")
    other_client = csrf_session(other)
    assert put(other_client, {"text": "B\n"}, etag(b"other's secret\n")).status_code == 200
    secret = sha(b"other's secret\n")
    assert other_client.get(f"{VERSIONS_URL}{secret}/").status_code == 200

    assert session.get(VERSIONS_URL).json() == {"versions": []}
    for response in (
        session.get(f"{VERSIONS_URL}{secret}/"),
        restore(session, secret, etag(b"")),
        session.get(f"{VERSIONS_URL}not-a-hash/"),
    ):
        assert response.json() == {"error": "no such version is kept"}
        assert response.status_code == 404
    assert not memory_file.exists()
    assert other_file.read_bytes() == b"B\n"


def test_delete_forgets_every_version_and_keeps_memory(session, memory_file, user):
    memory_file.write_bytes(b"A\n")
    for text in ("B\n", "C\n"):
        current = session.get(URL).json()["etag"]
        assert put(session, {"text": text}, current).status_code == 200
    forgotten = session.delete(VERSIONS_URL, **unsafe_headers())
    assert forgotten.status_code == 204
    versions = memory_file.parent / ".memory-versions"
    assert list(versions.iterdir()) == []
    assert memory_file.read_bytes() == b"C\n"
    assert session.get(VERSIONS_URL).json() == {"versions": []}
    gone = sha(b"A\n")
    assert session.get(f"{VERSIONS_URL}{gone}/").status_code == 404
    assert MemoryEvent.objects.latest("id").kind == "versions_forgotten"


def test_version_endpoints_need_a_session_and_csrf(user, memory_file):
    anonymous = Client(enforce_csrf_checks=True)
    assert anonymous.get(VERSIONS_URL).status_code == 401
    no_csrf = Client(enforce_csrf_checks=True)
    no_csrf.force_login(user)
    assert no_csrf.delete(VERSIONS_URL).status_code == 403
    restore_url = f"{VERSIONS_URL}{'0' * 64}/restore/"
    assert no_csrf.post(restore_url, content_type="application/json").status_code == 403


def test_a_symlinked_versions_directory_refuses_the_write_with_403_and_memory_stays(
    session, memory_file, tmp_path
):
    memory_file.write_bytes(b"A\n")
    (memory_file.parent / ".memory-versions").symlink_to(tmp_path, target_is_directory=True)
    response = put(session, {"text": "B\n"}, etag(b"A\n"))
    assert (response.status_code, set(response.json())) == (403, {"error"})
    assert memory_file.read_bytes() == b"A\n"
    assert session.get(VERSIONS_URL).status_code == 403


@pytest.mark.parametrize("prefix", ["", "sha256:"])
def test_a_version_url_takes_the_bare_hex_or_the_etag_form(session, memory_file, prefix):
    memory_file.write_bytes(b"")
    assert put(session, {"text": "A\n"}, etag(b"")).status_code == 200
    assert put(session, {"text": "B\n"}, etag(b"A\n")).status_code == 200
    name = prefix + sha(b"A\n")
    read = session.get(f"{VERSIONS_URL}{name}/")
    assert read.status_code == 200
    assert read.json() == {"sha256": sha(b"A\n"), "text": "A\n", "size_bytes": 2}
    current = etag(b"B\n")
    restored = restore(session, name, f'"{current}"')
    assert restored.status_code == 200 and memory_file.read_bytes() == b"A\n"
    assert session.get(f"{VERSIONS_URL}sha256:{'0' * 64}/").status_code == 404


# --- credentials in the user's own writes ---------------------------------------------------


def test_the_users_own_write_of_a_credential_is_kept_with_a_warning(session, memory_file):
    memory_file.write_bytes(b"")
    text = "I drink oolong tea\nwifi password: Tr0ub4dor&3\n\nVisa 4111 1111 1111 1111\n"
    response = put(session, {"text": text}, etag(b""))
    assert response.status_code == 200
    assert memory_file.read_bytes() == text.encode()
    assert response.json()["warnings"] == [
        {"line": 2, "kind": "password"},
        {"line": 4, "kind": "payment_card"},
    ]
    assert "Tr0ub4dor" not in json.dumps(response.json()["warnings"])


def test_a_write_without_credentials_has_no_warnings(session, memory_file):
    memory_file.write_bytes(b"")
    response = put(session, {"text": "Order 2024112588231 arrives Friday\n"}, etag(b""))
    assert response.json()["warnings"] == []


def test_a_restore_of_a_credential_is_kept_with_a_warning(session, memory_file):
    original = "tea\n身份证 11010519491231002X\n".encode()
    memory_file.write_bytes(b"")
    put(session, {"text": original.decode()}, etag(b""))
    session.delete(URL, **unsafe_headers())
    restored = restore(session, sha(original), etag(b""))
    assert restored.status_code == 200 and memory_file.read_bytes() == original
    assert restored.json()["warnings"] == [{"line": 2, "kind": "resident_id"}]


def test_the_users_own_write_keeps_invisible_characters_with_a_warning(session, memory_file):
    memory_file.write_bytes(b"")
    smuggled = "".join(chr(0xE0000 + ord(c)) for c in "obey")
    text = f"tea\ncoffee{smuggled}\nwifi pass\u200bword: Tr0ub4dor&3\nfamily 👩\u200d👧\n"
    response = put(session, {"text": text}, etag(b""))
    assert response.status_code == 200
    assert memory_file.read_bytes() == text.encode()
    assert response.json()["warnings"] == [
        {"line": 2, "kind": "invisible characters"},
        {"line": 3, "kind": "invisible characters"},
        {"line": 3, "kind": "password"},
    ]
