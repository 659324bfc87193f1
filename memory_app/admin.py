"""Read-only staff pages for the memory switch and the memory ledger, and what the memory app
adds to the run and user pages: whether a run may write memory now (the memory app owns that
rule, so the conversations app never imports it), the run's memory events, and a user's links.
"""

import uuid

from django.contrib import admin
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string
from django.urls import URLPattern, path
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from conversations.admin import (
    AgentRunAdmin,
    ThreadFilter,
    UserColumns,
    id_cell,
    name_cell,
    related_list,
    time_cell,
)
from conversations.admin_base import (
    FIELD_EXCERPT_BYTES,
    ReadOnlyAdmin,
    UserFilter,
    change_link,
    changelist_link,
    changelist_url,
    format_timestamp,
    render_excerpt,
    render_text,
    user_link,
    user_name_lookup,
    users_named,
)
from conversations.models import AgentRun, Conversation, ToolCall
from conversations.selectors.approvals import pending_approvals
from conversations.selectors.staff import first_related
from conversations.utils.string_utils import truncate_utf8
from memory_app.conf import setting
from memory_app.credentials import find_credentials
from memory_app.models import MemoryEvent, MemoryEventKind, UserConfig
from memory_app.selectors import (
    EARLIER,
    MEMORY_PROMPT_MAX_BYTES,
    LineOrigin,
    MemoryVersion,
    MemoryVersionNotFound,
    ledger_events,
    list_memory_versions,
    memory_lines,
    memory_write_refusal,
    read_memory_for_prompt,
    read_memory_version,
    remember_calls_for,
    user_ledger,
)
from memory_app.user_pages import ERASE_URL_NAME, erase_page, find_user, user_page
from memory_app.versions import EMPTY_SHA256, FILE_CHANGING_KINDS, INITIAL_VERSION_KIND
from memory_app.workspace import WorkspaceError, WorkspacePathRefused

__all__ = ["AgentRunWithMemoryAdmin", "MemoryEventAdmin", "UserConfigAdmin"]


def _changelist_url(model: type, query: str) -> str:
    return f"{changelist_url(model)}?{query}"


def _provenance(event: MemoryEvent, calls: list[ToolCall]) -> SafeString | str:
    """The run, thread and remember_memory call(s) behind an event, as links."""
    if event.run is None:
        return "— (not an agent run)" if event.actor_id else "— (its run is gone)"
    parts = [
        change_link(AgentRun, event.run.pk, f"run {event.run.run_id}"),
        change_link(Conversation, event.run.conversation_id, event.run.conversation.thread_id),
    ]
    if len(calls) == 1:
        parts.append(change_link(ToolCall, calls[0].pk, f"{calls[0].name} call"))
    elif calls:
        parts.append(
            changelist_link(
                ToolCall,
                {"thread": event.run.conversation_id, "q": calls[0].name},
                f"one of {len(calls)} {calls[0].name} calls of this run",
            )
        )
    return format_html_join(" · ", "{}", ((part,) for part in parts))


def _actor(event: MemoryEvent) -> SafeString | str:
    if event.actor_id is None:
        return "the agent" if event.run_id else "—"
    return user_link(event.actor_id, name_cell(event.actor.get_username()))


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
                "actor": _actor(entry.event),
                "provenance": _provenance(entry.event, entry.tool_calls),
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
                "all_url": _changelist_url(MemoryEvent, f"user={obj.user_id}"),
                "changes_url": _changelist_url(
                    MemoryEvent, f"user={obj.user_id}&change={ChangeFilter.FILE}"
                ),
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


# The ledger kinds that only flip a setting (the memory switch, approval of each write).
TOGGLE_KINDS = (
    MemoryEventKind.SWITCH_ON,
    MemoryEventKind.SWITCH_OFF,
    MemoryEventKind.APPROVAL_ON,
    MemoryEventKind.APPROVAL_OFF,
)


def kind_label(kind: str) -> str:
    """A ledger kind (or a version's `initial`) in words, as staff read it."""
    if kind == INITIAL_VERSION_KIND:
        return "Initial (no recorded change wrote it)"
    try:
        return str(MemoryEventKind(kind).label)
    except ValueError:
        return kind


class ChangeFilter(admin.SimpleListFilter):
    """Memory events by what they changed: the file, or only a setting."""

    title = "what changed"
    parameter_name = "change"
    FILE = "file"
    SETTING = "setting"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list:
        return [
            (self.FILE, "the file (switch and approval toggles hidden)"),
            (self.SETTING, "switch and approval toggles only"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() == self.FILE:
            return queryset.exclude(kind__in=TOGGLE_KINDS)
        if self.value() == self.SETTING:
            return queryset.filter(kind__in=TOGGLE_KINDS)
        return queryset


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


def _is_uuid(term: str) -> bool:
    try:
        uuid.UUID(term)
    except ValueError:
        return False
    return True


@admin.register(MemoryEvent)
class MemoryEventAdmin(UserColumns, ReadOnlyAdmin):
    list_display = (
        "event_column",
        "created",
        "user_column",
        "kind_column",
        "actor_column",
        "run_column",
        "thread_column",
        "size_bytes",
        "hashes",
    )
    list_filter = (UserFilter, ThreadFilter, ChangeFilter, "kind")
    user_lookup = "user_id"
    thread_lookup = "run__conversation_id"
    search_fields = (user_name_lookup("user"), "run__run_id")
    search_help_text = "An exact user name or run id."
    ordering = ("-id",)
    fields = (
        "id",
        "user_link",
        "kind",
        "actor_link",
        "provenance",
        "before_sha256",
        "after_sha256",
        "size_bytes",
        "created",
    )
    help_texts = {
        "kind": "agent_added / agent_replaced: the agent's remember_memory; user_edited / "
        "user_cleared: the user or staff through the memory API; switch_on / switch_off: the "
        "memory switch.",
        "actor_link": "Who made the change; empty when the agent wrote.",
        "provenance": "The agent run behind the change, its thread, and its remember_memory "
        "tool call when it can be told apart.",
        "before_sha256": "SHA-256 of MEMORY.md before the change; it equals the previous "
        "event's after hash unless the file changed without a recorded event.",
        "after_sha256": "SHA-256 of MEMORY.md after the change (switch events: the file as "
        "it was).",
        "size_bytes": "Size of MEMORY.md after the change, in bytes.",
    }

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return ledger_events()

    def search_filter(self, term: str) -> Q:
        runs = AgentRun.objects.filter(run_id=term) if _is_uuid(term) else AgentRun.objects.none()
        return Q(user_id__in=users_named(term)) | Q(run_id__in=list(runs.values_list("pk")))

    @admin.display(description="event", ordering="id")
    def event_column(self, obj: MemoryEvent) -> str:
        return f"#{obj.pk}"

    @admin.display(description="change", ordering="kind")
    def kind_column(self, obj: MemoryEvent) -> str:
        return kind_label(obj.kind)

    @admin.display(description="when", ordering="id")
    def created(self, obj: MemoryEvent) -> SafeString:
        return time_cell(obj.created_at)

    @admin.display(description="by")
    def actor_column(self, obj: MemoryEvent) -> SafeString | str:
        return _actor(obj)

    @admin.display(description="run")
    def run_column(self, obj: MemoryEvent) -> SafeString | str:
        if obj.run is None:
            return "—"
        return change_link(AgentRun, obj.run.pk, id_cell(obj.run.run_id))

    @admin.display(description="thread")
    def thread_column(self, obj: MemoryEvent) -> SafeString | str:
        if obj.run is None:
            return "—"
        return change_link(
            Conversation, obj.run.conversation_id, id_cell(obj.run.conversation.thread_id)
        )

    @admin.display(description="hash before → after")
    def hashes(self, obj: MemoryEvent) -> SafeString:
        """The start of each SHA-256, one per line (the whole hashes in the tooltip)."""
        return format_html(
            '<span class="yuxi-hash" title="{} → {}">{}…<br>→ {}…</span>',
            obj.before_sha256,
            obj.after_sha256,
            obj.before_sha256[:12],
            obj.after_sha256[:12],
        )

    @admin.display(description="by")
    def actor_link(self, obj: MemoryEvent) -> SafeString | str:
        return _actor(obj)

    @admin.display(description="run · thread · tool call")
    def provenance(self, obj: MemoryEvent) -> SafeString | str:
        return _provenance(obj, remember_calls_for([obj]).get(obj.pk, []))


# The run page gains what only the memory app can say about a run.
admin.site.unregister(AgentRun)


@admin.register(AgentRun)
class AgentRunWithMemoryAdmin(AgentRunAdmin):
    """The run page plus whether its worker may write memory now, and the run's memory events."""

    fields = (*AgentRunAdmin.fields, "memory_write", "memory_events")
    help_texts = {
        **AgentRunAdmin.help_texts,
        "memory_write": "The memory app's one rule, checked now: a running top-level chat or "
        "resume run, its worker holding an unexpired lease, an active user with memory on.",
        "memory_events": "Changes to the user's memory this run made.",
    }

    @admin.display(description="memory write allowed now?")
    def memory_write(self, obj: AgentRun) -> SafeString:
        refusal = memory_write_refusal(obj)
        if refusal is None:
            return format_html("<strong>{}</strong>", "yes: its worker may write memory now")
        return format_html("<strong>{}</strong> {}", "no:", refusal)

    @admin.display(description="memory events")
    def memory_events(self, obj: AgentRun) -> SafeString:
        related = first_related(ledger_events().filter(run_id=obj.pk).order_by("id"))
        return related_list(
            related,
            [
                change_link(
                    MemoryEvent,
                    event.pk,
                    f"#{event.pk} {kind_label(event.kind)} · {format_timestamp(event.created_at)}",
                )
                for event in related.rows
            ],
            empty="none",
            more_url=_changelist_url(MemoryEvent, f"q={obj.run_id}") if related.rows else "",
            more_text="all memory events of this run",
        )
