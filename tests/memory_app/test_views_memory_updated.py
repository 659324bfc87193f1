"""A reopened conversation says, at each reply whose turn wrote to memory, "Memory updated"
with a link to the line it wrote (found by that line's origin run), as the page says it live:
real turns of the scripted model through the Chat service, then the messages fragment as the
page loads it. And every date the page shows names its time zone."""

import re

import pytest
from django.test import Client

from conversations.models import Conversation, Message
from memory_app.models import UserConfig
from memory_app.runtime import chat
from memory_app.selectors import memory_lines, read_memory_file
from memory_app.services import delete_memory_line
from tests.factories import MessageFactory, UserConfigFactory

pytestmark = pytest.mark.django_db(transaction=True)

REMEMBER = "remember that I drink oolong tea"
GONE = {
    "en": "Memory updated. The line it wrote is no longer in your memory.",
    "zh-hans": "记忆已更新。它写入的那一行已不在你的记忆中。",
}


@pytest.fixture
def user():
    return UserConfigFactory(enable_memory=True).user


@pytest.fixture
def client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def replies(client: Client, thread_id: str, language: str = "en") -> list[str]:
    """The articles of the thread's messages fragment in `language`, oldest first."""
    path = f"/page/threads/{thread_id}/messages/"
    html = client.get(path, HTTP_ACCEPT_LANGUAGE=language).content.decode()
    return re.findall(r"<article .*?</article>", html, re.S)


def line_of(user, run_id: str) -> int:
    """The number of the first line the memory panel marks as written by `run_id`."""
    return next(
        line.number for line in memory_lines(user=user).lines if line.origin.get("run_id") == run_id
    )


def test_a_reopened_thread_says_memory_updated_at_the_reply_that_wrote_linking_its_line(
    user, client
):
    chat(user_id=user.pk, message="remember that I drink green tea")
    wrote = chat(user_id=user.pk, message=REMEMBER)
    later = chat(user_id=user.pk, thread_id=wrote.thread_id, message="hello again")
    assert later.tool_calls == []
    articles = replies(client, wrote.thread_id)
    assert [a.count('class="memory-updated"') for a in articles] == [0, 1, 0, 0]
    number = line_of(user, wrote.run_id)
    assert number == 2  # the first thread's line comes first
    link = f'<a href="#memory-line-{number}" data-line-run="{wrote.run_id}">Show the line</a>'
    assert f"Memory updated. {link}" in articles[1]
    panel = client.get("/page/memory/").content.decode()
    assert f'id="memory-line-{number}" tabindex="-1" data-run-id="{wrote.run_id}"' in panel
    chinese = replies(client, wrote.thread_id, "zh-hans")
    assert "记忆已更新。 <a " in chinese[1] and ">查看这一行</a>" in chinese[1]


def test_an_approved_write_says_so_at_the_reply_of_the_decision_a_rejected_one_does_not(
    user, client
):
    UserConfig.objects.filter(user=user).update(memory_write_approval=True)
    asked = chat(user_id=user.pk, message=REMEMBER)
    assert asked.status == "interrupted"
    assert "memory-updated" not in "".join(replies(client, asked.thread_id))
    approved = chat(user_id=user.pk, thread_id=asked.thread_id, resume={"decision": "approve"})
    articles = replies(client, asked.thread_id)
    [notice] = [a for a in articles if "memory-updated" in a]
    assert f'data-line-run="{approved.run_id}"' in notice
    assert notice == articles[-1]  # the decision's reply
    declined = chat(user_id=user.pk, thread_id=asked.thread_id, message="remember that I swim")
    chat(user_id=user.pk, thread_id=declined.thread_id, resume={"decision": "reject"})
    assert "".join(replies(client, asked.thread_id)).count("memory-updated") == 1


def test_a_turn_that_changed_nothing_says_nothing(user, client):
    first = chat(user_id=user.pk, message=REMEMBER)
    again = chat(user_id=user.pk, thread_id=first.thread_id, message=REMEMBER)
    assert [call["status"] for call in again.tool_calls] == ["success"]  # already there
    articles = replies(client, first.thread_id)
    assert [a.count("memory-updated") for a in articles] == [0, 1, 0, 0]


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_a_write_whose_line_is_gone_says_memory_was_updated_without_a_link(user, client, language):
    wrote = chat(user_id=user.pk, message=REMEMBER)
    number = line_of(user, wrote.run_id)
    etag = read_memory_file(user=user).etag
    delete_memory_line(user=user, number=number, if_match=etag, actor=user)
    [_, reply] = replies(client, wrote.thread_id, language)
    assert f'<p class="memory-updated">{GONE[language]}</p>' in reply
    assert "data-line-run" not in reply and "<a " not in reply


def test_a_reply_on_an_earlier_page_keeps_its_notice(user, client):
    wrote = chat(user_id=user.pk, message=REMEMBER)
    thread = Conversation.objects.get(thread_id=wrote.thread_id)
    for n in range(40):
        MessageFactory(conversation=thread, role=Message.Role.USER, content=f"later {n}")
    html = client.get(f"/page/threads/{wrote.thread_id}/messages/").content.decode()
    assert "memory-updated" not in html
    older = re.search(r'hx-get="([^"]+cursor=[^"]+)"', html).group(1).replace("&amp;", "&")
    earlier = client.get(older).content.decode()
    assert f'data-line-run="{wrote.run_id}"' in earlier
