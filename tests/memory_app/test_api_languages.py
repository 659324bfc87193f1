"""The API's refusals that carry a number or a field name, in the language of `Accept-Language`:
the memory's and the Chat service's errors (`LocalizedError`) answered in Simplified Chinese
with the number kept and a field name as the code word it is; in English as they always were;
and a tool result, which the model reads, in English whatever the language."""

import json

import pytest
from django.conf import settings
from django.test import Client
from django.utils import translation

from conversations.utils.string_utils import STORABLE_TEXT_REQUIREMENT
from memory_app.memory_file import MEMORY_FILE_MAX_BYTES
from memory_app.runtime.limits import CHAT_MESSAGE_MAX_BYTES
from memory_app.services.plan import MEMORY_ARG_MAX_BYTES
from memory_app.tools import make_remember_memory_tool
from tests.factories import UserConfigFactory, context_for, memory_run
from tests.memory_app.helpers import CSRF_TOKEN, csrf_session, etag, unsafe_headers

CHINESE = {"HTTP_ACCEPT_LANGUAGE": "zh-hans"}
ENGLISH = {"HTTP_ACCEPT_LANGUAGE": "en"}


def put_memory(client: Client, text: str, language: dict[str, str]):
    current = client.get("/api/memory/").json()["etag"]
    return client.put(
        "/api/memory/",
        data={"text": text},
        content_type="application/json",
        **unsafe_headers(current),
        **language,
    )


def edit_line(client: Client, number: int, text: str, if_match: str, language: dict[str, str]):
    return client.patch(
        f"/api/memory/lines/{number}/",
        data={"text": text},
        content_type="application/json",
        **unsafe_headers(if_match),
        **language,
    )


def chat(client: Client, body: dict, language: dict[str, str]):
    return client.post(
        "/api/chat/",
        data=json.dumps(body),
        content_type="application/json",
        HTTP_X_CSRFTOKEN=CSRF_TOKEN,
        **language,
    )


@pytest.fixture
def session() -> Client:
    return csrf_session(UserConfigFactory().user)


@pytest.mark.django_db
def test_an_over_long_memory_write_is_refused_in_chinese_with_its_limit(session):
    over = "x" * (MEMORY_FILE_MAX_BYTES + 1)
    chinese = put_memory(session, over, CHINESE)
    assert (chinese.status_code, chinese.json()) == (
        413,
        {"error": f"记忆最多只能有 {MEMORY_FILE_MAX_BYTES} 字节"},
    )
    english = put_memory(session, over, ENGLISH)
    assert english.json() == {"error": f"the memory may be at most {MEMORY_FILE_MAX_BYTES} bytes"}


@pytest.mark.django_db
def test_text_that_cannot_be_stored_is_refused_in_chinese_naming_the_field(session):
    chinese = put_memory(session, "a NUL \x00 here", CHINESE)
    assert (chinese.status_code, chinese.json()) == (
        400,
        {"error": "text 必须是有效的 Unicode 文本（不含 NUL 字符，不含孤立代理项）"},
    )
    english = put_memory(session, "a NUL \x00 here", ENGLISH)
    assert english.json() == {"error": f"text must be {STORABLE_TEXT_REQUIREMENT}"}


@pytest.mark.django_db
def test_a_line_edit_or_forget_of_a_missing_line_is_404_in_either_language(session):
    put_memory(session, "a\nb\n", ENGLISH)
    current = session.get("/api/memory/").json()["etag"]
    edited = edit_line(session, 3, "x", current, CHINESE)
    forgotten = session.delete("/api/memory/lines/7/", **unsafe_headers(current), **CHINESE)
    for response in (edited, forgotten):
        assert (response.status_code, response.json()) == (
            404,
            {"error": "记忆中没有这一行：请重新获取 /api/memory/lines/"},
        )
    english = edit_line(session, 3, "x", current, ENGLISH)
    assert english.json() == {"error": "the memory has no such line: GET /api/memory/lines/ again"}
    one_line = edit_line(session, 1, "two\nlines", current, CHINESE)
    assert (one_line.status_code, one_line.json()) == (400, {"error": "text 必须只有一行"})
    assert session.get("/api/memory/").json()["etag"] == etag(b"a\nb\n")


@pytest.mark.django_db
def test_an_over_long_chat_message_is_refused_in_chinese_with_its_limit(session):
    message = {"message": "x" * (CHAT_MESSAGE_MAX_BYTES + 1)}
    chinese = chat(session, message, CHINESE)
    assert (chinese.status_code, chinese.json()) == (
        400,
        {"error": f"message 超过了 {CHAT_MESSAGE_MAX_BYTES} 字节"},
    )
    english = chat(session, message, ENGLISH)
    assert english.json() == {"error": f"message is longer than {CHAT_MESSAGE_MAX_BYTES} bytes"}


@pytest.mark.django_db
def test_a_bad_decision_is_refused_in_chinese_with_the_number_in_it(session):
    too_long = {"decision": "edit", "content": "x" * (CHAT_MESSAGE_MAX_BYTES + 1)}
    chinese = chat(session, {"thread_id": "thread-x", "resume": too_long}, CHINESE)
    assert (chinese.status_code, chinese.json()) == (
        400,
        {"error": f"content 超过了 {CHAT_MESSAGE_MAX_BYTES} 字节"},
    )
    english = chat(session, {"thread_id": "thread-x", "resume": too_long}, ENGLISH)
    assert english.json() == {"error": f"content is longer than {CHAT_MESSAGE_MAX_BYTES} bytes"}
    approve = {"decision": "approve", "content": "x"}
    stray = chat(session, {"thread_id": "thread-x", "resume": approve}, CHINESE)
    assert stray.json() == {"error": "content 和 replaces 只能与 edit 决定一起发送"}


@pytest.mark.django_db(transaction=True)
def test_an_edited_decision_over_the_memory_limit_is_refused_in_chinese_and_stays_pending():
    user = UserConfigFactory(memory_write_approval=True).user
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    client.cookies[settings.CSRF_COOKIE_NAME] = CSRF_TOKEN
    asked = chat(client, {"message": "remember that I drink oolong tea"}, ENGLISH).json()
    assert asked["status"] == "interrupted"
    edit = {"decision": "edit", "content": "x" * (MEMORY_ARG_MAX_BYTES + 1)}
    chinese = chat(client, {"thread_id": asked["thread_id"], "resume": edit}, CHINESE)
    assert (chinese.status_code, chinese.json()) == (
        409,
        {"error": f"content 超过了 {MEMORY_ARG_MAX_BYTES} 字节"},
    )
    english = chat(client, {"thread_id": asked["thread_id"], "resume": edit}, ENGLISH)
    assert english.json() == {"error": f"content is over {MEMORY_ARG_MAX_BYTES} bytes"}
    [listed] = client.get("/api/threads/").json()["threads"]
    assert listed["pending_approval"]["tool_call_id"] == asked["approval"]["tool_call_id"]


@pytest.mark.django_db
def test_a_tool_result_stays_english_whatever_the_active_language():
    tool = make_remember_memory_tool(context_for(memory_run()))
    with translation.override("zh-hans"):
        result = json.loads(tool.invoke({"content": "my api key is AKIAZ3MSJV4WWZ2XJ5QN"}))
    assert result == {
        "status": "rejected",
        "message": "memory never stores credentials: this looks like an API key",
    }
