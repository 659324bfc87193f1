"""One log line per event, as `key=value` fields, so log collectors can parse them.

Emitters put their fields in the message (`logger.info("event=memory_write user=%s", uid)`, or
with the event's name first: `logger.info("memory_changed user=%s", uid)`) or in
`extra={...}`; either way the fields stand at the top level of the line, and the line stays
one line (newlines and quotes are escaped). Any other message is one quoted `msg="..."`.
"""

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

__all__ = [
    "KeyValueFormatter",
]

# The parent of the app's event loggers (`yuxi.runs`, `yuxi.memory`), at INFO in `LOGGING`.
EVENT_LOGGER = "yuxi"

# Attributes every LogRecord has; anything else on a record came from `extra=`.
_RECORD_ATTRIBUTES = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime"}
_BARE_VALUE = re.compile(r"[^\s\"=\\]+")
_FIELDS = re.compile(r"^[A-Za-z_][\w.]*=")
# A message that names its event, then gives its fields: `memory_changed user=7 kind=...`.
_NAMED_EVENT = re.compile(r"^([a-z][a-z0-9_]*) (?=[A-Za-z_][\w.]*=)")


def _fields(message: str) -> str:
    """The message as top-level fields: `key=value` text as it is, a leading event name as
    `event=<name>`, anything else quoted as `msg`."""
    if _FIELDS.match(message):
        return _one_line(message)
    if _NAMED_EVENT.match(message):
        return "event=" + _one_line(message)
    return f"msg={_value(message)}"


def _one_line(text: str) -> str:
    return text.replace("\n", "\\n").replace("\r", "\\r")


def _value(value: object) -> str:
    text = str(value)
    if _BARE_VALUE.fullmatch(text):
        return text
    return '"' + _one_line(text.replace("\\", "\\\\").replace('"', '\\"')) + '"'


class KeyValueFormatter(logging.Formatter):
    """`ts=... level=... logger=...` then the event's fields (`_fields` of its message), then
    `extra` fields, then `exc="..."`."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        timestamp = datetime.fromtimestamp(record.created, tz=UTC).isoformat(
            timespec="milliseconds"
        )
        parts = [
            f"ts={timestamp}",
            f"level={record.levelname.lower()}",
            f"logger={record.name}",
            _fields(message),
        ]
        parts += [
            f"{key}={_value(value)}"
            for key, value in vars(record).items()
            if key not in _RECORD_ATTRIBUTES and not key.startswith("_")
        ]
        if record.exc_info:
            parts.append(f"exc={_value(self.formatException(record.exc_info))}")
        return " ".join(parts)


@contextmanager
def quiet_event_logs(*, verbosity: int) -> Iterator[None]:
    """For a terminal command whose output is the answer: below `--verbosity 2` the `yuxi`
    event lines (INFO) are not printed among it while it runs; warnings and errors still are.
    The memory ledger records every change either way."""
    logger = logging.getLogger(EVENT_LOGGER)
    level = logger.level
    if verbosity < 2:
        logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)
