"""The run page with what only the memory app can say about a run: whether its worker may
write memory now (the memory app owns that rule, so the conversations app never imports it),
and the memory events the run made.

Registered in place of the conversations app's own run admin, which it extends.
"""

from django.contrib import admin
from django.utils.html import format_html
from django.utils.safestring import SafeString

from conversations.admin.agent_run import AgentRunAdmin
from conversations.admin.columns import related_list
from conversations.admin_base import change_link, format_timestamp
from conversations.models import AgentRun
from conversations.selectors.staff import first_related
from memory_app.admin.ledger import kind_label, ledger_url
from memory_app.models import MemoryEvent
from memory_app.selectors import ledger_events, memory_write_refusal

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
            more_url=ledger_url(f"q={obj.run_id}") if related.rows else "",
            more_text="all memory events of this run",
        )
