"""A run's trusted identity as its tools receive it (`ToolRuntimeContext`), and the first
check of a tool's trust in it: every field present and the ids parsed (`parse_context`)."""

import uuid
from dataclasses import dataclass

from conversations.runs.errors import RunContextInvalid
from conversations.utils.ids import parse_uid


@dataclass(frozen=True)
class ToolRuntimeContext:
    """Trusted identity of one agent run, written by the Chat service, never by the model.

    Constructing one validates nothing: `lock_run_for_tool` checks it at call time.
    """

    uid: str
    thread_id: str
    run_id: str
    request_id: str
    worker_id: str


_CONTEXT_FIELDS = ("uid", "thread_id", "run_id", "request_id", "worker_id")


def parse_context(ctx: ToolRuntimeContext) -> tuple[int, uuid.UUID]:
    """The user id and run id of `ctx`, once every field is a non-empty string and both parse.

    The first check of every tool's trust in its context; `RunContextInvalid` says which field
    failed (its reason names no value).
    """
    for field in _CONTEXT_FIELDS:
        value = getattr(ctx, field, None)
        if not isinstance(value, str) or not value:
            raise RunContextInvalid(f"{field} is missing")
    uid = parse_uid(ctx.uid)
    if uid is None:
        raise RunContextInvalid("uid is malformed")
    try:
        run_uuid = uuid.UUID(ctx.run_id)
    except ValueError as exc:
        raise RunContextInvalid("run_id is malformed") from exc
    return uid, run_uuid
