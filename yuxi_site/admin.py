"""Shared admin base: staff may look, never touch, and never load an unbounded column."""

from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import Model, QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from yuxi_site.utils.db_functions import byte_length, text_prefix
from yuxi_site.utils.string_utils import truncate_utf8

# Most of one large column that a change page loads and shows.
FIELD_EXCERPT_BYTES = 8192
# Most of one large column that a changelist cell shows.
LIST_EXCERPT_BYTES = 120

_EXCERPT_SUFFIX = "_excerpt"
# Stored text keeps its line breaks and wraps inside the page instead of widening it.
_PRE = (
    '<pre class="yuxi-excerpt" style="white-space:pre-wrap;overflow-wrap:anywhere;margin:0">'
    "{}</pre>"
)


def render_text(
    text: str | None, *, cut: bool = False, total_bytes: int | None = None
) -> SafeString:
    """Escaped text in a `<pre>`, with a visible note when it is only the start of a value."""
    if text is None:
        return format_html("<em>{}</em>", "null")
    if not cut:
        return format_html(_PRE, text)
    kept = len(text.encode("utf-8"))
    note = (
        f"first {kept} bytes shown"
        if total_bytes is None
        else f"first {kept} of {total_bytes} bytes shown"
    )
    return format_html(_PRE + '<p class="yuxi-cut">cut: {}</p>', text, note)


def render_excerpt(text: str | None, total_bytes: int | None, max_bytes: int) -> SafeString:
    """Escaped text cut at `max_bytes` UTF-8 bytes, saying so when it was cut."""
    if text is None:
        return render_text(None)
    kept, cut = truncate_utf8(text, max_bytes)
    return render_text(kept, cut=cut, total_bytes=total_bytes)


def _excerpt_display(field: str) -> Any:
    @admin.display(description=field.replace("_", " "))
    def display(self: "ReadOnlyAdmin", obj: Model) -> SafeString:
        text, total = obj.admin_excerpts[field]
        return render_excerpt(text, total, FIELD_EXCERPT_BYTES)

    return display


class ReadOnlyAdmin(admin.ModelAdmin):
    """No add, change or delete anywhere, no bulk actions, every field read-only.

    `heavy_fields` are unbounded columns: every page defers them, and a change page shows
    each as an excerpt of at most `FIELD_EXCERPT_BYTES`, cut by the database in one query.
    """

    actions = None
    heavy_fields: tuple[str, ...] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for field in cls.heavy_fields:
            setattr(cls, f"{field}{_EXCERPT_SUFFIX}", _excerpt_display(field))

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

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
        """The declared `fields`, else every model field, heavy ones as their excerpts."""
        if self.fields:
            return list(self.fields)
        return [
            f"{field.name}{_EXCERPT_SUFFIX}" if field.name in self.heavy_fields else field.name
            for field in self.model._meta.fields
        ]

    def get_readonly_fields(self, request: HttpRequest, obj: Model | None = None) -> list[str]:
        return self.get_fields(request, obj)

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
