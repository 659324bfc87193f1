"""The end user's own page and the HTML fragments it loads (htmx): threads, a thread's
messages, the memory panel and a version's diff.

Thin adapters over the selectors, for the session's user only; every write goes through the
JSON API from the page's ES module, so one rule answers both. Fragments are reads: they render
what the selectors return, escaped by the templates.
"""

import difflib
from dataclasses import dataclass
from typing import Any

from django.conf import settings as django_settings
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import render, resolve_url
from django.urls import reverse
from django.utils import translation
from django.utils.dateparse import parse_datetime
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from conversations.models import Conversation, Message
from conversations.repository import search_thread_messages
from conversations.repository.arguments import HistoryQueryError
from conversations.repository.budgets import SEARCH_LIMIT_MAX
from conversations.selectors import pages as thread_pages
from conversations.selectors.approvals import (
    PendingApproval,
    list_user_pending_approvals,
    pending_approval,
)
from memory_app import selectors
from memory_app.api_edge import URL_NAMESPACE
from memory_app.conf import setting
from memory_app.errors import MemoryVersionNotFound
from memory_app.line_origins import LineOrigin
from memory_app.memory_file import MEMORY_FILE_MAX_BYTES
from memory_app.tool_names import MEMORY_TOOL_NAMES

# Threads one load of the page's thread list shows (a "more" button loads the next ones).
THREADS_SHOWN = 30
# Messages one load of a conversation shows (scrolling up loads the earlier ones).
MESSAGES_SHOWN = 30
# Conversation hits one search shows: the ranked history search's own ceiling.
SEARCH_HITS = SEARCH_LIMIT_MAX
# What a tool call is said to be doing while a reply streams (`running`), then its stored
# statuses: the page's module looks each (tool, state) up in words, never showing the name.
TOOL_STATES = ("running", "success", "pending", "declined", "error")
# Stands for any tool beside the memory tools in that lookup.
OTHER_TOOL = "*"


def lines_read_in_full(lines: list[LineOrigin]) -> int:
    """How many of the file's first lines (each with its line ending) lie wholly within the
    `MEMORY_PROMPT_MAX_BYTES` the agent reads; the panel marks the cut after them."""
    end = 0
    for index, line in enumerate(lines):
        end += len(line.text.encode("utf-8")) + 1
        if end > selectors.MEMORY_PROMPT_MAX_BYTES:
            return index
    return len(lines)


@require_GET
@never_cache
@login_required
def page(request: HttpRequest) -> HttpResponse:
    """The page: threads, the conversation and its composer, the memory panel, the switches."""
    root = reverse(f"{URL_NAMESPACE}:memory_page")
    return render(
        request,
        "memory_app/page.html",
        {
            "settings": selectors.memory_settings(user_id=request.user.pk),
            "api_root": f"{root}api/",
            "languages": page_languages(),
            # Where an ended session sends the user (and back here after they log in again).
            "login_url": resolve_url(django_settings.LOGIN_URL),
            # A token gone stale is taken again from this cookie (CSRF_COOKIE_NAME).
            "csrf_cookie_name": django_settings.CSRF_COOKIE_NAME,
            # No model configured: the scripted stand-in answers, and the page says so.
            "demo_model": not setting("LLM_BASE_URL"),
            "tool_words": [
                (name, state) for name in (*MEMORY_TOOL_NAMES, OTHER_TOOL) for state in TOOL_STATES
            ],
        },
    )


# The languages the page's texts are written in (English, and memory_app/locale's catalogue).
PAGE_LANGUAGES = ("en", "zh-hans")


def page_languages() -> list[dict[str, Any]]:
    """The host's `LANGUAGES` the page speaks, for its language switch: a host that never set
    `LANGUAGES` offers Django's hundred, of which the page has two."""
    offered = [code for code, _ in django_settings.LANGUAGES if code.lower() in PAGE_LANGUAGES]
    return [translation.get_language_info(code) for code in offered]


@require_GET
@never_cache
@login_required
def threads_fragment(request: HttpRequest) -> HttpResponse:
    """The user's threads, active or archived, most recently updated first."""
    archived = request.GET.get("status") == Conversation.Status.ARCHIVED
    status = Conversation.Status.ARCHIVED if archived else None
    try:
        listed = thread_pages.list_user_threads(
            user_id=request.user.pk,
            status=status,
            cursor=request.GET.get("cursor"),
            limit=THREADS_SHOWN,
        )
    except thread_pages.InvalidCursor:
        return HttpResponseBadRequest()
    return render(
        request,
        "memory_app/fragments/threads.html",
        {
            "page": listed,
            "rows": [(t, listed.pending_approvals.get(t.thread_id)) for t in listed.threads],
            "archived": archived,
            "appending": "cursor" in request.GET,
        },
    )


@dataclass(frozen=True)
class MemoryUpdate:
    """A turn that wrote to memory, as its reply says so: the run, and the number of the line
    it wrote, found by that line's origin run as the memory panel marks it (the first, if it
    wrote several); None once no line of the file comes from it (removed, or changed since)."""

    run_id: str
    line: int | None


def memory_updates(
    *, user, thread: Conversation, messages: list[thread_pages.ThreadMessage]
) -> dict[int, MemoryUpdate]:
    """By message id, the `MemoryUpdate` of each run on this page that wrote to memory, at its
    last reply on the page. The file's lines are walked only when some run here wrote."""
    wrote = selectors.memory_writing_replies(
        user_id=user.pk,
        conversation_id=thread.pk,
        message_ids=[m.id for m in messages if m.role == Message.Role.ASSISTANT],
    )
    if not wrote:
        return {}
    last_reply = {wrote[m.id]: m.id for m in messages if m.id in wrote}
    first_line: dict[str, int] = {}
    for line in selectors.memory_lines(user=user).lines:
        run_id = line.origin.get("run_id")
        if run_id in last_reply:
            first_line.setdefault(run_id, line.number)
    return {
        message_id: MemoryUpdate(run_id=run_id, line=first_line.get(run_id))
        for run_id, message_id in last_reply.items()
    }


@dataclass(frozen=True)
class MessagesView:
    """What a conversation fragment shows: a page of messages, each with what its turn wrote
    to memory, and on the newest page the write waiting for the user's decision."""

    thread: Conversation
    page: thread_pages.MessagePage
    approval: PendingApproval | None
    updates: dict[int, MemoryUpdate]

    @property
    def rows(self) -> list[tuple[thread_pages.ThreadMessage, MemoryUpdate | None]]:
        """Each message of the page with its turn's write to memory (None: it wrote none)."""
        return [(message, self.updates.get(message.id)) for message in self.page.messages]


@require_GET
@never_cache
@login_required
def messages_fragment(request: HttpRequest, thread_id: str) -> HttpResponse:
    """A page of one of the user's threads; without a cursor its newest messages and its
    pending approval, with one the earlier messages (prepended as the reader scrolls up). A
    reply whose turn wrote to memory says so, with a link to the line it wrote."""
    thread = thread_pages.get_listed_thread(user_id=request.user.pk, thread_id=thread_id)
    if thread is None:
        raise Http404("no such thread")
    cursor = request.GET.get("cursor")
    try:
        listed = thread_pages.list_thread_messages(
            user_id=request.user.pk, conversation=thread, cursor=cursor, limit=MESSAGES_SHOWN
        )
    except thread_pages.InvalidCursor:
        return HttpResponseBadRequest()
    approval = None
    if cursor is None:
        approval = pending_approval(conversation_id=thread.pk)
    updates = memory_updates(user=request.user, thread=thread, messages=listed.messages)
    view = MessagesView(thread=thread, page=listed, approval=approval, updates=updates)
    template = "older_messages.html" if cursor is not None else "messages.html"
    return render(request, f"memory_app/fragments/{template}", {"view": view})


@require_GET
@never_cache
@login_required
def memory_fragment(request: HttpRequest) -> HttpResponse:
    """The memory panel: MEMORY.md line by line with where each line came from, marked where
    the agent stops reading; its size against the cap; the kept versions."""
    found = selectors.memory_lines(user=request.user)
    read = lines_read_in_full(found.lines)
    context: dict[str, Any] = {
        "memory": found.memory,
        "enable_memory": selectors.memory_enabled(request.user.pk),
        "read": found.lines[:read],
        "unread": found.lines[read:],
        "max_bytes": MEMORY_FILE_MAX_BYTES,
        "prompt_bytes": selectors.MEMORY_PROMPT_MAX_BYTES,
        "versions": selectors.list_memory_versions(user=request.user),
    }
    return render(request, "memory_app/fragments/memory.html", context)


@require_GET
@never_cache
@login_required
def version_diff_fragment(request: HttpRequest, sha256: str) -> HttpResponse:
    """A kept version against the current file, line by line (what a restore would change)."""
    try:
        old = selectors.read_memory_version(user=request.user, sha256=sha256)
    except MemoryVersionNotFound as exc:
        raise Http404("no such version is kept") from exc
    current = selectors.read_memory_file(user=request.user).text or ""
    lines = difflib.ndiff(old.decode("utf-8").splitlines(), current.splitlines())
    rows = [(line[0], line[2:]) for line in lines if line[0] in " -+"]
    return render(request, "memory_app/fragments/diff.html", {"rows": rows, "sha256": sha256})


@require_GET
@never_cache
@login_required
def approvals_fragment(request: HttpRequest) -> HttpResponse:
    """The memory writes waiting for the user's decision, across their threads, in one place."""
    approvals = list_user_pending_approvals(user_id=request.user.pk)
    return render(request, "memory_app/fragments/approvals.html", {"approvals": approvals})


@require_GET
@never_cache
@login_required
def search_fragment(request: HttpRequest) -> HttpResponse:
    """The user's conversations matching `q`, ranked by the history search the agent's lookback
    uses (`search_thread_messages`): the same visible messages, budgets and ranking."""
    query = request.GET.get("q", "")
    try:
        found = search_thread_messages(request.user.pk, query, limit=SEARCH_HITS)
    except HistoryQueryError:
        return render(
            request, "memory_app/fragments/search.html", {"query": query, "refused": True}
        )
    # The search writes times as the tools do (ISO 8601 text); the page shows them as dates.
    hits = [{**hit, "at": parse_datetime(hit["created_at"])} for hit in found["results"]]
    context = {"query": query, "hits": hits, "refused": False}
    return render(request, "memory_app/fragments/search.html", context)
