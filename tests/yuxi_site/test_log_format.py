import logging

from yuxi_site.log_format import KeyValueFormatter


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
