"""Two app hosts whose clocks are 10 minutes apart chat in one thread: every timestamp comes
from the database, so each sees the whole thread in order. The hosts are real processes whose
clock libfaketime moves (`apt-get install faketime`)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from conversations.models import Conversation, Message
from conversations.repository import read_thread_messages
from tests.factories import UserFactory
from tests.servers import test_database_url

LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
SKEW_SECONDS = 600

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not LIBFAKETIME.exists(), reason=f"{LIBFAKETIME} missing (faketime)"),
]

# One chat turn in an app process; prints its clock, the database's, and the earlier dialogue
# the Chat service hands the model for this turn.
TURN = """
import json, sys, time
import django
django.setup()
from conversations.models import Message
from conversations.runs.leases import db_clock
from conversations.selectors.dialogue import recent_dialogue
from memory_app.runtime import chat

user_id, message, thread_id = int(sys.argv[1]), sys.argv[2], sys.argv[3] or None
turn = chat(user_id=user_id, message=message, thread_id=thread_id)
asked = Message.objects.get(conversation__thread_id=turn.thread_id, role="user", content=message)
print(json.dumps({
    "thread_id": turn.thread_id,
    "reply": turn.reply,
    "skew": db_clock().timestamp() - time.time(),
    "dialogue": [[t.role, t.content] for t in recent_dialogue(
        conversation=asked.conversation, before=asked)],
}))
"""


def _turn(*, user_id: int, message: str, thread_id: str, behind: bool) -> dict:
    env = {
        **os.environ,
        "DATABASE_URL": test_database_url(),
        "WORKSPACE_ROOT": str(settings.WORKSPACE_ROOT),
        "DJANGO_SETTINGS_MODULE": "yuxi_site.settings",
        "LLM_BASE_URL": "",
    }
    if behind:
        env.update(
            LD_PRELOAD=str(LIBFAKETIME),
            FAKETIME=f"-{SKEW_SECONDS}s",
            FAKETIME_DONT_FAKE_MONOTONIC="1",
        )
    done = subprocess.run(
        [sys.executable, "-c", TURN, str(user_id), message, thread_id],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_hosts_10_minutes_apart_see_the_whole_thread_in_the_databases_order():
    user = UserFactory()
    thread_id = ""
    written: list[list[str]] = []
    for i in range(4):
        behind = i % 2 == 0  # the host 10 minutes behind writes turns 1 and 3
        message = f"turn {i + 1} from the {'slow' if behind else 'true'} host"
        result = _turn(user_id=user.pk, message=message, thread_id=thread_id, behind=behind)
        thread_id = result["thread_id"]
        # The injected clock is really off (or not) in that process.
        assert abs(result["skew"] - (SKEW_SECONDS if behind else 0)) < 60
        # The model of this turn saw every earlier turn, in order.
        assert result["dialogue"] == written
        written += [["user", message], ["assistant", result["reply"]]]

    lookback = read_thread_messages(user.pk, thread_id, limit=20)
    assert [[m["role"], m["content"]] for m in lookback["messages"]] == written
    stored = list(
        Message.objects.filter(conversation__thread_id=thread_id, role__in=["user", "assistant"])
        .order_by("created_at", "id")
        .values_list("role", "content")
    )
    assert [list(row) for row in stored] == written
    conversation = Conversation.objects.get(thread_id=thread_id)
    assert conversation.updated_at >= max(
        Message.objects.filter(conversation=conversation).values_list("created_at", flat=True)
    )
