"""Server time of every staff admin page on the 1M-message bench database, beside the figures
the same pages cost with an exact `COUNT(*)` and a substring search (the admin before it
learned to estimate and to search only what an index serves), and one thread's tool calls
beside the table-wide (created_at, id) order they had before they came in their messages' order.

    .venv/bin/python bench/history.py       (once: seeds 1,050,000 messages; minutes)
    .venv/bin/python bench/admin_pages.py   (BENCH_DATABASE_URL picks the database)

On top of history's seed it adds, once, what that seed lacks: agent runs (20 per thread,
some failed with a reason, some sub-agent runs), a memory config for every user and a chained
memory ledger (100 events per user, 2,000 for the heavy user, with a few breaks). Then it
renders each changelist (plain, searched, filtered) and change page through its admin view,
median of a few rounds, and prints wall milliseconds, the page's own cost (CPU of the Django
process plus the SQL statements' time, which a shared machine's load does not inflate),
queries and response size.
"""

import os
import statistics
import sys
import time
from collections.abc import Callable

from benchenv import setup_django

setup_django()

from django.contrib import admin  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.paginator import Paginator  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import RequestFactory  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402

from conversations.models import AgentRun, Conversation, Message, ToolCall  # noqa: E402
from memory_app.models import MemoryEvent, UserConfig  # noqa: E402

HEAVY_USERNAME = "bench-heavy"
STAFF_USERNAME = "bench-admin-staff"
ROUNDS = 5
BEFORE_ROUNDS = 2
RUNS_PER_THREAD = 20
EVENTS_PER_USER = 100
HEAVY_EVENTS = 2_000
TARGET_MS = 150


def _seed_admin_rows() -> None:
    """Runs, configs and a ledger, once (history's seed has none of them)."""
    with connection.cursor() as cur:
        cur.execute("SELECT EXISTS (SELECT 1 FROM memory_app_memoryevent)")
        if cur.fetchone()[0]:
            print("reusing the existing runs and ledger", flush=True)
            return
        started = time.perf_counter()
        cur.execute(
            "INSERT INTO conversations_agentrun (run_id, user_id, conversation_id, request_id, "
            "run_type, status, worker_id, lease_expires_at, created_at, started_at, "
            "finished_at, error) "
            "SELECT gen_random_uuid(), c.user_id, c.id, 'req-' || c.id || '-' || g, "
            "CASE WHEN c.source = 'agent_call' THEN 'subagent' ELSE 'chat' END, "
            "CASE WHEN g %% 17 = 0 THEN 'failed' ELSE 'succeeded' END, NULL, NULL, "
            "c.created_at + g * interval '1 minute', c.created_at + g * interval '1 minute', "
            "c.created_at + g * interval '1 minute' + interval '5 seconds', "
            "CASE WHEN g %% 17 = 0 THEN 'model error: the model did not answer within 8 steps' "
            "ELSE '' END "
            "FROM conversations_conversation c CROSS JOIN generate_series(1, %s) g",
            [RUNS_PER_THREAD],
        )
        # Sub-agent runs hang on a chat run of the same user.
        cur.execute(
            "UPDATE conversations_agentrun child SET parent_run_id = ("
            "  SELECT p.id FROM conversations_agentrun p WHERE p.user_id = child.user_id "
            "  AND p.run_type = 'chat' ORDER BY p.id LIMIT 1) "
            "WHERE child.run_type = 'subagent'"
        )
        cur.execute(
            "INSERT INTO memory_app_userconfig (user_id, enable_memory) "
            "SELECT id, id % 5 <> 0 FROM auth_user ON CONFLICT DO NOTHING"
        )
        cur.execute(
            "INSERT INTO memory_app_memoryevent (user_id, kind, actor_id, run_id, "
            "before_sha256, after_sha256, size_bytes, created_at) "
            "SELECT u.id, CASE WHEN g %% 10 = 0 THEN 'user_edited' ELSE 'agent_added' END, "
            "CASE WHEN g %% 10 = 0 THEN u.id END, "
            "CASE WHEN g %% 10 = 0 THEN NULL ELSE (SELECT r.id FROM conversations_agentrun r "
            "  WHERE r.user_id = u.id AND r.run_type = 'chat' ORDER BY r.id OFFSET g %% 50 "
            "  LIMIT 1) END, "
            # A break every 97th event: its before hash is not the previous after hash.
            "encode(sha256((u.id || ':' || (g - 1 + (g %% 97 = 0)::int))::bytea), 'hex'), "
            "encode(sha256((u.id || ':' || g)::bytea), 'hex'), 40 * g, "
            "timestamptz '2025-01-01' + g * interval '1 hour' "
            "FROM auth_user u CROSS JOIN LATERAL generate_series(1, "
            "  CASE WHEN u.username = %s THEN %s ELSE %s END) g ORDER BY u.id, g",
            [HEAVY_USERNAME, HEAVY_EVENTS, EVENTS_PER_USER],
        )
        cur.execute("ANALYZE")
    print(f"seeded runs, configs and ledger in {time.perf_counter() - started:.0f} s", flush=True)


class _ExactCountSubstringSearch:
    """What the admin did before: an exact COUNT(*) (twice) and a substring search."""

    paginator = Paginator
    show_full_result_count = True

    def get_search_results(self, request, queryset, search_term):
        return admin.ModelAdmin.get_search_results(self, request, queryset, search_term)


def _before(model_admin: admin.ModelAdmin, search_fields: tuple[str, ...]) -> admin.ModelAdmin:
    cls = type(
        f"Before{type(model_admin).__name__}",
        (_ExactCountSubstringSearch, type(model_admin)),
        {"search_fields": search_fields},
    )
    return cls(model_admin.model, admin.AdminSite(name="before"))


def _measure(render: Callable[[], object], rounds: int) -> tuple[float, float, float, int, int]:
    """Medians of wall, this process's CPU and SQL milliseconds, and the queries and bytes.

    The machine may be shared: wall time then includes waiting for a core, CPU time of the
    Django process plus the SQL statements' time is what the page itself costs.
    """
    render()  # warm up
    walls, cpus, sqls = [], [], []
    for _ in range(rounds):
        with CaptureQueriesContext(connection) as queries:
            started, cpu_started = time.perf_counter(), time.process_time()
            response = render()
            if hasattr(response, "render"):
                response.render()
            walls.append((time.perf_counter() - started) * 1000)
            cpus.append((time.process_time() - cpu_started) * 1000)
        sqls.append(sum(float(query["time"]) for query in queries.captured_queries) * 1000)
        assert response.status_code == 200, response.status_code
    return (
        statistics.median(walls),
        statistics.median(cpus),
        statistics.median(sqls),
        len(queries),
        len(response.content),
    )


def main() -> None:
    with connection.cursor() as cur:
        cur.execute("SELECT reltuples FROM pg_class WHERE relname = 'conversations_message'")
        row = cur.fetchone()
    if row is None or row[0] < 1_000_000:
        sys.exit("no 1M-message seed here: run .venv/bin/python bench/history.py first")
    _seed_admin_rows()

    User = get_user_model()
    staff, _ = User.objects.get_or_create(
        username=STAFF_USERNAME, defaults={"is_staff": True, "is_superuser": True}
    )
    heavy = User.objects.get(username=HEAVY_USERNAME)
    with connection.cursor() as cur:
        cur.execute(
            "SELECT conversation_id FROM conversations_message WHERE owner_id = %s "
            "GROUP BY 1 ORDER BY count(*) DESC LIMIT 1",
            [heavy.pk],
        )
        big_thread = Conversation.objects.get(pk=cur.fetchone()[0])
    message = Message.objects.filter(conversation=big_thread).order_by("-id").first()
    tool_call = ToolCall.objects.order_by("-id").first()
    failed_run = AgentRun.objects.filter(user=heavy, status="failed").order_by("id").first()
    parent_run = AgentRun.objects.filter(child_runs__isnull=False).order_by("id").first()
    event = MemoryEvent.objects.filter(user=heavy).order_by("-id").first()
    config = UserConfig.objects.get(user=heavy)

    site = admin.site
    admins = {model: site.get_model_admin(model) for model in site._registry}
    factory = RequestFactory()

    def changelist(model, query=None):
        def render():
            request = factory.get("/", query or {})
            request.user = staff
            return admins[model].changelist_view(request)

        return render

    def change(model, pk):
        def render():
            request = factory.get("/")
            request.user = staff
            return admins[model].change_view(request, str(pk))

        return render

    def before_changelist(model, search_fields, query=None):
        before = _before(admins[model], search_fields)

        def render():
            request = factory.get("/", query or {})
            request.user = staff
            return before.changelist_view(request)

        return render

    def table_order_changelist(model, query):
        """The page before one thread's tool calls came in their messages' order."""
        model_admin = admins[model]
        cls = type(
            f"TableOrder{type(model_admin).__name__}",
            (type(model_admin),),
            {"get_ordering": admin.ModelAdmin.get_ordering},
        )
        before = cls(model, admin.AdminSite(name="before"))

        def render():
            request = factory.get("/", query)
            request.user = staff
            return before.changelist_view(request)

        return render

    msg_search = ("conversation__thread_id", "content")
    pages = [
        (
            "messages",
            changelist(Message),
            before_changelist(Message, msg_search),
        ),
        (
            "messages, page 200",
            changelist(Message, {"p": "200"}),
            None,
        ),
        (
            "messages ?q=<thread id>",
            changelist(Message, {"q": big_thread.thread_id}),
            before_changelist(Message, msg_search, {"q": big_thread.thread_id}),
        ),
        (
            "messages ?q=<message id>",
            changelist(Message, {"q": str(message.pk)}),
            None,
        ),
        ("messages ?q=<username>", changelist(Message, {"q": HEAVY_USERNAME}), None),
        (
            "messages ?q=<a word> (before: ILIKE scan)",
            changelist(Message, {"q": "kariqu"}),
            before_changelist(Message, msg_search, {"q": "kariqu"}),
        ),
        ("messages ?user=<heavy>", changelist(Message, {"user": heavy.pk}), None),
        ("messages ?thread=<20k thread>", changelist(Message, {"thread": big_thread.pk}), None),
        ("messages ?role=tool", changelist(Message, {"role__exact": "tool"}), None),
        (
            "messages ?type=tool_call&role=assistant",
            changelist(Message, {"message_type__exact": "tool_call", "role__exact": "assistant"}),
            None,
        ),
        (
            "threads",
            changelist(Conversation),
            before_changelist(Conversation, ("thread_id", "title", "user__username")),
        ),
        (
            "threads ?q=<username>",
            changelist(Conversation, {"q": HEAVY_USERNAME}),
            before_changelist(
                Conversation, ("thread_id", "title", "user__username"), {"q": HEAVY_USERNAME}
            ),
        ),
        ("threads ?q=<thread id>", changelist(Conversation, {"q": big_thread.thread_id}), None),
        ("threads ?status=archived", changelist(Conversation, {"status__exact": "archived"}), None),
        ("threads ?user=<heavy>", changelist(Conversation, {"user": heavy.pk}), None),
        (
            "tool calls",
            changelist(ToolCall),
            before_changelist(ToolCall, ("tool_call_id", "name")),
        ),
        (
            "tool calls ?q=<call id>",
            changelist(ToolCall, {"q": tool_call.tool_call_id}),
            before_changelist(ToolCall, ("tool_call_id", "name"), {"q": tool_call.tool_call_id}),
        ),
        ("tool calls ?user=<heavy>", changelist(ToolCall, {"user": heavy.pk}), None),
        (
            "tool calls ?thread=<20k thread>",
            changelist(ToolCall, {"thread": big_thread.pk}),
            table_order_changelist(ToolCall, {"thread": big_thread.pk}),
        ),
        (
            "tool calls ?thread=<20k thread>, last page",
            changelist(ToolCall, {"thread": big_thread.pk, "p": "40"}),
            table_order_changelist(ToolCall, {"thread": big_thread.pk, "p": "40"}),
        ),
        ("tool calls ?status=error", changelist(ToolCall, {"status__exact": "error"}), None),
        (
            "runs",
            changelist(AgentRun),
            before_changelist(AgentRun, ("run_id", "request_id", "worker_id")),
        ),
        (
            "runs ?q=<run id>",
            changelist(AgentRun, {"q": str(failed_run.run_id)}),
            before_changelist(
                AgentRun, ("run_id", "request_id", "worker_id"), {"q": str(failed_run.run_id)}
            ),
        ),
        ("runs ?q=<username>", changelist(AgentRun, {"q": HEAVY_USERNAME}), None),
        ("runs ?status=failed", changelist(AgentRun, {"status__exact": "failed"}), None),
        ("runs ?user=<heavy>", changelist(AgentRun, {"user": heavy.pk}), None),
        (
            "memory events",
            changelist(MemoryEvent),
            before_changelist(MemoryEvent, ("user__username",)),
        ),
        ("memory events ?q=<username>", changelist(MemoryEvent, {"q": HEAVY_USERNAME}), None),
        ("memory events ?user=<heavy>", changelist(MemoryEvent, {"user": heavy.pk}), None),
        (
            "memory events ?kind=user_edited",
            changelist(MemoryEvent, {"kind__exact": "user_edited"}),
            None,
        ),
        ("user configs", changelist(UserConfig), None),
        ("user configs ?q=<username>", changelist(UserConfig, {"q": HEAVY_USERNAME}), None),
        ("users", changelist(User), None),
        ("thread page, 20k messages", change(Conversation, big_thread.pk), None),
        ("message page", change(Message, message.pk), None),
        ("tool call page", change(ToolCall, tool_call.pk), None),
        ("run page, failed", change(AgentRun, failed_run.pk), None),
        ("run page, with sub-agent runs", change(AgentRun, parent_run.pk), None),
        ("user config page, 2k-event ledger", change(UserConfig, config.pk), None),
        ("memory event page", change(MemoryEvent, event.pk), None),
        ("user page", change(User, heavy.pk), None),
    ]
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM conversations_message")
        total = cur.fetchone()[0]
    print(
        f"\n{total:,} messages; median of {ROUNDS} renders (before: {BEFORE_ROUNDS}); "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores\n"
    )
    header = (
        f"{'page':42} {'wall ms':>8} {'cpu+sql':>8} {'queries':>7} {'KiB':>5} {'<150':>5}"
        f" {'before ms':>10} {'faster':>7}"
    )
    print(header)
    print("-" * len(header))
    fast = 0
    for label, render, before in pages:
        wall, cpu, sql, queries, size = _measure(render, ROUNDS)
        cost = cpu + sql
        fast += cost < TARGET_MS
        line = (
            f"{label:42} {wall:8.1f} {cost:8.1f} {queries:7d} {size / 1024:5.0f} "
            f"{'yes' if cost < TARGET_MS else 'NO':>5}"
        )
        if before is not None:
            before_wall, before_cpu, before_sql, _, _ = _measure(before, BEFORE_ROUNDS)
            before_cost = before_cpu + before_sql
            line += f" {before_cost:10.1f} {before_cost / cost:6.1f}x"
        print(line, flush=True)
    print(
        f"\n{fast} of {len(pages)} pages under {TARGET_MS} ms of CPU + SQL; "
        f"load average {os.getloadavg()[0]:.1f} at the end"
    )


if __name__ == "__main__":
    main()
