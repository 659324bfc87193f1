"""Shared admin base: staff may look, never touch, never load an unbounded column, and never
make PostgreSQL count or scan a big table to draw a page."""

import contextlib
import functools
import json
from datetime import datetime
from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import flatten_fieldsets, quote
from django.contrib.auth import get_user_model
from django.core.exceptions import EmptyResultSet, PermissionDenied
from django.core.paginator import EmptyPage, Page, Paginator
from django.db import connections
from django.db.models import Model, Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import NoReverseMatch, get_script_prefix, reverse
from django.utils import timezone
from django.utils.functional import cached_property
from django.utils.html import format_html
from django.utils.http import urlencode
from django.utils.safestring import SafeString

from conversations.utils.db_functions import byte_length, text_prefix
from conversations.utils.string_utils import truncate_utf8

__all__ = [
    "ReadOnlyAdmin",
]

# Most of one large column that a change page loads and shows.
FIELD_EXCERPT_BYTES = 8192
# Most of one large column that a changelist cell shows.
LIST_EXCERPT_BYTES = 120
# From this many rows (by the planner's estimate) a changelist shows the estimate, not a count:
# counting more would walk them all.
ESTIMATED_COUNT_FROM_ROWS = 1_000

# Stored text keeps its line breaks and wraps inside the page instead of widening it.
_PRE = '<pre class="yuxi-excerpt">{}</pre>'


def render_text(
    text: str | None, *, cut: bool = False, total_bytes: int | None = None
) -> SafeString:
    """Escaped text in a `<pre>`, with a visible note when it is only the start of a value."""
    if text is None:
        return format_html('<em class="yuxi-null">{}</em>', "none")
    if not cut:
        return format_html(_PRE, text)
    kept = len(text.encode("utf-8"))
    note = (
        f"first {kept:,} bytes shown"
        if total_bytes is None
        else f"first {kept:,} of {total_bytes:,} bytes shown"
    )
    return format_html(_PRE + '<p class="yuxi-cut">cut: {}</p>', text, note)


def render_excerpt(text: str | None, total_bytes: int | None, max_bytes: int) -> SafeString:
    """Escaped text cut at `max_bytes` UTF-8 bytes, saying so when it was cut."""
    if text is None:
        return render_text(None)
    kept, cut = truncate_utf8(text, max_bytes)
    return render_text(kept, cut=cut, total_bytes=total_bytes)


def format_timestamp(value: datetime | None) -> str:
    """A time as staff read it: date, time to the second, and the time zone's name."""
    if value is None:
        return "—"
    return timezone.localtime(value).strftime("%Y-%m-%d %H:%M:%S %Z")


@functools.cache
def _changelist_path(label: str, script_prefix: str) -> str:
    return reverse(f"admin:{label}_changelist")


def changelist_url(model: type[Model]) -> str:
    """A model's changelist URL, resolved once per model (a page links to hundreds of rows)."""
    opts = model._meta
    return _changelist_path(f"{opts.app_label}_{opts.model_name}", get_script_prefix())


def change_url(model: type[Model], pk: object) -> str:
    """One row's admin page: Django's admin serves it at `<changelist>/<quoted pk>/change/`."""
    return f"{changelist_url(model)}{quote(str(pk))}/change/"


def change_link(model: type[Model], pk: object, text: object) -> SafeString:
    """A link to one row's admin page."""
    return format_html('<a href="{}">{}</a>', change_url(model, pk), text)


def changelist_link(model: type[Model], query: dict[str, object], text: object) -> SafeString:
    """A link to a model's changelist narrowed by `query` (filters or an exact search)."""
    return format_html('<a href="{}?{}">{}</a>', changelist_url(model), urlencode(query), text)


# The apps' own per-user staff page, by user id or USERNAME_FIELD value (the memory app's
# admin serves it): every link to a user goes there, never to the host's own user admin.
USER_PAGE_URL_NAME = "admin:yuxi_user"


@functools.cache
def _user_page_path(script_prefix: str) -> str | None:
    try:
        return reverse(USER_PAGE_URL_NAME, args=["0"]).removesuffix("0/")
    except NoReverseMatch:
        return None


def user_url(pk: object) -> str | None:
    """The apps' staff page of user `pk`; None where no admin serves it."""
    path = _user_page_path(get_script_prefix())
    return None if path is None else f"{path}{quote(str(pk))}/"


def user_link(pk: object, text: object) -> SafeString:
    """A link to the apps' staff page of user `pk` (the name alone where none is served)."""
    url = user_url(pk)
    if url is None:
        return format_html("{}", text)
    return format_html('<a href="{}">{}</a>', url, text)


def user_name_lookup(relation: str) -> str:
    """The lookup of the user's `USERNAME_FIELD` through `relation` (`"user"`, `"owner"`)."""
    return f"{relation}__{get_user_model().USERNAME_FIELD}"


def user_label_of(pk: object) -> str:
    """The user's `get_username()`, read by id; a marker once the user is gone."""
    User = get_user_model()
    name = User.objects.filter(pk=pk).values_list(User.USERNAME_FIELD, flat=True)
    return str(next(iter(name), f"user #{pk} (gone)"))


def planner_row_estimate(queryset: QuerySet) -> int:
    """PostgreSQL's estimate of the rows `queryset` returns (EXPLAIN, nothing executed)."""
    try:
        sql, params = queryset.query.sql_with_params()
    except EmptyResultSet:  # a condition that can match nothing, e.g. `IN ()`
        return 0
    with connections[queryset.db].cursor() as cursor:
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
        plan = cursor.fetchone()[0]
    if isinstance(plan, str):  # EXPLAIN's column is text; some drivers leave it unparsed
        plan = json.loads(plan)
    return int(plan[0]["Plan"]["Plan Rows"])


def table_analysed(model: type[Model], using: str) -> bool:
    """Whether PostgreSQL has statistics for the model's table (`pg_class.reltuples >= 0`).

    A table never vacuumed or analysed has `reltuples = -1`, and the planner then guesses its
    size from its pages: a fresh table of three rows can be "about 1990".
    """
    with connections[using].cursor() as cursor:
        cursor.execute(
            "SELECT reltuples FROM pg_class WHERE oid = to_regclass(%s)", [model._meta.db_table]
        )
        row = cursor.fetchone()
    return row is not None and row[0] >= 0


class EstimatedCountPaginator(Paginator):
    """Exact count where the result is small; the planner's estimate where it is big.

    An exact `COUNT(*)` over a million messages costs half a second for one number in the
    page's corner; the estimate (from `pg_class.reltuples` and the column statistics) costs
    a plan. Only a table PostgreSQL has analysed is estimated: without statistics the
    estimate is a guess, and such a table is young and small. `estimated` tells the template
    to say "about".
    """

    estimated = False

    @cached_property
    def count(self) -> int:
        queryset = self.object_list
        if not table_analysed(queryset.model, queryset.db):
            return queryset.count()
        estimate = planner_row_estimate(queryset)
        if estimate >= ESTIMATED_COUNT_FROM_ROWS:
            self.estimated = True
            return estimate
        return self.object_list.count()

    def validate_number(self, number: Any) -> int:
        """A page number; past the estimated last page is valid too (`page` counts there)."""
        try:
            return super().validate_number(number)
        except EmptyPage:
            if self.estimated and int(number) > self.num_pages:
                return int(number)
            raise

    def page(self, number: Any) -> Page:
        """A page; at or past the estimated last page, the count is made exact first.

        The estimate may fall short of the real count, and the last pages are cut at the
        count: without this, the rows past the estimate could not be reached at all. A number
        past the real last page is then refused, as Django refuses it on an exact count.
        """
        number = self.validate_number(number)
        if self.estimated and number >= self.num_pages:
            # The exact count replaces the estimate; the page figures cached from the estimate
            # are dropped (deleting a cached_property is how Django clears it).
            self.count = self.object_list.count()
            for name in ("num_pages", "page_range"):
                with contextlib.suppress(AttributeError):
                    delattr(self, name)
            self.estimated = False
        return super().page(number)


class ChosenRowFilter(admin.SimpleListFilter):
    """A filter on one chosen row (a user, a thread) that never lists every row to choose from.

    Pages link to it (`?user=<pk>`); it then shows the chosen row and "All". The model admin
    names the lookup to apply in `lookup_attr`.
    """

    lookup_attr = ""
    model: type[Model]

    def __init__(self, request, params, model, model_admin) -> None:
        self.model_admin = model_admin
        super().__init__(request, params, model, model_admin)

    def chosen(self) -> int | None:
        value = self.value()
        return int(value) if value and value.isdigit() else None

    def label(self, pk: int) -> str:
        raise NotImplementedError

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list:
        pk = self.chosen()
        return [] if pk is None else [(str(pk), self.label(pk))]

    def has_output(self) -> bool:
        return self.value() is not None

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value() is None:
            return queryset
        return queryset.filter(**{getattr(self.model_admin, self.lookup_attr): self.chosen()})


class UserFilter(ChosenRowFilter):
    """Rows of one user (`?user=<user pk>`); the admin's `user_lookup` says how to reach them."""

    title = "user"
    parameter_name = "user"
    lookup_attr = "user_lookup"

    def label(self, pk: int) -> str:
        return user_label_of(pk)


class ReadOnlyAdmin(admin.ModelAdmin):
    """No add, change or delete anywhere, no bulk actions, every field read-only.

    `heavy_fields` are unbounded columns: every page defers them, and a change page shows
    each through its own `<field>_excerpt` display method, from an excerpt of at most
    `FIELD_EXCERPT_BYTES` cut by the database in one query. `help_texts` label the change
    page's fields (display methods included). Search is exact and indexed: each admin's
    `search_filter(term)` turns the term into conditions an index serves.
    """

    actions = None
    heavy_fields: tuple[str, ...] = ()
    help_texts: dict[str, str] = {}
    paginator = EstimatedCountPaginator
    show_full_result_count = False
    # "Show counts" would count every filter choice over the whole table.
    show_facets = admin.ShowFacets.NEVER
    list_per_page = 50

    class Media:
        # Ships with the conversations app, installed wherever this base is used.
        css = {"all": ("yuxi/admin.css",)}

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        """Never on this admin's own pages. Another admin's delete page (the host's user
        admin deleting a user) asks too, for the rows the delete cascades to: those go with
        the user whatever this says, so it does not stand in the way there."""
        match = getattr(request, "resolver_match", None)
        own_page = match is None or getattr(match.func, "model_admin", None) is self
        return not own_page

    def changelist_view(
        self, request: HttpRequest, extra_context: dict | None = None
    ) -> HttpResponse:
        """Refuse every POST: without actions or editable columns it could only mean a change."""
        if request.method == "POST":
            raise PermissionDenied
        return super().changelist_view(request, extra_context)

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        queryset = super().get_queryset(request)
        return queryset.defer(*self.heavy_fields) if self.heavy_fields else queryset

    def get_fields(self, request: HttpRequest, obj: Model | None = None) -> list[str]:
        if self.fieldsets:
            return flatten_fieldsets(self.fieldsets)
        return list(self.fields)

    def get_readonly_fields(self, request: HttpRequest, obj: Model | None = None) -> list[str]:
        return self.get_fields(request, obj)

    def get_form(self, request: HttpRequest, obj: Model | None = None, **kwargs: Any) -> Any:
        """The read-only form, carrying `help_texts` (Django shows them under read-only fields)."""
        return super().get_form(request, obj, help_texts=self.help_texts, **kwargs)

    def search_filter(self, term: str) -> Q:
        """Conditions an index serves for one search term; no match by default."""
        return Q(pk__in=[])

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet, search_term: str
    ) -> tuple[QuerySet, bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        return queryset.filter(self.search_filter(term)), False

    def get_object(
        self, request: HttpRequest, object_id: str, from_field: str | None = None
    ) -> Model | None:
        """The row without its heavy columns, plus a bounded excerpt of each (one query)."""
        obj = super().get_object(request, object_id, from_field)
        if obj is None or not self.heavy_fields:
            return obj
        expressions = {}
        for field in self.heavy_fields:
            expressions[f"text_{field}"] = text_prefix(field, FIELD_EXCERPT_BYTES)
            expressions[f"bytes_{field}"] = byte_length(field)
        row = self.model._default_manager.filter(pk=obj.pk).values(**expressions).get()
        obj.admin_excerpts = {
            field: (row[f"text_{field}"], row[f"bytes_{field}"]) for field in self.heavy_fields
        }
        return obj

    def field_excerpt(self, obj: Model, field: str) -> SafeString:
        """A heavy field of the change page's row, as loaded by `get_object`."""
        text, total = obj.admin_excerpts[field]
        return render_excerpt(text, total, FIELD_EXCERPT_BYTES)
