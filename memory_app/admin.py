"""Read-only staff pages for the memory switch, with MEMORY.md as the agent sees it."""

from django.contrib import admin
from django.utils.html import format_html
from django.utils.safestring import SafeString

from memory_app.models import UserConfig
from memory_app.selectors import MEMORY_PROMPT_MAX_BYTES, read_memory_for_prompt
from memory_app.workspace import WorkspaceError, WorkspacePathRefused
from yuxi_site.admin import ReadOnlyAdmin, render_text


@admin.register(UserConfig)
class UserConfigAdmin(ReadOnlyAdmin):
    list_display = ("user", "enable_memory")
    list_filter = ("enable_memory",)
    search_fields = ("user__username",)
    list_select_related = ("user",)
    fields = ("user", "enable_memory", "memory_switch", "memory_preview")

    @admin.display(description="memory switch")
    def memory_switch(self, obj: UserConfig) -> str:
        if obj.enable_memory:
            return "on: the agent's next run reads the memory below and gets the memory tools"
        return "off: the agent reads no memory and gets no memory tool; below is what it would see"

    @admin.display(description="MEMORY.md as the agent sees it")
    def memory_preview(self, obj: UserConfig) -> SafeString:
        """The agent's own bounded, no-follow read; a refusal is reported without the path."""
        try:
            snapshot = read_memory_for_prompt(obj.user_id)
        except WorkspacePathRefused:
            return format_html(
                '<p class="errornote yuxi-memory-refused">{}</p>',
                "Refused: MEMORY.md or a directory above it is a symlink or not a regular "
                "file, so the agent's no-follow read gets nothing.",
            )
        except WorkspaceError:
            return format_html(
                '<p class="errornote yuxi-memory-refused">{}</p>',
                "Unavailable: the workspace could not be read.",
            )
        if snapshot.is_empty:
            return format_html(
                '<p class="yuxi-memory-summary">{}</p>',
                "MEMORY.md is missing, empty or blank: the agent gets no memory block.",
            )
        return format_html(
            '<p class="yuxi-memory-summary">{} bytes shown (the agent reads at most {}); '
            "truncated: {}</p>{}",
            snapshot.size_bytes,
            MEMORY_PROMPT_MAX_BYTES,
            "yes, the file is longer and the agent sees only this start"
            if snapshot.truncated
            else "no",
            render_text(snapshot.text),
        )
