"""The JSON API (django-ninja): chat, the user's own memory, its kept versions and where each
of its lines came from, settings, threads, export; served at `api/` below wherever a host
includes `memory_app.urls`.

Thin adapters over the services and selectors. The user always comes from the request's
authentication (`memory_app.api_auth`: the host's `MEMORY_API_AUTH`, then the Django session
with CSRF checked for unsafe methods, after authentication, so an anonymous caller gets 401). Every
error, the framework's own included, has one shape: `{"error": "..."}`.
"""

import functools
import json
import logging
import re
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from datetime import datetime
from inspect import iscoroutinefunction
from typing import Any, Literal

from asgiref.sync import async_to_sync, sync_to_async
from django.contrib.auth.decorators import login_required
from django.core.exceptions import RequestDataTooBig
from django.core.handlers.asgi import ASGIRequest
from django.core.serializers.json import DjangoJSONEncoder
from django.db import DatabaseError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.urls import URLPattern, URLResolver
from django.utils.cache import add_never_cache_headers
from django.utils.translation import gettext, gettext_noop
from ninja import Field, Header, NinjaAPI, Query, Schema, Status
from ninja.errors import AuthenticationError, HttpError, ValidationError
from pydantic import ConfigDict, StrictBool, StrictStr

from conversations import services as thread_services
from conversations.selectors import pages as thread_pages
from conversations.selectors.approvals import list_user_pending_approvals
from conversations.utils.connections import release_connection
from memory_app import selectors, services
from memory_app.api_auth import CSRF_FAILED_MESSAGE, ConfiguredAuth
from memory_app.api_edge import API_NAMESPACE, API_UNAVAILABLE_MESSAGE, STREAM_CHAT_URL_NAME
from memory_app.credentials import CredentialKind
from memory_app.errors import MemoryLineNotFound, MemoryVersionNotFound
from memory_app.memory_file import INVISIBLE_CHARACTERS_WARNING
from memory_app.runtime import (
    INTERNAL_ERROR,
    ChatError,
    ChatEvent,
    astream_chat,
    chat,
    http_error,
    stream_chat,
)
from memory_app.workspace import WorkspaceError, WorkspacePathRefused

__all__ = ["API_UNAVAILABLE_MESSAGE", "CSRF_FAILED_MESSAGE", "api", "api_urls"]

logger = logging.getLogger(__name__)


api = NinjaAPI(
    title="Yuxi Memory API",
    version="1",
    description=(
        "Log in on the site's login page (Django's session cookie), then send the `csrftoken` "
        "cookie's value as `X-CSRFToken` on every POST, PUT, PATCH and DELETE. Every error is "
        '`{"error": "..."}`.'
    ),
    auth=ConfiguredAuth(),
    urls_namespace=API_NAMESPACE,
    # The documents describe a user's API: only a logged-in visitor reads them.
    docs_decorator=login_required,
)


class Error(Schema):
    error: str


class Body(Schema):
    """A request body: a field the operation does not take is refused (400), never ignored, so
    a client that thinks it sent `user_id` learns that it cannot choose whose data it touches."""

    model_config = ConfigDict(extra="forbid")


class DecisionIn(Body):
    decision: Literal["approve", "edit", "reject"]
    content: StrictStr | None = Field(None, description="the text to write instead (edit only)")
    replaces: StrictStr | None = Field(None, description="the text it corrects (edit only)")


class ChatIn(Body):
    message: StrictStr | None = Field(None, description="the user's message (or send `resume`)")
    thread_id: StrictStr | None = None
    resume: DecisionIn | None = Field(
        None, description="the decision about the memory write pending in `thread_id`"
    )


class ToolCallOutcome(Schema):
    name: str
    status: str


class ApprovalOut(Schema):
    tool_call_id: str
    content: Any = Field(description="the text the agent proposes to remember")
    replaces: Any = Field(description="the exact text it would correct, or null")


class ChatOut(Schema):
    thread_id: str
    run_id: str
    status: str = Field(description="`succeeded`, or `interrupted`: a memory write waits")
    reply: str
    tool_calls: list[ToolCallOutcome]
    approval: ApprovalOut | None = Field(description="the write waiting for your decision")


class MemoryOut(Schema):
    enable_memory: bool
    text: str
    size_bytes: int
    etag: str = Field(description="`sha256:` + the hex digest of MEMORY.md (sent as `If-Match`)")


class MemoryWarning(Schema):
    line: int = Field(description="1-based line of the text")
    kind: str = Field(
        description="what it looks like: "
        + ", ".join([*CredentialKind, INVISIBLE_CHARACTERS_WARNING])
    )


class MemoryWrittenOut(MemoryOut):
    warnings: list[MemoryWarning] = Field(
        description="credentials the text holds: kept as written (your own write is never "
        "refused for one), but memory is read into every prompt the agent gets"
    )


class MemoryProblem(Schema):
    error: str
    etag: str
    size_bytes: int


class MemoryIn(Body):
    text: StrictStr


class MemoryVersionOut(Schema):
    sha256: str = Field(description="the hex SHA-256 of that earlier MEMORY.md's bytes")
    size_bytes: int | None = Field(description="its size; null only if neither kept nor recorded")
    replaced_at: datetime = Field(description="when a change last replaced it")
    kind: str = Field(
        description="the change that produced these bytes: a ledger kind (agent_added, "
        "user_edited, ...), or initial when no recorded change did (the seed, a file older "
        "than the ledger)"
    )
    replaced_by: str = Field(
        description="the ledger kind of the change that last replaced it (agent_replaced, "
        "user_cleared, ...)"
    )
    available: bool = Field(description="whether its bytes are still kept (read, restore)")


class MemoryVersionsOut(Schema):
    versions: list[MemoryVersionOut]


class MemoryVersionTextOut(Schema):
    sha256: str
    text: str
    size_bytes: int


class LineChangeOut(Schema):
    kind: str = Field(
        description="the ledger kind of the change that brought the line (agent_added, "
        "agent_replaced, user_edited, user_restored)"
    )
    at: datetime = Field(description="when that change was made")
    by: Literal["agent", "you", "staff"] = Field(
        description="`agent` for the agent's write (decided by you or not), `you` for your own "
        "edit or restore, `staff` for another person's"
    )
    run_id: str | None = Field(description="the agent run that wrote it (null: not the agent's)")
    thread_id: str | None = Field(description="the thread of that run (null: not the agent's)")


class EarlierOut(Schema):
    kind: Literal["earlier"] = Field(
        description="no recorded change can be shown to have brought the line: it is older "
        "than the versions kept, the history was forgotten, or the file changed outside the app"
    )


class MemoryLineOut(Schema):
    number: int = Field(description="1-based, as in the file")
    text: str = Field(description="the line without its line ending")
    origin: LineChangeOut | EarlierOut


class MemoryLinesOut(Schema):
    etag: str = Field(description="the etag of the file these lines are from (send as `If-Match`)")
    lines: list[MemoryLineOut]


class SettingsOut(Schema):
    enable_memory: bool
    memory_write_approval: bool


class SettingsBody(Body):
    enable_memory: StrictBool | None = None
    memory_write_approval: StrictBool | None = Field(
        None, description="each memory write waits for your decision (`resume` on chat/)"
    )


class ThreadOut(Schema):
    thread_id: str
    title: str
    status: str
    source: str
    created_at: datetime
    updated_at: datetime


class PendingApprovalOut(ApprovalOut):
    run_id: str
    created_at: datetime


class ListedThreadOut(ThreadOut):
    pending_approval: PendingApprovalOut | None = Field(
        description="the memory write waiting for your decision in this thread"
    )


class ThreadPageOut(Schema):
    threads: list[ListedThreadOut]
    next_cursor: str | None = Field(description="pass as `cursor` for the next page; null: done")


class MessageOut(Schema):
    id: int
    role: str = Field(description="`user` or `assistant`")
    content: str
    created_at: datetime
    tool_calls: list[ToolCallOutcome] = Field(
        description="the tools the turn called before this reply (assistant messages only)"
    )


class MessagePageOut(Schema):
    messages: list[MessageOut] = Field(description="oldest first within the page")
    next_cursor: str | None = Field(
        description="pass as `cursor` for the older page before these; null: the thread's start"
    )


class ThreadStatusIn(Body):
    status: Literal["active", "archived", "deleted"] | None = None
    title: StrictStr | None = Field(None, description="a title of your choice")


class ExportToolCall(Schema):
    tool_call_id: str
    name: str
    input: Any
    output: str
    status: str
    error: str
    metadata: Any
    created_at: datetime


class ExportMessage(Schema):
    id: int
    role: str
    message_type: str
    content: str
    image_content: str | None
    attachments: Any
    feedback: Any
    metadata: Any
    created_at: datetime
    tool_calls: list[ExportToolCall]


class ExportThread(Schema):
    thread_id: str
    title: str
    status: str
    source: str
    parent_thread_id: str | None
    metadata: Any
    created_at: datetime
    updated_at: datetime
    messages: list[ExportMessage]


class ExportUser(Schema):
    id: int
    username: str = Field(description="the value of the user model's USERNAME_FIELD")
    username_field: str = Field(description="the user model's USERNAME_FIELD (e.g. email)")
    # Present where the user model has the field.
    email: str | None = None
    first_name: str | None = None
    last_name: str | None = None
    date_joined: datetime | None = None
    last_login: datetime | None = None


class ExportMemory(Schema):
    text: str | None
    etag: str
    size_bytes: int
    problem: str | None


class ExportEvent(Schema):
    kind: str
    actor: str | None
    run_id: str | None
    before_sha256: str
    after_sha256: str
    size_bytes: int
    created_at: datetime


class ExportVersion(Schema):
    sha256: str
    size_bytes: int
    text: str


class ExportPendingApproval(Schema):
    thread_id: str
    run_id: str
    tool_call_id: str
    content: Any
    replaces: Any
    created_at: datetime


class ApprovalsOut(Schema):
    approvals: list[ExportPendingApproval] = Field(description="oldest first, one per thread")


class ExportDocument(Schema):
    user: ExportUser
    enable_memory: bool
    memory: ExportMemory | None
    agents_md: str | None
    user_md: str | None
    memory_events: list[ExportEvent]
    memory_versions: list[ExportVersion]
    pending_approvals: list[ExportPendingApproval]
    threads: list[ExportThread]


# Refusals every authenticated operation can answer with.
_COMMON = {401: Error, 403: Error, 405: Error, 503: Error}
_UNSAFE = {**_COMMON, 400: Error, 413: Error}
# A write made only if the file is still the version `If-Match` names: 428 without it, 412
# when it names another.
_IF_MATCH = {412: Error, 428: Error, **_UNSAFE}

_MEMORY_PROBLEMS = {
    "too_large": (
        f"MEMORY.md is over {services.MEMORY_FILE_MAX_BYTES} bytes: replace it (PUT) or clear "
        "it (DELETE)"
    ),
    "invalid_encoding": "MEMORY.md is not UTF-8 text: replace it (PUT) or clear it (DELETE)",
}


# The shape of every etag `GET /api/memory/` sends (`selectors.memory_etag`).
_ETAG = re.compile(r"sha256:[0-9a-f]{64}")


def _error(status: int, message: str) -> JsonResponse:
    """The one error shape, its message in the request's language (`Accept-Language`, or the
    language the user chose on the page) where the catalogue has it, else as written."""
    return JsonResponse({"error": gettext(message)}, status=status)


def _quoted(etag: str) -> str:
    return f'"{etag}"'


def _refusal(exc: ChatError) -> Status:
    """The JSON answer to a turn's refusal (`CHAT_HTTP_ERRORS`); a refusal the table does not
    name is the server's fault and is raised on."""
    status, text = http_error(exc)
    if (status, text) == INTERNAL_ERROR:
        raise exc
    return Status(status, {"error": gettext(text)})


@api.post(
    "/chat/", response={200: ChatOut, 404: Error, 409: Error, 502: Error, **_UNSAFE}, tags=["chat"]
)
def post_chat(request: HttpRequest, body: ChatIn) -> Any:
    """One turn as the session's user; a new thread unless `thread_id` names one of theirs.
    With `resume` instead of `message`: your decision about the memory write pending in
    `thread_id` (409 when none is, or when an `approve`/`edit` cannot be carried out now: it
    stays pending; 400 for an `edit` without `content`)."""
    resume = body.resume.model_dump(exclude_unset=True) if body.resume is not None else None
    try:
        return chat(
            user_id=request.auth.pk, message=body.message, thread_id=body.thread_id, resume=resume
        )
    except ChatError as exc:
        return _refusal(exc)


@api.post(
    "/chat/stream/",
    url_name=STREAM_CHAT_URL_NAME,
    response={200: None, 404: Error, 409: Error, **_UNSAFE},
    tags=["chat"],
    openapi_extra={
        "responses": {200: {"description": "the turn as Server-Sent Events (text/event-stream)"}}
    },
)
async def post_chat_stream(request: HttpRequest, body: ChatIn) -> Any:
    """`/chat/` as Server-Sent Events while the turn happens: `run`, then `token`, `tool_call`
    and `tool_result` events, last one `done` (the turn, as `/chat/` answers it) or `error`
    (`error`, `status_code`). With `resume` instead of `message`, the decision's turn (409 when
    no write is pending). A refusal before the run starts is the usual JSON error; a client
    that disconnects cancels the turn.

    Under ASGI the events come from `astream_chat` on the server's loop; under WSGI (the
    development server) from `stream_chat`, since Django would buffer an async stream there."""
    turn = {
        "user_id": request.auth.pk,
        "message": body.message,
        "thread_id": body.thread_id,
        "resume": body.resume.model_dump(exclude_unset=True) if body.resume is not None else None,
    }
    # The session and the user are read; the request's own thread would otherwise keep its
    # pooled connection until the stream ends, one per open stream.
    await sync_to_async(release_connection)()
    try:
        if isinstance(request, ASGIRequest):
            events: Any = astream_chat(**turn)
            stream: Any = _ClosingStream(_sse_async(await anext(events), events))
        else:
            events = stream_chat(**turn)
            # Thread-sensitive: the WSGI request's own thread, which then reads the rest.
            stream = _sse(await sync_to_async(next)(events), events)
    except ChatError as exc:
        return _refusal(exc)
    response = StreamingHttpResponse(stream, content_type="text/event-stream")
    response["X-Accel-Buffering"] = "no"  # a proxy in front must not buffer the stream
    return response


def _sse_frame(event: ChatEvent) -> bytes:
    """One Server-Sent Event: its name, the event as one line of JSON, a blank line."""
    return f"event: {event['event']}\ndata: {json.dumps(event, ensure_ascii=False)}\n\n".encode()


def _sse(first: ChatEvent, events: Iterator[ChatEvent]) -> Iterator[bytes]:
    try:
        yield _sse_frame(first)
        for event in events:
            yield _sse_frame(event)
    finally:
        events.close()  # the client went away: the turn is cancelled


async def _sse_async(first: ChatEvent, events: AsyncIterator[ChatEvent]) -> AsyncIterator[bytes]:
    try:
        yield _sse_frame(first)
        async for event in events:
            yield _sse_frame(event)
    finally:
        await events.aclose()  # the client went away: the turn is cancelled


class _ClosingStream:
    """An async stream that Django closes with its response. Django's ASGI handler closes the
    response after sending it, a client's disconnect included, but it cannot close an async
    generator that was waiting to send when the client went away: that one would be left to
    the garbage collector, and its turn with it."""

    def __init__(self, frames: AsyncGenerator[bytes, None]) -> None:
        self.frames = frames

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self.frames

    def close(self) -> None:  # called on a thread by Django: the generator closes on its loop
        if self.frames.ag_frame is None:  # it ran to its end (or was closed): nothing to close
            return
        async_to_sync(self._aclose)()

    async def _aclose(self) -> None:
        await self.frames.aclose()


def _memory_state(request: HttpRequest, response: HttpResponse, memory: Any) -> Any:
    response["ETag"] = _quoted(memory.etag)
    if memory.problem is not None:
        return Status(
            409,
            {
                "error": _MEMORY_PROBLEMS.get(memory.problem, memory.problem),
                "etag": memory.etag,
                "size_bytes": memory.size_bytes,
            },
        )
    return Status(
        200,
        {
            "enable_memory": selectors.memory_enabled(request.auth.pk),
            "text": memory.text,
            "size_bytes": memory.size_bytes,
            "etag": memory.etag,
            "warnings": [{"line": w.line, "kind": w.kind} for w in memory.warnings],
        },
    )


@api.get("/memory/", response={200: MemoryOut, 409: MemoryProblem, **_COMMON}, tags=["memory"])
def get_memory(request: HttpRequest, response: HttpResponse) -> Any:
    """The whole MEMORY.md; a file the agent cannot use (too large, not UTF-8) is a 409."""
    return _memory_state(request, response, selectors.read_memory_file(user=request.auth))


def _expected_etag(if_match: str | None) -> str:
    """The etag an `If-Match` header names (quotes optional); a weak or `*` tag never matches,
    and a value that is no etag of this API at all is said to be malformed, not stale."""
    if if_match is None or not if_match.strip():
        raise HttpError(
            428, gettext_noop("If-Match is required: send the etag of the memory you edited")
        )
    value = if_match.strip()
    if value == "*" or value.startswith("W/"):
        raise HttpError(
            412, gettext_noop("If-Match must be the memory's exact etag (not * or a weak tag)")
        )
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1]
    if not _ETAG.fullmatch(value):
        raise HttpError(
            412, 'If-Match is malformed: send the etag GET returned ("sha256:" + 64 hex digits)'
        )
    return value


def _write_if_match(
    request: HttpRequest,
    response: HttpResponse,
    if_match: str | None,
    write: Callable[..., Any],
    **fields: Any,
) -> Any:
    """Make one of the user's own memory writes against the version `If-Match` names, and
    answer with the file it left (its new ETag)."""
    memory = write(
        user=request.auth, if_match=_expected_etag(if_match), actor=request.auth, **fields
    )
    return _memory_state(request, response, memory)


@api.put(
    "/memory/",
    response={200: MemoryWrittenOut, **_IF_MATCH},
    tags=["memory"],
)
def put_memory(
    request: HttpRequest,
    response: HttpResponse,
    body: MemoryIn,
    if_match: str | None = Header(None, alias="If-Match"),
) -> Any:
    """Replace the whole file, only if it is still the version `If-Match` names. A credential
    in the text is kept as written, and listed in `warnings`."""
    return _write_if_match(request, response, if_match, services.write_memory_file, text=body.text)


@api.delete("/memory/", response={204: None, **_UNSAFE}, tags=["memory"])
def delete_memory(request: HttpRequest) -> Any:
    """Empty the memory: the agent then sees none, and its next fact starts a new file."""
    services.clear_memory(user=request.auth, actor=request.auth)
    return Status(204, None)


@api.get("/memory/versions/", response={200: MemoryVersionsOut, **_COMMON}, tags=["memory"])
def get_memory_versions(request: HttpRequest) -> Any:
    """Earlier versions of your MEMORY.md, newest replacement first (never the empty file);
    empty again after you forget them."""
    return {"versions": selectors.list_memory_versions(user=request.auth)}


@api.delete("/memory/versions/", response={204: None, **_UNSAFE}, tags=["memory"])
def delete_memory_versions(request: HttpRequest) -> Any:
    """Forget every kept version for good (MEMORY.md itself stays as it is)."""
    services.forget_memory_versions(user=request.auth, actor=request.auth)
    return Status(204, None)


@api.get(
    "/memory/versions/{sha256}/",
    response={200: MemoryVersionTextOut, 404: Error, **_COMMON},
    tags=["memory"],
)
def get_memory_version(request: HttpRequest, sha256: str) -> Any:
    """One kept version's text, checked against its hash; `sha256` is the bare hex or the
    ETag form `sha256:<hex>`."""
    sha256 = selectors.version_sha256(sha256)
    data = selectors.read_memory_version(user=request.auth, sha256=sha256)
    return {"sha256": sha256, "text": data.decode("utf-8"), "size_bytes": len(data)}


@api.post(
    "/memory/versions/{sha256}/restore/",
    response={200: MemoryWrittenOut, 404: Error, **_IF_MATCH},
    tags=["memory"],
)
def post_memory_version_restore(
    request: HttpRequest,
    response: HttpResponse,
    sha256: str,
    if_match: str | None = Header(None, alias="If-Match"),
) -> Any:
    """Put a kept version back as MEMORY.md, only if the file is still the version `If-Match`
    names; the file it replaces is kept in turn. No body. `sha256` as for reading one.
    Credentials in the restored text are listed in `warnings`."""
    return _write_if_match(
        request, response, if_match, services.restore_memory_version, sha256=sha256
    )


@api.get(
    "/memory/lines/", response={200: MemoryLinesOut, 409: MemoryProblem, **_COMMON}, tags=["memory"]
)
def get_memory_lines(request: HttpRequest, response: HttpResponse) -> Any:
    """Each line of your MEMORY.md and where it came from: the change that brought it (who, when,
    and for the agent's writes the run and thread), or `earlier`. A file the agent cannot use
    (too large, not UTF-8) is a 409, as for GET /api/memory/."""
    found = selectors.memory_lines(user=request.auth)
    if found.memory.problem is not None:
        return _memory_state(request, response, found.memory)
    # Written as JSON directly: a 128 KiB file has thousands of lines, and validating each
    # against the schema would cost more than finding their origins. The lines share a few
    # origins, each serialized once by the same encoder the API uses.
    origins: dict[int, dict[str, Any]] = {}
    lines = []
    for line in found.lines:
        origin = origins.get(id(line.origin))
        if origin is None:
            origin = origins[id(line.origin)] = _origin_json(line.origin)
        lines.append({"number": line.number, "text": line.text, "origin": origin})
    shaped = JsonResponse({"etag": found.memory.etag, "lines": lines})
    shaped["ETag"] = _quoted(found.memory.etag)
    return shaped


def _origin_json(origin: selectors.Origin) -> dict[str, Any]:
    """An origin as `LineChangeOut` or `EarlierOut` shows it (`at` as the API writes times)."""
    if "at" not in origin:
        return {"kind": origin["kind"]}
    return {**origin, "at": DjangoJSONEncoder().default(origin["at"])}


@api.delete(
    "/memory/lines/{number}/",
    response={200: MemoryOut, 404: Error, **_IF_MATCH},
    tags=["memory"],
)
def delete_memory_line(
    request: HttpRequest,
    response: HttpResponse,
    number: int,
    if_match: str | None = Header(None, alias="If-Match"),
) -> Any:
    """Forget one line: remove line `number` of the file `If-Match` names (the etag the lines
    came with), as your own edit; the file it replaces is kept as a version. No body."""
    return _write_if_match(request, response, if_match, services.delete_memory_line, number=number)


@api.patch(
    "/memory/lines/{number}/",
    response={200: MemoryWrittenOut, 404: Error, **_IF_MATCH},
    tags=["memory"],
)
def patch_memory_line(
    request: HttpRequest,
    response: HttpResponse,
    number: int,
    body: MemoryIn,
    if_match: str | None = Header(None, alias="If-Match"),
) -> Any:
    """Edit one line in place: line `number` of the file `If-Match` names becomes `text` (one
    line, not empty), as your own edit; the file it replaces is kept as a version. A
    credential in the text is kept as written and listed in `warnings`."""
    return _write_if_match(
        request, response, if_match, services.edit_memory_line, number=number, text=body.text
    )


@api.get("/settings/", response={200: SettingsOut, **_COMMON}, tags=["settings"])
def get_settings(request: HttpRequest) -> Any:
    """The memory switch, and whether each memory write waits for your approval."""
    return selectors.memory_settings(user_id=request.auth.pk)


@api.patch("/settings/", response={200: SettingsOut, **_UNSAFE}, tags=["settings"])
def patch_settings(request: HttpRequest, body: SettingsBody) -> Any:
    """Turn memory, or approval of each memory write, on or off (either or both); the next
    run and the next tool call read the new values."""
    if body.enable_memory is None and body.memory_write_approval is None:
        return Status(400, {"error": "send enable_memory, memory_write_approval or both"})
    if body.enable_memory is not None:
        services.set_memory_enabled(
            user=request.auth, enabled=body.enable_memory, actor=request.auth
        )
    if body.memory_write_approval is not None:
        services.set_memory_write_approval(
            user=request.auth, enabled=body.memory_write_approval, actor=request.auth
        )
    return selectors.memory_settings(user_id=request.auth.pk)


@api.get("/threads/", response={200: ThreadPageOut, 400: Error, **_COMMON}, tags=["threads"])
def list_threads(
    request: HttpRequest,
    status: Literal["active", "archived", "deleted"] | None = None,
    cursor: str | None = None,
    limit: int = Query(20, ge=1, le=thread_pages.THREAD_PAGE_MAX),
) -> Any:
    """Your threads, most recently updated first: those history lookback sees (active ones), or
    those of `status`; follow `next_cursor` for more."""
    try:
        page = thread_pages.list_user_threads(
            user_id=request.auth.pk, status=status, cursor=cursor, limit=limit
        )
    except thread_pages.InvalidCursor:
        return Status(400, {"error": gettext(gettext_noop("cursor is not one this list returned"))})
    threads = []
    for thread in page.threads:
        approval = page.pending_approvals.get(thread.thread_id)
        threads.append(
            {
                **ThreadOut.model_validate(thread).model_dump(),
                "pending_approval": approval and approval.listed(),
            }
        )
    return {"threads": threads, "next_cursor": page.next_cursor}


@api.patch(
    "/threads/{thread_id}/", response={200: ThreadOut, 404: Error, **_UNSAFE}, tags=["threads"]
)
def patch_thread(request: HttpRequest, thread_id: str, body: ThreadStatusIn) -> Any:
    """Rename a thread (`title`), archive or delete it (history lookback stops seeing it) or
    make it active again (`status`); either or both."""
    if body.status is None and body.title is None:
        return Status(400, {"error": gettext(gettext_noop("send status, title or both"))})
    try:
        if body.title is not None:
            thread_services.rename_thread(
                user_id=request.auth.pk, thread_id=thread_id, title=body.title
            )
        if body.status is None:
            return thread_pages.get_listed_thread(user_id=request.auth.pk, thread_id=thread_id)
        return thread_services.set_thread_status(
            user_id=request.auth.pk, thread_id=thread_id, status=body.status
        )
    except thread_services.ThreadNotFound:
        return Status(404, {"error": gettext(gettext_noop("no such thread"))})
    except thread_services.ThreadTitleInvalid as exc:
        return Status(400, {"error": str(exc)})


@api.get(
    "/threads/{thread_id}/messages/",
    response={200: MessagePageOut, 400: Error, 404: Error, **_COMMON},
    tags=["threads"],
)
def list_thread_messages(
    request: HttpRequest,
    thread_id: str,
    cursor: str | None = None,
    limit: int = Query(50, ge=1, le=thread_pages.MESSAGE_PAGE_MAX),
) -> Any:
    """A thread's conversation, newest page first (each page oldest first); follow
    `next_cursor` towards its start. Any thread of your list, whatever its status."""
    thread = thread_pages.get_listed_thread(user_id=request.auth.pk, thread_id=thread_id)
    if thread is None:
        return Status(404, {"error": gettext(gettext_noop("no such thread"))})
    try:
        return thread_pages.list_thread_messages(
            user_id=request.auth.pk, conversation=thread, cursor=cursor, limit=limit
        )
    except thread_pages.InvalidCursor:
        return Status(400, {"error": gettext(gettext_noop("cursor is not one this list returned"))})


@api.get("/approvals/", response={200: ApprovalsOut, **_COMMON}, tags=["chat"])
def list_approvals(request: HttpRequest) -> Any:
    """The memory writes waiting for your decision, across your threads (decide with `resume`
    on `/chat/` or `/chat/stream/`)."""
    return {"approvals": list_user_pending_approvals(user_id=request.auth.pk)}


@api.get("/export/", response={200: ExportDocument, **_COMMON}, tags=["export"])
def get_export(request: HttpRequest) -> Any:
    """Everything stored about you, as one JSON attachment (read from one consistent snapshot)."""
    chunks = selectors.export_user_data(user=request.auth)
    if isinstance(request, ASGIRequest):  # else Django would hold the whole export in memory
        chunks = selectors.export_chunks_async(chunks)
    response = StreamingHttpResponse(chunks, content_type="application/json")
    response["Content-Disposition"] = (
        f'attachment; filename="yuxi-export-user-{request.auth.pk}.json"'
    )
    return response


def _describe(errors: list[dict[str, Any]]) -> str:
    parts = []
    for error in errors[:5]:
        where = ".".join(str(part) for part in error.get("loc", ()) if part != "body")
        parts.append(f"{where}: {error.get('msg', 'invalid')}" if where else error.get("msg", ""))
    return "invalid request: " + "; ".join(parts)


def _on_validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    return _error(400, _describe(exc.errors))


def _on_http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    if isinstance(exc.__cause__, RequestDataTooBig):
        return _error(413, gettext_noop("the body is too large"))
    if exc.status_code == 400 and exc.__cause__ is not None:
        return _error(400, gettext_noop("the body must be JSON"))
    return _error(exc.status_code, str(exc))


def _on_authentication_error(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    return _error(401, gettext_noop("authentication required"))


def _on_not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
    return _error(404, gettext_noop("not found"))


def _on_too_big(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    return _error(413, gettext_noop("the body is too large"))


def _on_database_error(request: HttpRequest, exc: DatabaseError) -> HttpResponse:
    logger.error("an API request failed on the database", exc_info=exc)
    return _error(503, API_UNAVAILABLE_MESSAGE)


def _on_memory_error(request: HttpRequest, exc: services.MemoryWriteError) -> HttpResponse:
    if isinstance(exc, services.MemoryConflict):  # a user's write conflicts only when stale
        return _error(
            412, gettext_noop("the memory changed since you read it: GET it again and retry")
        )
    if isinstance(exc, services.MemoryFileTooLarge):
        return _error(413, f"the memory may be at most {services.MEMORY_FILE_MAX_BYTES} bytes")
    if isinstance(exc, services.MemoryInputError):
        return _error(400, str(exc))
    if isinstance(exc, services.MemoryAccessDenied):
        return _error(403, gettext_noop("your memory cannot be changed now"))
    logger.warning("a memory request found the memory unavailable: %s", exc)
    return _error(503, API_UNAVAILABLE_MESSAGE)


def _on_version_not_found(request: HttpRequest, exc: MemoryVersionNotFound) -> HttpResponse:
    return _error(404, gettext_noop("no such version is kept"))


def _on_line_not_found(request: HttpRequest, exc: MemoryLineNotFound) -> HttpResponse:
    return _error(404, gettext_noop("the memory has no such line: GET /api/memory/lines/ again"))


def _on_workspace_error(request: HttpRequest, exc: WorkspaceError) -> HttpResponse:
    if isinstance(exc, WorkspacePathRefused):
        return _error(
            403, gettext_noop("your memory file is not a regular file: ask staff to repair it")
        )
    logger.warning("a memory request could not read the workspace: %s", exc)
    return _error(503, API_UNAVAILABLE_MESSAGE)


for _exception, _handler in (
    (ValidationError, _on_validation_error),
    (HttpError, _on_http_error),
    (AuthenticationError, _on_authentication_error),
    (Http404, _on_not_found),
    (RequestDataTooBig, _on_too_big),
    (DatabaseError, _on_database_error),
    (services.MemoryWriteError, _on_memory_error),
    (MemoryVersionNotFound, _on_version_not_found),
    (MemoryLineNotFound, _on_line_not_found),
    (WorkspaceError, _on_workspace_error),
):
    api.add_exception_handler(_exception, _handler)


def _json_not_allowed(view: Callable[..., Any]) -> Callable[..., Any]:
    """Ninja answers a method no operation takes with an empty 405: give it the error shape.
    An async view (a path whose operation is async) stays async. Every answer of the API is
    kept out of the browser's cache (`no-store`): nothing of a user's outlives their session,
    Back after logging out included."""

    def shaped(response: HttpResponse) -> HttpResponse:
        add_never_cache_headers(response)
        if response.status_code == 405 and not response.get("Content-Type", "").startswith(
            "application/json"
        ):
            allowed = response["Allow"]
            response = _error(405, f"use {allowed.replace(',', ' or')}")
            response["Allow"] = allowed
        return response

    @functools.wraps(view)  # keeps ninja's csrf_exempt marker
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        return shaped(view(request, *args, **kwargs))

    @functools.wraps(view)
    async def awrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        return shaped(await view(request, *args, **kwargs))

    return awrapped if iscoroutinefunction(view) else wrapped


def api_urls() -> tuple[list[URLPattern | URLResolver], str, str]:
    """`api.urls`, each view answering an unknown method in the API's error shape."""
    patterns, app_name, namespace = api.urls
    for pattern in patterns:
        if isinstance(pattern, URLPattern):
            pattern.callback = _json_not_allowed(pattern.callback)
    return patterns, app_name, namespace
