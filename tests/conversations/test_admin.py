"""Staff pages for conversations and runs: lookback banner, bounded raw record, run state."""

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from conversations.admin_base import FIELD_EXCERPT_BYTES
from conversations.models import AgentRun, Conversation, Message, ToolCall
from conversations.runs import claim_run
from memory_app.runtime import chat
from tests.factories import (
    AgentRunFactory,
    ConversationFactory,
    MessageFactory,
    ToolCallFactory,
    UserConfigFactory,
)

pytestmark = pytest.mark.django_db

MARKER = "<script>alert('yuxi')</script>"
ESCAPED = "&lt;script&gt;alert(&#x27;yuxi&#x27;)&lt;/script&gt;"


def _change(model, pk):
    return reverse(f"admin:conversations_{model._meta.model_name}_change", args=[pk])


def _changelist(model):
    return reverse(f"admin:conversations_{model._meta.model_name}_changelist")


def _html(client, url):
    response = client.get(url)
    assert response.status_code == 200
    return response.content.decode()


def test_visible_thread_says_lookback_can_read_it(staff_client):
    html = _html(staff_client, _change(Conversation, ConversationFactory().pk))
    assert "Visible to history lookback" in html
    assert "Not visible" not in html


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"status": Conversation.Status.ARCHIVED}, "its status is archived"),
        ({"status": Conversation.Status.DELETED}, "its status is deleted"),
        ({"source": Conversation.Source.AGENT_CALL}, "its source is agent_call"),
        ({"source": Conversation.Source.AGENT_EVALUATION}, "its source is agent_evaluation"),
        ({"parent": "root"}, "SubAgent child"),
    ],
)
def test_hidden_thread_shows_a_banner_saying_why(staff_client, fields, reason):
    if fields.get("parent") == "root":
        fields = {"parent": ConversationFactory()}
    html = _html(staff_client, _change(Conversation, ConversationFactory(**fields).pk))
    assert "Not visible to history lookback, because:" in html
    assert reason in html


def test_changelist_marks_hidden_threads(staff_client):
    ConversationFactory(title="shown-thread")
    ConversationFactory(title="hidden-thread", status=Conversation.Status.ARCHIVED)
    html = _html(staff_client, _changelist(Conversation))
    rows = {
        title: row
        for row in re.findall(r"<tr>.*?</tr>", html, re.S)
        for title in ("shown-thread", "hidden-thread")
        if title in row
    }
    assert '<span class="yuxi-lookback">visible</span>' in rows["shown-thread"]
    assert (
        'title="its status is archived; only active threads are visible">hidden'
        in (rows["hidden-thread"])
    )


def test_script_marker_in_titles_and_messages_renders_escaped(staff_client):
    thread = ConversationFactory(title=MARKER, metadata={"note": MARKER})
    message = MessageFactory(conversation=thread, content=MARKER, metadata={"k": MARKER})
    tool_call = ToolCallFactory(message=message, output=MARKER, input={"content": MARKER})
    pages = [
        _changelist(Conversation),
        _change(Conversation, thread.pk),
        _changelist(Message),
        _change(Message, message.pk),
        _change(type(tool_call), tool_call.pk),
    ]
    for url in pages:
        html = _html(staff_client, url)
        assert "<script>alert" not in html, url
        assert "&lt;script&gt;" in html, url
    assert ESCAPED in _html(staff_client, _change(Conversation, thread.pk))


def _stored_column_read_whole(queries, table, column):
    """SQL statements whose select list has `table.column` itself, not a cut or size of it."""
    whole = re.compile(
        r"(?:^SELECT (?:DISTINCT )?|, )" + re.escape(f'"{table}"."{column}"') + r"(?=,|\s+AS\s|$)"
    )
    return [q["sql"] for q in queries if whole.search(q["sql"].split(" FROM ", 1)[0])]


def test_huge_columns_are_cut_by_the_database_and_marked(staff_client):
    huge = "é" * 600_000  # 1.2 MB of UTF-8
    thread = ConversationFactory(title=huge, metadata={"blob": huge})
    message = MessageFactory(conversation=thread, content=huge, attachments=[huge])
    for url, table, columns in [
        (_change(Conversation, thread.pk), "conversations_conversation", ("title", "metadata")),
        (
            _change(Message, message.pk),
            "conversations_message",
            ("content", "attachments", "metadata"),
        ),
        (_changelist(Conversation), "conversations_conversation", ("title", "metadata")),
        (_changelist(Message), "conversations_message", ("content", "attachments")),
    ]:
        with CaptureQueriesContext(connection) as queries:
            response = staff_client.get(url)
        assert response.status_code == 200
        assert len(response.content) < 150_000, url
        for column in columns:
            assert not _stored_column_read_whole(queries.captured_queries, table, column), url
    html = _html(staff_client, _change(Message, message.pk))
    kept = FIELD_EXCERPT_BYTES // 2 * 2
    assert f"cut: first {kept:,} of {len(huge.encode()):,} bytes shown" in html


def _change_page_queries(client, model, pk):
    with CaptureQueriesContext(connection) as queries:
        assert client.get(_change(model, pk)).status_code == 200
    return len(queries)


def test_conversation_page_costs_the_same_queries_for_3_and_80_messages(staff_client):
    small = ConversationFactory()
    MessageFactory.create_batch(3, conversation=small)
    large = ConversationFactory()
    MessageFactory.create_batch(80, conversation=large)
    assert _change_page_queries(staff_client, Conversation, small.pk) == (
        _change_page_queries(staff_client, Conversation, large.pk)
    )


def test_raw_messages_show_the_latest_and_link_to_the_rest_without_counting(staff_client):
    thread = ConversationFactory()
    MessageFactory(conversation=thread, content="the-very-first-message")
    MessageFactory.create_batch(54, conversation=thread)
    last = MessageFactory(conversation=thread, content="the-very-last-message")
    with CaptureQueriesContext(connection) as queries:
        html = _html(staff_client, _change(Conversation, thread.pk))
    assert "the-very-last-message" in html
    assert "the-very-first-message" not in html.split('yuxi-raw-view"', 1)[1]
    assert "The latest 50 messages; earlier ones are not shown" in html
    assert f'href="{_change(Message, last.pk)}">#{last.pk}</a>' in html
    assert f"{_changelist(Message)}?thread={thread.pk}" in html
    assert not [q for q in queries.captured_queries if "COUNT(" in q["sql"].upper()]


def test_run_page_shows_owner_lease_and_that_its_worker_may_write(staff_client):
    run = AgentRunFactory()
    UserConfigFactory(user=run.user, enable_memory=True)
    claim_run(worker_id="worker-7", run_id=run.run_id)
    html = _html(staff_client, _change(AgentRun, run.pk))
    assert "worker-7" in html
    assert "held by worker-7" in html
    assert "yes: its worker may write memory now" in html


@pytest.mark.parametrize(
    ("setup", "reason"),
    [
        ("pending", "run is pending, not running"),
        ("expired", "run lease has expired"),
        ("subagent", "only a top-level chat or resume run may use memory tools"),
        ("switch_off", "memory is switched off for this user"),
        ("no_config", "memory is switched off for this user"),
    ],
)
def test_run_page_says_why_a_memory_write_would_be_refused(staff_client, setup, reason):
    run = AgentRunFactory()
    if setup != "no_config":
        UserConfigFactory(user=run.user, enable_memory=setup != "switch_off")
    if setup == "subagent":
        run.parent_run = AgentRunFactory(conversation=run.conversation)
        run.run_type = AgentRun.RunType.SUBAGENT
        run.save()
    if setup != "pending":
        claim_run(worker_id="worker-8", run_id=run.run_id)
    if setup == "expired":
        AgentRun.objects.filter(pk=run.pk).update(
            lease_expires_at=run.created_at - timedelta(hours=1)
        )
    html = _html(staff_client, _change(AgentRun, run.pk))
    assert "<strong>no:</strong> " + reason in html
    if setup == "expired":
        assert "expired" in html


def _sections(html):
    """The agent-view and raw-view halves of a conversation's history field."""
    agent = html.split('yuxi-agent-view"', 1)[1].split('yuxi-raw-view"', 1)[0]
    raw = html.split('yuxi-raw-view"', 1)[1]
    return agent, raw


def test_agent_view_holds_only_what_lookback_returns_beside_every_raw_message(staff_client):
    thread = ConversationFactory()
    MessageFactory(conversation=thread, role=Message.Role.USER, content="user-said-1")
    MessageFactory(conversation=thread, role=Message.Role.ASSISTANT, content="assistant-said-2")
    MessageFactory(conversation=thread, role=Message.Role.SYSTEM, content="system-only-3")
    MessageFactory(
        conversation=thread,
        role=Message.Role.ASSISTANT,
        message_type=Message.Type.TOOL_CALL,
        content="tool-call-4",
    )
    agent, raw = _sections(_html(staff_client, _change(Conversation, thread.pk)))
    assert "user-said-1" in agent
    assert "assistant-said-2" in agent
    assert "system-only-3" not in agent
    assert "tool-call-4" not in agent
    assert "2 messages returned" in agent
    for content in ("user-said-1", "assistant-said-2", "system-only-3", "tool-call-4"):
        assert content in raw
    assert "All 4 messages of this thread." in raw


# The remember tool runs on a LangGraph pool thread, which cannot see a test transaction.
@pytest.mark.django_db(transaction=True)
def test_agent_view_of_a_remember_turn_shows_no_empty_assistant_message(staff_client):
    user = UserConfigFactory(enable_memory=True).user
    turn = chat(user_id=user.pk, message="remember that I drink oolong tea")
    thread = Conversation.objects.get(thread_id=turn.thread_id)
    agent, raw = _sections(_html(staff_client, _change(Conversation, thread.pk)))
    assert "2 messages returned" in agent
    assert "All 4 messages of this thread." in raw


def test_agent_view_states_budgets_and_cuts_in_words(staff_client):
    thread = ConversationFactory()
    MessageFactory.create_batch(21, conversation=thread, content="x" * 10_000)
    agent, _ = _sections(_html(staff_client, _change(Conversation, thread.pk)))
    assert "4 messages returned" in agent  # four 8 KiB cuts fill the 32 KiB of contents
    assert "Earlier messages exist: the agent would page back for them." in agent
    assert "Later messages exist" not in agent
    assert "Some content was cut to fit the budgets." in agent
    assert "cut: first 8,192 bytes shown" in agent
    assert "of at most 65,536 bytes of JSON" in agent
    summary = agent.split("</p>", 1)[0]
    for flag in ("has_more_before", "has_more_after", "truncated:", "True", "False"):
        assert flag not in summary


def test_agent_view_of_a_hidden_thread_is_not_found(staff_client):
    thread = ConversationFactory(status=Conversation.Status.ARCHIVED)
    MessageFactory(conversation=thread, content="archived-words")
    agent, raw = _sections(_html(staff_client, _change(Conversation, thread.pk)))
    assert "Nothing: the lookback tools return nothing of this thread" in agent
    assert "errornote" not in agent and "yuxi-alert" not in agent
    assert "archived-words" not in agent
    assert "archived-words" in raw


def test_agent_view_escapes_a_script_marker(staff_client):
    thread = ConversationFactory(title=MARKER)
    MessageFactory(conversation=thread, content=MARKER)
    agent, _ = _sections(_html(staff_client, _change(Conversation, thread.pk)))
    assert "<script>" not in agent
    assert ESCAPED in agent


def _queries_of(client, url, params=None):
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url, params or {})
    assert response.status_code == 200
    return response.content.decode(), [q["sql"] for q in queries.captured_queries]


def _analyse(model) -> None:
    """Give PostgreSQL the table's statistics, as autovacuum does once a table has filled."""
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {connection.ops.quote_name(model._meta.db_table)}")


def test_a_big_table_shows_the_planners_estimate_and_is_never_counted(staff_client, monkeypatch):
    MessageFactory.create_batch(3)
    _analyse(Message)
    monkeypatch.setattr("conversations.admin_base.ESTIMATED_COUNT_FROM_ROWS", 1)
    html, sql = _queries_of(staff_client, _changelist(Message))
    assert "(estimated)" in html and "about " in html
    assert not [q for q in sql if "COUNT(" in q.upper()]
    assert [q for q in sql if q.startswith("EXPLAIN")]


def test_a_small_result_is_counted_exactly(staff_client):
    MessageFactory.create_batch(3)
    html, _ = _queries_of(staff_client, _changelist(Message))
    assert "3 messages" in html
    assert "(estimated)" not in html


def test_message_search_matches_ids_exactly_and_never_scans_content(staff_client):
    message = MessageFactory(content="a needle in the haystack")
    MessageFactory()
    for term in (
        str(message.pk),
        message.conversation.thread_id,
        message.conversation.user.username,
    ):
        response = staff_client.get(_changelist(Message), {"q": term})
        assert [m.pk for m in response.context["cl"].result_list] == [message.pk], term
    html, sql = _queries_of(staff_client, _changelist(Message), {"q": "needle"})
    assert not [q for q in sql if "LIKE" in q.upper()]
    assert "no index serves a substring of every message" in html


def test_runs_are_found_by_username_thread_id_and_run_id(staff_client):
    run = AgentRunFactory()
    AgentRunFactory()
    for term in (run.user.username, run.conversation.thread_id, str(run.run_id)):
        response = staff_client.get(_changelist(AgentRun), {"q": term})
        assert [r.pk for r in response.context["cl"].result_list] == [run.pk], term


def test_user_filter_shows_only_the_chosen_user_and_lists_no_other(staff_client):
    mine = MessageFactory()
    theirs = MessageFactory()
    response = staff_client.get(_changelist(Message), {"user": mine.conversation.user_id})
    assert [m.pk for m in response.context["cl"].result_list] == [mine.pk]
    html = response.content.decode()
    assert mine.conversation.user.username in html
    assert theirs.conversation.user.username not in html


def test_thread_filter_lists_the_threads_runs_and_tool_calls(staff_client):
    call = ToolCallFactory()
    thread = call.message.conversation
    run = AgentRunFactory(conversation=thread)
    ToolCallFactory()
    AgentRunFactory()
    for model, expected in ((ToolCall, call.pk), (AgentRun, run.pk)):
        response = staff_client.get(_changelist(model), {"thread": thread.pk})
        assert [row.pk for row in response.context["cl"].result_list] == [expected]


def test_thread_filter_lists_tool_calls_newest_message_first_and_no_other_threads(staff_client):
    thread = ConversationFactory()
    older = MessageFactory(conversation=thread, role=Message.Role.ASSISTANT)
    newer = MessageFactory(conversation=thread, role=Message.Role.ASSISTANT)
    # Stored after the newer message's calls, the older message's call still lists below them:
    # a thread's calls come in their messages' order, each message's calls newest first.
    now = newer.created_at
    newer_first = ToolCallFactory(message=newer, created_at=now + timedelta(seconds=1))
    newer_second = ToolCallFactory(message=newer, created_at=now + timedelta(seconds=2))
    late_older = ToolCallFactory(message=older, created_at=now + timedelta(seconds=3))
    ToolCallFactory(created_at=now + timedelta(seconds=4))
    response = staff_client.get(_changelist(ToolCall), {"thread": thread.pk})
    assert [row.pk for row in response.context["cl"].result_list] == [
        newer_second.pk,
        newer_first.pk,
        late_older.pk,
    ]
    unfiltered = staff_client.get(_changelist(ToolCall))
    assert [row.pk for row in unfiltered.context["cl"].result_list][1:] == [
        late_older.pk,
        newer_second.pk,
        newer_first.pk,
    ]


def test_thread_filtered_tool_calls_cost_the_same_queries_for_two_calls_and_forty(staff_client):
    message = MessageFactory(role=Message.Role.ASSISTANT)
    thread = message.conversation
    ToolCallFactory.create_batch(2, message=message)

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            response = staff_client.get(_changelist(ToolCall), {"thread": thread.pk})
        assert response.status_code == 200
        return len(captured)

    few = queries()
    ToolCallFactory.create_batch(19, message=message)
    ToolCallFactory.create_batch(19, message__conversation=thread)
    assert queries() == few


def test_run_page_shows_its_error_and_links_thread_parent_and_child_runs(staff_client):
    parent = AgentRunFactory(status=AgentRun.Status.FAILED, error="model error: 8 steps used")
    child = AgentRunFactory(
        conversation=ConversationFactory(user=parent.user, parent=parent.conversation),
        run_type=AgentRun.RunType.SUBAGENT,
        parent_run=parent,
    )
    html = _html(staff_client, _change(AgentRun, parent.pk))
    assert "model error: 8 steps used" in html
    assert f'href="{_change(AgentRun, child.pk)}"' in html
    assert f'href="{_change(Conversation, parent.conversation_id)}"' in html
    assert f"{_changelist(Message)}?thread={parent.conversation_id}" in html
    child_html = _html(staff_client, _change(AgentRun, child.pk))
    assert f'href="{_change(AgentRun, parent.pk)}">{parent.run_id}</a>' in child_html


def test_a_failed_run_without_a_reason_says_so(staff_client):
    run = AgentRunFactory(status=AgentRun.Status.FAILED)
    assert "no reason was recorded" in _html(staff_client, _change(AgentRun, run.pk))


def test_times_show_seconds_and_the_time_zone(staff_client):
    run = AgentRunFactory()
    claim_run(worker_id="worker-9", run_id=run.run_id)
    html = _html(staff_client, _change(AgentRun, run.pk))
    stamp = re.compile(r"<span>\d{4}-\d\d-\d\d</span> <span>\d\d:\d\d:\d\d UTC</span>")
    assert len(stamp.findall(html)) >= 3  # created, started, lease expiry
    assert re.search(r"database time \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", html)


def test_non_obvious_fields_carry_help_texts(staff_client):
    run = AgentRunFactory()
    html = _html(staff_client, _change(AgentRun, run.pk))
    assert "The worker process that holds the run's lease" in html
    assert "when the lease lapses" in html
    thread_html = _html(staff_client, _change(Conversation, run.conversation_id))
    assert "History lookback: the agent's tools search_thread_messages" in thread_html


def test_a_thread_links_its_user_parent_children_runs_and_messages(staff_client):
    root = ConversationFactory()
    child = ConversationFactory(user=root.user, parent=root, source=Conversation.Source.AGENT_CALL)
    run = AgentRunFactory(conversation=root)
    html = _html(staff_client, _change(Conversation, root.pk))
    assert f'href="{reverse("admin:yuxi_user", args=[root.user_id])}"' in html
    assert f'href="{_change(Conversation, child.pk)}"' in html
    assert f'href="{_change(AgentRun, run.pk)}"' in html
    assert f"{_changelist(Message)}?thread={root.pk}" in html
    child_html = _html(staff_client, _change(Conversation, child.pk))
    assert f'href="{_change(Conversation, root.pk)}"' in child_html


@pytest.mark.parametrize(
    "fields",
    [{"parent": "root"}, {"source": Conversation.Source.AGENT_CALL}],
)
def test_hiding_by_design_is_a_neutral_notice_not_an_error(staff_client, fields):
    if fields.get("parent") == "root":
        fields = {"parent": ConversationFactory()}
    html = _html(staff_client, _change(Conversation, ConversationFactory(**fields).pk))
    banner = html.split("yuxi-banner", 1)[1].split("</div>", 1)[0]
    assert "That is by design" in banner
    assert "errornote" not in html and "yuxi-alert" not in html


def test_conversations_admin_never_imports_the_memory_app():
    import ast
    from pathlib import Path

    import conversations

    package = Path(conversations.__file__).parent
    for path in [
        *sorted((package / "admin").glob("*.py")),
        *sorted((package / "selectors").glob("*.py")),
    ]:
        tree = ast.parse(path.read_text())
        imported = [
            node.module if isinstance(node, ast.ImportFrom) else alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.Import | ast.ImportFrom)
            for alias in node.names
        ]
        assert not [name for name in imported if name and name.startswith("memory_app")]


def test_rows_past_an_estimate_that_falls_short_are_still_reached(staff_client, monkeypatch):
    # The planner may estimate fewer rows than there are: the estimated last page and any
    # page after it count exactly, so no row is out of reach and no page is cut short.
    messages = MessageFactory.create_batch(120)
    _analyse(Message)
    monkeypatch.setattr("conversations.admin_base.ESTIMATED_COUNT_FROM_ROWS", 1)
    monkeypatch.setattr("conversations.admin_base.planner_row_estimate", lambda queryset: 60)
    first = staff_client.get(_changelist(Message))
    assert "about 60 messages (estimated)" in first.content.decode()
    pages = {}
    for number in (1, 2, 3):
        response = staff_client.get(_changelist(Message), {"p": number})
        assert response.status_code == 200, number
        pages[number] = [m.pk for m in response.context["cl"].result_list]
    assert [len(pages[n]) for n in (1, 2, 3)] == [50, 50, 20]
    assert sorted(pages[1] + pages[2] + pages[3]) == sorted(m.pk for m in messages)
    last = staff_client.get(_changelist(Message), {"p": 3}).content.decode()
    assert "120 messages" in last and "(estimated)" not in last
    # Past the real end, as on an exact count: Django's "invalid page" redirect.
    past = staff_client.get(_changelist(Message), {"p": 9})
    assert past.status_code == 302 and past["Location"].endswith("?e=1")
