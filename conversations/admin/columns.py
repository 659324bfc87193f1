"""What the conversations app's staff pages share: the thread filter, the cells of ids, names
and times, the user columns, related-row lists, and list excerpts the database cuts."""

from datetime import datetime

from django.contrib import admin
from django.db.models import Model
from django.template.loader import render_to_string
from django.utils.html import format_html
from django.utils.http import urlencode
from django.utils.safestring import SafeString

from conversations.admin_base import (
    LIST_EXCERPT_BYTES,
    ChosenRowFilter,
    changelist_url,
    format_timestamp,
    render_excerpt,
    user_link,
    user_name_lookup,
)
from conversations.models import AgentRun, Conversation
from conversations.selectors.staff import RelatedRows
from conversations.utils.db_functions import byte_length, text_prefix


class ThreadFilter(ChosenRowFilter):
    """Rows of one thread (`?thread=<conversation pk>`), through the admin's `thread_lookup`."""

    title = "thread"
    parameter_name = "thread"
    lookup_attr = "thread_lookup"

    def label(self, pk: int) -> str:
        thread_id = Conversation.objects.filter(pk=pk).values_list("thread_id", flat=True)
        return next(iter(thread_id), f"thread #{pk} (gone)")


def time_cell(value: datetime | None) -> SafeString:
    """A timestamp with seconds and time zone; it wraps only between date and clock time."""
    if value is None:
        return format_html('<span class="yuxi-time">{}</span>', "—")
    day, clock = format_timestamp(value).split(" ", 1)
    return format_html('<span class="yuxi-time"><span>{}</span> <span>{}</span></span>', day, clock)


def id_cell(value: object) -> SafeString:
    """A long id (64-character thread ids, UUIDs) that wraps inside a readable width."""
    return format_html('<span class="yuxi-id">{}</span>', value)


def name_cell(value: object) -> SafeString:
    """A name (usernames run long) that wraps inside a readable width."""
    return format_html('<span class="yuxi-name">{}</span>', value)


class UserColumns:
    """The columns naming a row's user (its `user` foreign key, which the page's queryset
    selects): `user_column`, the linked name in a list; `user_link`, the link on a row's page."""

    @admin.display(description="user", ordering=user_name_lookup("user"))
    def user_column(self, obj: Model) -> SafeString:
        return user_link(obj.user_id, name_cell(obj.user.get_username()))

    @admin.display(description="user")
    def user_link(self, obj: Model) -> SafeString:
        return user_link(obj.user_id, obj.user.get_username())


def run_label(run: AgentRun) -> str:
    """One line naming a run for lists of related runs."""
    return f"{run.run_id} · {run.run_type} · {run.status} · {format_timestamp(run.created_at)}"


def related_list(
    related: RelatedRows, links: list[SafeString], *, empty: str, more_url: str, more_text: str
) -> SafeString:
    """A bounded list of links to related rows, and one link on to all of them."""
    return render_to_string(
        "admin/yuxi_related.html",
        {
            "rows": links,
            "empty": empty,
            "more_url": more_url if related.has_more or not links else "",
            "more_text": more_text,
        },
    )


def changelist_query_url(model: type[Model], query: dict[str, object]) -> str:
    """A model's changelist URL narrowed by `query` (filters or an exact search)."""
    return f"{changelist_url(model)}?{urlencode(query)}"


def thread_pks(term: str) -> list[int]:
    """The primary keys of the threads whose public id is exactly `term` (a search term)."""
    return list(Conversation.objects.filter(thread_id=term).values_list("pk", flat=True))


def list_excerpt(obj: Model, prefix: str) -> SafeString:
    """A list cell's excerpt of a text column, from `list_excerpt_annotations(prefix)`."""
    return render_excerpt(
        getattr(obj, f"{prefix}_head"), getattr(obj, f"{prefix}_bytes"), LIST_EXCERPT_BYTES
    )


def list_excerpt_annotations(field: str) -> dict:
    """The annotations `list_excerpt` reads: the column's head and its size, both cut and
    measured by the database (a list page never loads a whole large value)."""
    return {
        f"{field}_head": text_prefix(field, LIST_EXCERPT_BYTES),
        f"{field}_bytes": byte_length(field),
    }
