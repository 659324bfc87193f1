import io
import logging

import pytest
from django.core.management import CommandError, call_command

from conversations.models import Conversation, Message, ToolCall
from conversations.selectors.approvals import list_user_pending_approvals
from memory_app.selectors import read_memory_file
from tests.factories import ConversationFactory, UserConfigFactory, UserFactory
from tests.memory_app.helpers import remember
from tests.wire_model import Call, Reply

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


def test_with_no_language_chosen_the_demo_model_answers_in_the_script_of_the_message():
    thread = ConversationFactory(user=UserFactory(username="mei"))
    output = run_chat("--user", "mei", "--thread", thread.thread_id, "你好")
    assert "yuxi> 你说：你好" in output


def test_interactive_mode_keeps_one_thread_until_an_empty_line(monkeypatch):
    user = UserFactory(username="mei")
    output = run_chat("--user", "mei", stdin="first\nsecond\n\nignored\n", monkeypatch=monkeypatch)
    assert "yuxi> You said: first" in output and "yuxi> You said: second" in output
    assert "ignored" not in output
    thread = Conversation.objects.get(user=user)
    assert thread.messages.filter(role=Message.Role.USER).count() == 2


def test_unknown_user_and_unknown_thread_are_command_errors():
    UserFactory(username="mei")
    with pytest.raises(CommandError, match="no user with username"):
        run_chat("--user", "nobody", "hi")
    with pytest.raises(CommandError, match="no such thread"):
        run_chat("--user", "mei", "--thread", "thread-unknown", "hi")


# --- a write waiting for approval, decided on the command's own input ------------------------


def approving_user():
    user = UserConfigFactory(user__username="mei", memory_write_approval=True).user
    return user


def chat_deciding(stdin: str) -> str:
    out = io.StringIO()
    call_command(
        "chat",
        "--user",
        "mei",
        "remember that I drink oolong tea",
        stdin=io.StringIO(stdin),
        stdout=out,
    )
    return out.getvalue()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("answers", "memory"),
    [
        ("a\n", "I drink oolong tea\n"),
        ("approve\n", "I drink oolong tea\n"),
        ("e\nI drink green tea\n", "I drink green tea\n"),
    ],
)
def test_a_pending_write_is_approved_or_edited_at_the_prompt(answers, memory):
    user = approving_user()
    output = chat_deciding(answers)
    assert "The assistant wants to remember: I drink oolong tea" in output
    assert "approve, edit or reject? [a/e/r] " in output
    assert "[tool remember_memory: success]" in output
    assert read_memory_file(user=user).text == memory
    assert list_user_pending_approvals(user_id=user.pk) == []


@pytest.mark.django_db(transaction=True)
def test_an_unknown_answer_is_asked_again_and_reject_writes_nothing():
    user = approving_user()
    output = chat_deciding("y\nr\n")
    assert "answer a (approve), e (edit) or r (reject)" in output
    assert output.count("approve, edit or reject? [a/e/r] ") == 2
    assert read_memory_file(user=user).text == ""
    assert list_user_pending_approvals(user_id=user.pk) == []
    [call] = ToolCall.objects.filter(name="remember_memory")
    assert call.status != ToolCall.Status.SUCCESS


@pytest.mark.django_db(transaction=True)
def test_end_of_input_leaves_the_write_waiting():
    user = approving_user()
    output = chat_deciding("")
    assert "(the write is still waiting for your decision)" in output
    [pending] = list_user_pending_approvals(user_id=user.pk)
    assert pending.content == "I drink oolong tea"
    assert read_memory_file(user=user).text == ""


# A real model may propose to replace a line the file does not hold (SmolLM2 over llama.cpp
# does, often): the edit asks which line it replaces, so the user is not left with reject only.
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("answers", "memory", "asked"),
    [
        # approved as proposed: refused (no such line), asked again; then edited as a new line
        ("a\ne\nI drink green tea\n\n", "I drink black tea\nI drink green tea\n", 2),
        # edited to replace a line the file does hold
        ("e\nI drink green tea\nI drink black tea\n", "I drink green tea\n", 1),
    ],
)
def test_an_edit_says_which_line_a_proposal_replaces(wire_model, answers, memory, asked):
    config = UserConfigFactory(user__username="mei")
    remember(config.user, "I drink black tea")
    config.memory_write_approval = True
    config.save(update_fields=["memory_write_approval"])
    user = config.user
    arguments = '{"content": "I drink green tea", "replaces": "my old tea"}'
    wire_model.answer(Reply(calls=(Call("remember_memory", arguments),)))
    output = chat_deciding(answers)
    assert "  replacing: my old tea" in output
    assert output.count("approve, edit or reject? [a/e/r] ") == asked
    assert output.count("refused: the text to replace is not in the memory file") == asked - 1
    assert "[tool remember_memory: success]" in output
    assert read_memory_file(user=user).text == memory
    assert list_user_pending_approvals(user_id=user.pk) == []


@pytest.mark.django_db(transaction=True)
def test_end_of_input_at_the_replaced_line_leaves_the_write_waiting(wire_model):
    user = approving_user()
    arguments = '{"content": "I drink green tea", "replaces": "my old tea"}'
    wire_model.answer(Reply(calls=(Call("remember_memory", arguments),)))
    output = chat_deciding("e\nI drink green tea\n")
    assert "(the write is still waiting for your decision)" in output
    [pending] = list_user_pending_approvals(user_id=user.pk)
    assert pending.replaces == "my old tea"
    assert read_memory_file(user=user).text == ""
