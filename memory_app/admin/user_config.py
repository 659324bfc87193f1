"""The staff page of a user's memory config: the two switches, the writes waiting for the
user's decision, MEMORY.md as the agent reads it beside the ledger, where each line came from
and the kept versions; and the per-user pages (`memory_app.user_pages`) it serves.

Each panel reads through the same selectors the user's own API uses, and a workspace the
app refuses to read is reported in words, never with its path.
"""

import uuid

from django.contrib import admin
from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string
from django.urls import URLPattern, path
from django.utils.html import format_html
from django.utils.safestring import SafeString

from conversations.admin.columns import UserColumns, id_cell, name_cell, time_cell
from conversations.admin_base import (
    FIELD_EXCERPT_BYTES,
    ReadOnlyAdmin,
    UserFilter,
    change_link,
    changelist_link,
    render_excerpt,
    render_text,
    user_name_lookup,
)
from conversations.models import AgentRun, Conversation
from conversations.selectors.approvals import pending_approvals
from conversations.selectors.staff import first_related
from conversations.users import users_named
from conversations.utils.string_utils import truncate_utf8
from memory_app.admin.ledger import (
    TOGGLE_KINDS,
    ChangeFilter,
    event_actor,
    event_provenance,
    kind_label,
    ledger_url,
)
from memory_app.conf import setting
from memory_app.credentials import find_credentials
from memory_app.line_origins import EARLIER, LineOrigin
from memory_app.models import MemoryEvent, UserConfig
from memory_app.selectors import (
    MEMORY_PROMPT_MAX_BYTES,
    MemoryVersionNotFound,
    list_memory_versions,
    memory_lines,
    read_memory_for_prompt,
    read_memory_version,
    user_ledger,
)
from memory_app.user_pages import ERASE_URL_NAME, erase_page, find_user, user_page
from memory_app.versions import EMPTY_SHA256, FILE_CHANGING_KINDS, MemoryVersion
from memory_app.workspace import WorkspaceError, WorkspacePathRefused


@admin.register(UserConfig)
class UserConfigAdmin(UserColumns, ReadOnlyAdmin):
    list_display = ("user_column", "memory_column")
    list_filter = (UserFilter, "enable_memory")
    user_lookup = "user_id"
    search_fields = (user_name_lookup("user"),)
    search_help_text = "An exact user name (the user model's USERNAME_FIELD)."
    list_select_related = ("user",)
    ordering = (user_name_lookup("user"),)
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "user_link",
                    "memory_switch",
                    "approval_switch",
                    "user_records",
                )
            },
        ),
        (
            "Memory writes waiting for the user's decision",
            {
                "description": "Each is a run stopped before remember_memory (status "
                "interrupted); the user approves, edits or rejects it, or it is declined by a "
                "new message in its thread or once it is older than "
                "MEMORY_APPROVAL_TTL_SECONDS.",
                "fields": ("approvals",),
            },
        ),
        (
            "Why does the agent know this?",
            {
                "description": "First MEMORY.md exactly as the agent's next run reads it, "
                "then every recorded change to it, newest first, with the run, thread and "
                "remember_memory call that made it, where each line of the file came from, "
                "and the earlier versions kept for the user's undo.",
                "fields": (("memory_preview", "ledger"), "line_origins", "memory_versions"),
            },
        ),
    )
    help_texts = {
        "memory_switch": "The one switch (enable_memory): re-read at the start of every run "
        "and inside every memory tool call. No config row means off.",
        "approval_switch": "memory_write_approval: whether each memory write of the agent "
        "waits for the user's decision (a resume run carries it).",
        "memory_preview": "The same bounded, no-follow read the agent makes: at most "
        f"{MEMORY_PROMPT_MAX_BYTES} bytes, never through a symlink.",
        "ledger": "MemoryEvent rows: who changed the memory, with which run, and the file's "
        "SHA-256 before and after. They hold no memory text; each change links to the version "
        "it replaced while that version is kept.",
        "line_origins": "For each line of the whole file, the recorded change that brought "
        "it, found by walking the ledger and the kept versions from the newest change back: "
        "the same answer the user gets from GET /api/memory/lines/. 'earlier': no recorded "
        "change can be shown to have brought it (older than the kept versions, forgotten, or "
        "changed outside the app).",
        "memory_versions": "Earlier MEMORY.md files, kept in the user's workspace "
        "(agents/.memory-versions/) for undo: the newest MEMORY_VERSIONS_KEPT distinct ones. "
        "No agent reads them; the user restores or forgets them.",
    }

    def search_filter(self, term: str) -> Q:
        return Q(user_id__in=users_named(term))

    def get_urls(self) -> list[URLPattern]:
        """The per-user pages (`memory_app.user_pages`): by user id, by name, and erase."""

        def view(page: object) -> object:
            def serve(request: HttpRequest, **kwargs: str) -> HttpResponse:
                return page(self, request, **kwargs)

            return self.admin_site.admin_view(serve)

        return [
            path("user/", view(find_user), name="yuxi_user_find"),
            path("user/<str:user_id>/", view(user_page), name="yuxi_user"),
            path("user/<str:user_id>/erase/", view(erase_page), name=ERASE_URL_NAME),
            *super().get_urls(),
        ]

    @admin.display(description="user", ordering=user_name_lookup("user"))
    def user_column(self, obj: UserConfig) -> SafeString:
        """The name alone: as the list's first column it already links to this row's page."""
        return name_cell(obj.user.get_username())

    @admin.display(description="memory", ordering="enable_memory")
    def memory_column(self, obj: UserConfig) -> str:
        return "on" if obj.enable_memory else "off"

    @admin.display(description="memory switch")
    def memory_switch(self, obj: UserConfig) -> str:
        if obj.enable_memory:
            return "on: the agent's next run reads the memory below and gets the memory tools"
        return "off: the agent reads no memory and gets no memory tool; below is what it would see"

    @admin.display(description="approval of each write")
    def approval_switch(self, obj: UserConfig) -> str:
        if obj.memory_write_approval:
            return "on: each memory write of the agent waits for the user's decision"
        return "off: the agent writes memory directly when the user asks it to remember"

    @admin.display(description="history")
    def user_records(self, obj: UserConfig) -> SafeString:
        return format_html(
            "{} · {} · {}",
            changelist_link(Conversation, {"user": obj.user_id}, "threads"),
            changelist_link(AgentRun, {"user": obj.user_id}, "runs"),
            changelist_link(MemoryEvent, {"user": obj.user_id}, "all memory events"),
        )

    @admin.display(description="pending approvals")
    def approvals(self, obj: UserConfig) -> SafeString:
        listed = first_related(pending_approvals(user_id=obj.user_id).order_by("-created_at"))
        runs = dict(
            AgentRun.objects.filter(run_id__in=[row["run_id"] for row in listed.rows]).values_list(
                "run_id", "pk"
            )
        )
        rows = [
            {
                "run": change_link(AgentRun, runs.get(uuid.UUID(row["run_id"])), row["run_id"]),
                "thread": changelist_link(Conversation, {"q": row["thread_id"]}, row["thread_id"]),
                "since": time_cell(row["created_at"]),
                "content": _capped(row["content"]),
                "replaces": _capped(row["replaces"]),
            }
            for row in listed.rows
        ]
        return render_to_string(
            "admin/memory_app/userconfig/approvals.html",
            {"rows": rows, "has_more": listed.has_more},
        )

    @admin.display(description="MEMORY.md as the agent sees it")
    def memory_preview(self, obj: UserConfig) -> SafeString:
        """The agent's own bounded, no-follow read; a refusal is reported without the path."""
        context: dict[str, object] = {"max_bytes": MEMORY_PROMPT_MAX_BYTES}
        try:
            snapshot = read_memory_for_prompt(obj.user_id)
        except WorkspacePathRefused:
            context["refused"] = (
                "Refused: MEMORY.md or a directory above it is a symlink or not a regular "
                "file, so the agent's no-follow read gets nothing."
            )
        except WorkspaceError:
            context["refused"] = "Unavailable: the workspace could not be read."
        else:
            warnings = [
                f"line {finding.line}: looks like {finding.kind.label}"
                for finding in find_credentials(snapshot.text)
            ]
            context.update(snapshot=snapshot, text=render_text(snapshot.text), warnings=warnings)
        return render_to_string("admin/memory_app/userconfig/memory_preview.html", context)

    @admin.display(description="memory ledger")
    def ledger(self, obj: UserConfig) -> SafeString:
        page = user_ledger(user_id=obj.user_id)
        kept = {version.sha256 for version in self._versions(obj)[0] if version.available}
        rows = [
            {
                "entry": entry,
                "event_link": change_link(MemoryEvent, entry.event.pk, f"#{entry.event.pk}"),
                "created": time_cell(entry.event.created_at),
                "actor": event_actor(entry.event),
                "provenance": event_provenance(entry.event, entry.tool_calls),
                "version": _replaced_version(entry.event, kept),
                "toggle": entry.event.kind in TOGGLE_KINDS,
            }
            for entry in page.entries
        ]
        return render_to_string(
            "admin/memory_app/userconfig/ledger.html",
            {
                "page": page,
                "rows": rows,
                "all_url": ledger_url(f"user={obj.user_id}"),
                "changes_url": ledger_url(f"user={obj.user_id}&change={ChangeFilter.FILE}"),
                "toggles": sum(row["toggle"] for row in rows),
            },
        )

    @admin.display(description="where each line came from")
    def line_origins(self, obj: UserConfig) -> SafeString:
        """Each line of MEMORY.md (at most `LINE_ORIGINS_SHOWN`) and the change that brought
        it, from the selector the user's own page uses."""
        context: dict[str, object] = {"shown_max": LINE_ORIGINS_SHOWN}
        try:
            found = memory_lines(user=obj.user)
        except WorkspacePathRefused:
            context["refused"] = (
                "Refused: MEMORY.md, the versions directory or a directory above them is a "
                "symlink or not a regular file, so no line is traced."
            )
        except WorkspaceError:
            context["refused"] = "Unavailable: the workspace could not be read."
        else:
            shown = found.lines[:LINE_ORIGINS_SHOWN]
            context.update(
                problem=found.memory.problem,
                total=len(found.lines),
                rows=_origin_rows(shown),
                earlier=sum(line.origin["kind"] == EARLIER for line in found.lines),
            )
        return render_to_string("admin/memory_app/userconfig/line_origins.html", context)

    @staticmethod
    def _versions(obj: UserConfig) -> tuple[list[MemoryVersion], str | None]:
        """The user's versions and why none could be listed; read once per page (the ledger
        links into the versions panel)."""
        if not hasattr(obj, "_memory_versions"):
            found, refused = [], None
            try:
                found = list_memory_versions(user=obj.user)
            except WorkspacePathRefused:
                refused = _VERSIONS_REFUSED
            except WorkspaceError:
                refused = "Unavailable: the workspace could not be read."
            obj._memory_versions = (found, refused)
        return obj._memory_versions

    @admin.display(description="kept versions")
    def memory_versions(self, obj: UserConfig) -> SafeString:
        """The user's earlier versions, each kept one's text cut to an excerpt."""
        found, refused = self._versions(obj)
        rows = []
        for version in found:
            text = None
            if version.available:
                try:
                    data = read_memory_version(user=obj.user, sha256=version.sha256)
                except (MemoryVersionNotFound, WorkspaceError):
                    pass
                else:
                    text = render_excerpt(data.decode("utf-8"), len(data), FIELD_EXCERPT_BYTES)
            rows.append(
                {
                    "version": version,
                    "anchor": _version_anchor(version.sha256),
                    "replaced": time_cell(version.replaced_at),
                    "made_by": kind_label(version.kind),
                    "replaced_by": kind_label(version.replaced_by),
                    "text": text,
                }
            )
        context = {
            "refused": refused,
            "rows": rows,
            "available": sum(version.available for version in found),
            "excerpt_bytes": FIELD_EXCERPT_BYTES,
            "kept_max": setting("MEMORY_VERSIONS_KEPT"),
        }
        return render_to_string("admin/memory_app/userconfig/versions.html", context)


_VERSIONS_REFUSED = (
    "Refused: the versions directory or a directory above it is a symlink or not a directory, "
    "so no version is listed, and every change that would keep one is refused until staff "
    "repair the workspace."
)


# Most lines the config page traces, and most of each line's text it shows.
LINE_ORIGINS_SHOWN = 500
LINE_TEXT_SHOWN_BYTES = 240
# Who made a change, as staff read it.
_ORIGIN_BY = {"agent": "the agent", "you": "the user", "staff": "staff"}


def _origin_rows(lines: list[LineOrigin]) -> list[dict[str, object]]:
    """The rows of the lines table: the line, and its change's kind, time, author, run and
    thread as links (one query for every run shown)."""
    run_ids = {line.origin.get("run_id") for line in lines} - {None}
    runs = dict(
        AgentRun.objects.filter(run_id__in=run_ids).values_list("run_id", "pk") if run_ids else ()
    )
    rows = []
    for line in lines:
        origin = line.origin
        text, cut = truncate_utf8(line.text, LINE_TEXT_SHOWN_BYTES)
        row: dict[str, object] = {"line": line, "text": text, "cut": cut}
        if origin["kind"] != EARLIER:
            run_id = origin["run_id"]
            row.update(
                kind=MemoryEvent.Kind(origin["kind"]).label,
                at=time_cell(origin["at"]),
                by=_ORIGIN_BY[origin["by"]],
                run=run_id and change_link(AgentRun, runs.get(uuid.UUID(run_id)), id_cell(run_id)),
                thread=origin["thread_id"]
                and changelist_link(
                    Conversation, {"q": origin["thread_id"]}, id_cell(origin["thread_id"])
                ),
            )
        rows.append(row)
    return rows


def _version_anchor(sha256: str) -> str:
    return f"memory-version-{sha256}"


def _replaced_version(event: MemoryEvent, kept: set[str]) -> SafeString | str:
    """A link to the version `event` replaced while it is kept; why not, otherwise."""
    if event.kind not in FILE_CHANGING_KINDS:
        return "—"
    if event.before_sha256 in kept:
        return format_html('<a href="#{}">kept</a>', _version_anchor(event.before_sha256))
    return "empty file" if event.before_sha256 == EMPTY_SHA256 else "not kept"


# Most of a proposed memory text a pending approval's row shows.
APPROVAL_TEXT_SHOWN_BYTES = 512


def _capped(text: str | None) -> SafeString:
    size = None if text is None else len(text.encode("utf-8"))
    return render_excerpt(text, size, APPROVAL_TEXT_SHOWN_BYTES)
