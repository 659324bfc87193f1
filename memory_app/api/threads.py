"""The user's conversations over HTTP: the list of threads (renamed, archived, deleted), a
thread's messages page by page, the memory writes waiting for a decision across threads, and
the export of everything stored about the user.

Reads of the conversations app's selectors and its few writes, each scoped to the
authenticated user; a thread of someone else's is a 404, never a 403, so it is not told apart
from one that does not exist.
"""

from typing import Any, Literal

from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, StreamingHttpResponse
from django.utils.translation import gettext, gettext_noop
from ninja import Query, Router, Status

from conversations import services as thread_services
from conversations.selectors import approvals as approval_selectors
from conversations.selectors import pages as thread_selectors
from memory_app import selectors
from memory_app.api.schemas import (
    COMMON,
    UNSAFE,
    ApprovalsOut,
    Error,
    ExportDocument,
    MessagePageOut,
    ThreadOut,
    ThreadPageOut,
    ThreadStatusIn,
)
from memory_app.user_data import export_chunks_async

router = Router()


@router.get("/threads/", response={200: ThreadPageOut, 400: Error, **COMMON}, tags=["threads"])
def list_threads(
    request: HttpRequest,
    status: Literal["active", "archived", "deleted"] | None = None,
    cursor: str | None = None,
    limit: int = Query(20, ge=1, le=thread_selectors.THREAD_PAGE_MAX),
) -> Any:
    """Your threads, most recently updated first: those history lookback sees (active ones), or
    those of `status`; follow `next_cursor` for more."""
    try:
        page = thread_selectors.list_user_threads(
            user_id=request.auth.pk, status=status, cursor=cursor, limit=limit
        )
    except thread_selectors.InvalidCursor:
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


@router.patch(
    "/threads/{thread_id}/", response={200: ThreadOut, 404: Error, **UNSAFE}, tags=["threads"]
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
            return thread_selectors.get_listed_thread(user_id=request.auth.pk, thread_id=thread_id)
        return thread_services.set_thread_status(
            user_id=request.auth.pk, thread_id=thread_id, status=body.status
        )
    except thread_services.ThreadNotFound:
        return Status(404, {"error": gettext(gettext_noop("no such thread"))})
    except thread_services.ThreadTitleInvalid as exc:
        return Status(400, {"error": str(exc)})


@router.get(
    "/threads/{thread_id}/messages/",
    response={200: MessagePageOut, 400: Error, 404: Error, **COMMON},
    tags=["threads"],
)
def list_thread_messages(
    request: HttpRequest,
    thread_id: str,
    cursor: str | None = None,
    limit: int = Query(50, ge=1, le=thread_selectors.MESSAGE_PAGE_MAX),
) -> Any:
    """A thread's conversation, newest page first (each page oldest first); follow
    `next_cursor` towards its start. Any thread of your list, whatever its status."""
    thread = thread_selectors.get_listed_thread(user_id=request.auth.pk, thread_id=thread_id)
    if thread is None:
        return Status(404, {"error": gettext(gettext_noop("no such thread"))})
    try:
        return thread_selectors.list_thread_messages(
            user_id=request.auth.pk, conversation=thread, cursor=cursor, limit=limit
        )
    except thread_selectors.InvalidCursor:
        return Status(400, {"error": gettext(gettext_noop("cursor is not one this list returned"))})


@router.get("/approvals/", response={200: ApprovalsOut, **COMMON}, tags=["chat"])
def list_approvals(request: HttpRequest) -> Any:
    """The memory writes waiting for your decision, across your threads (decide with `resume`
    on `/chat/` or `/chat/stream/`)."""
    return {"approvals": approval_selectors.list_user_pending_approvals(user_id=request.auth.pk)}


@router.get("/export/", response={200: ExportDocument, **COMMON}, tags=["export"])
def get_export(request: HttpRequest) -> Any:
    """Everything stored about you, as one JSON attachment (read from one consistent snapshot)."""
    chunks = selectors.export_user_data(user=request.auth)
    if isinstance(request, ASGIRequest):  # else Django would hold the whole export in memory
        chunks = export_chunks_async(chunks)
    response = StreamingHttpResponse(chunks, content_type="application/json")
    response["Content-Disposition"] = (
        f'attachment; filename="yuxi-export-user-{request.auth.pk}.json"'
    )
    return response
