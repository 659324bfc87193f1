import io
import logging

import pytest
from django.core.management import CommandError, call_command

from conversations.models import Conversation, Message
from tests.factories import ConversationFactory, UserConfigFactory, UserFactory

pytestmark = pytest.mark.django_db


def run_chat(*args: str, stdin: str | None = None, monkeypatch=None) -> str:
    out = io.StringIO()
    if stdin is not None:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    call_command("chat", *args, stdout=out)
    return out.getvalue()


# The remember tool runs on a LangGraph pool thread, which cannot see a test transaction.
@pytest.mark.django_db(transaction=True)
def test_one_message_starts_a_thread_for_the_named_user():
    user = UserConfigFactory(user__username="mei").user
    output = run_chat("--user", "mei", "remember that I drink oolong tea")
    thread = Conversation.objects.get(user=user)
    assert "[tool remember_memory: success]" in output
    assert f"(thread {thread.thread_id})" in output
    assert thread.messages.filter(role=Message.Role.USER).count() == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("verbosity", "logged"), [("1", 0), ("2", 1)])
def test_the_answer_comes_without_info_log_lines_unless_verbose(caplog, verbosity, logged):
    UserConfigFactory(user__username="mei", enable_memory=True)
    with caplog.at_level(logging.INFO):
        output = run_chat("--user", "mei", "--verbosity", verbosity, "remember that I drink tea")
    assert "[tool remember_memory: success]" in output
    events = [r for r in caplog.records if r.name.startswith("yuxi") and r.levelno == logging.INFO]
    assert [r.getMessage().split()[0] for r in events] == ["memory_changed"] * logged


def test_thread_option_continues_that_thread():
    thread = ConversationFactory(user=UserFactory(username="mei"))
    output = run_chat("--user", "mei", "--thread", thread.thread_id, "hello")
    assert "yuxi> You said: hello" in output
    assert thread.messages.count() == 2


def test_interactive_mode_keeps_one_thread_until_an_empty_line(monkeypatch):
    user = UserFactory(username="mei")
    output = run_chat("--user", "mei", stdin="first\nsecond\n\nignored\n", monkeypatch=monkeypatch)
    assert "yuxi> You said: first" in output and "yuxi> You said: second" in output
    assert "ignored" not in output
    thread = Conversation.objects.get(user=user)
    assert thread.messages.filter(role=Message.Role.USER).count() == 2


def test_unknown_user_and_unknown_thread_are_command_errors():
    UserFactory(username="mei")
    with pytest.raises(CommandError, match="no user named"):
        run_chat("--user", "nobody", "hi")
    with pytest.raises(CommandError, match="no such thread"):
        run_chat("--user", "mei", "--thread", "thread-unknown", "hi")
