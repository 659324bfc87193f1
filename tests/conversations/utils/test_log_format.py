import io
import logging
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from django.conf import settings

from conversations.utils.log_format import KeyValueFormatter, quiet_event_logs
from memory_app.models import MemoryEvent
from memory_app.selectors import read_memory_file
from memory_app.services import remember_memory, write_memory_file
from tests.factories import (
    ConversationFactory,
    RunningAgentRunFactory,
    UserConfigFactory,
    context_for,
)


def _line(message: str, *args: object, exc_info: object = None, **extra: object) -> str:
    record = logging.LogRecord("yuxi.memory", logging.INFO, __file__, 1, message, args, exc_info)
    record.__dict__.update(extra)
    return KeyValueFormatter().format(record)


def test_a_key_value_message_stays_as_fields_after_time_level_and_logger():
    line = _line("event=memory_write user=%s kind=%s", 7, "agent_added")
    assert line.startswith("ts=")
    assert line.endswith(
        " level=info logger=yuxi.memory event=memory_write user=7 kind=agent_added"
    )


def test_plain_messages_and_extra_fields_are_quoted_on_one_line():
    line = _line('lost "lease"\nof run %s', "r1", run_id="r1", reason="a b")
    assert "\n" not in line
    assert 'msg="lost \\"lease\\"\\nof run r1"' in line
    assert line.endswith('run_id=r1 reason="a b"')


def test_an_exception_is_one_quoted_field():
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        line = _line("event=run_failed run=%s", "r2", exc_info=sys.exc_info())
    assert "\n" not in line
    assert 'exc="Traceback' in line and "ValueError: boom" in line


def test_the_yuxi_loggers_log_info_lines_in_this_format(settings):
    assert settings.LOGGING["loggers"]["yuxi"]["level"] == "INFO"
    for name in ("yuxi.runs", "yuxi.memory"):
        logger = logging.getLogger(name)
        assert logger.isEnabledFor(logging.INFO)
    root = logging.getLogger()
    assert any(isinstance(h.formatter, KeyValueFormatter) for h in root.handlers)


def test_a_named_event_becomes_the_event_field_with_its_fields_at_the_top_level():
    line = _line("memory_changed user=%s kind=%s", 7, "agent_added")
    assert line.endswith(" logger=yuxi.memory event=memory_changed user=7 kind=agent_added")
    assert 'msg="run 5 failed: x=y"' in _line("run %s failed: x=y", 5)


def _fields(line: str) -> list[tuple[str, str]]:
    return [tuple(part.split("=", 1)) for part in line.split(" ")]


def _documented(event: str) -> str:
    """The example line docs/operations.md shows for `event`."""
    text = (Path(settings.BASE_DIR) / "docs" / "operations.md").read_text(encoding="utf-8")
    (line,) = [line.strip() for line in text.splitlines() if f" event={event} " in line]
    return line


def _memory_lines(write: Callable[[], object]) -> list[str]:
    """The `yuxi.memory` lines `write()` logs, in the site's format."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(KeyValueFormatter())
    logger = logging.getLogger("yuxi.memory")
    logger.addHandler(handler)
    try:
        write()
    finally:
        logger.removeHandler(handler)
    return stream.getvalue().splitlines()


@pytest.mark.django_db
def test_a_real_memory_write_logs_the_line_operations_md_shows(settings):
    user = UserConfigFactory(enable_memory=True).user
    run = RunningAgentRunFactory(conversation=ConversationFactory(user=user))
    (line,) = _memory_lines(lambda: remember_memory(context_for(run), "I drink oolong tea"))
    real, documented = _fields(line), _fields(_documented("memory_changed"))
    assert [key for key, _ in real] == [key for key, _ in documented]
    assert dict(real)["level"] == dict(documented)["level"] == "info"
    assert dict(real)["logger"] == dict(documented)["logger"] == "yuxi.memory"
    assert dict(real)["kind"] == dict(documented)["kind"] == "agent_added"
    assert dict(real)["user"] == str(user.pk)
    assert dict(real)["actor"] == dict(documented)["actor"] == "None"
    # The run by its UUID (what the API returns and run failures log), in the docs too.
    assert dict(real)["run"] == str(run.run_id) != str(run.pk)
    assert str(uuid.UUID(dict(documented)["run"])) == dict(documented)["run"]
    event = MemoryEvent.objects.get(user=user)
    assert (dict(real)["before"], dict(real)["after"]) == (event.before_sha256, event.after_sha256)


@pytest.mark.django_db
def test_a_users_own_write_logs_its_actor_and_no_run(settings):
    user = UserConfigFactory(enable_memory=True).user
    empty = read_memory_file(user=user).etag
    text = "I drink oolong tea\n"
    (line,) = _memory_lines(
        lambda: write_memory_file(user=user, text=text, if_match=empty, actor=user)
    )
    real = dict(_fields(line))
    assert real["kind"] == "user_edited" and real["user"] == str(user.pk)
    assert real["actor"] == str(user.pk) and real["run"] == "None"


@pytest.mark.parametrize(("verbosity", "shown"), [(1, False), (2, True)])
def test_a_terminal_command_leaves_the_info_event_lines_out_below_verbosity_2(verbosity, shown):
    logger = logging.getLogger("yuxi.memory")
    with quiet_event_logs(verbosity=verbosity):
        assert logger.isEnabledFor(logging.INFO) is shown
        assert logger.isEnabledFor(logging.WARNING)
    assert logger.isEnabledFor(logging.INFO)  # as before, once the command is done
