"""One log line per event, as `key=value` fields, so log collectors can parse them.

Emitters put their fields in the message (`logger.info("event=memory_write user=%s", uid)`) or
in `extra={...}`; either way the line stays one line (newlines and quotes are escaped).
"""

import logging
import re
from datetime import UTC, datetime

__all__ = ["KeyValueFormatter"]

# Attributes every LogRecord has; anything else on a record came from `extra=`.
_RECORD_ATTRIBUTES = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime"}
_BARE_VALUE = re.compile(r"[^\s\"=\\]+")
_FIELDS = re.compile(r"^[A-Za-z_][\w.]*=")


def _one_line(text: str) -> str:
    return text.replace("\n", "\\n").replace("\r", "\\r")


def _value(value: object) -> str:
    text = str(value)
    if _BARE_VALUE.fullmatch(text):
        return text
    return '"' + _one_line(text.replace("\\", "\\\\").replace('"', '\\"')) + '"'


class KeyValueFormatter(logging.Formatter):
    """`ts=... level=... logger=...` then the event's fields: its message when that is already
    `key=value` text, otherwise `msg="..."`; then `extra` fields; then `exc="..."`."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        timestamp = datetime.fromtimestamp(record.created, tz=UTC).isoformat(
            timespec="milliseconds"
        )
        parts = [
            f"ts={timestamp}",
            f"level={record.levelname.lower()}",
            f"logger={record.name}",
            _one_line(message) if _FIELDS.match(message) else f"msg={_value(message)}",
        ]
        parts += [
            f"{key}={_value(value)}"
            for key, value in vars(record).items()
            if key not in _RECORD_ATTRIBUTES and not key.startswith("_")
        ]
        if record.exc_info:
            parts.append(f"exc={_value(self.formatException(record.exc_info))}")
        return " ".join(parts)
