"""Every admin page of the six models: who may see it, that nothing can change, and that a
page costs the same queries however many rows stand behind it."""

import io

import pytest
from django.contrib import admin
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from conversations.models import AgentRun, Conversation, Message, ToolCall
from memory_app.models import MemoryEvent, UserConfig
from tests.factories import (
    AgentRunFactory,
    ConversationFactory,
    MemoryEventFactory,
    MessageFactory,
    ToolCallFactory,
    UserConfigFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db

MODELS = [Conversation, Message, ToolCall, AgentRun, UserConfig, MemoryEvent]


def _url(model, view, *args):
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_{view}", args=args)


@pytest.fixture
def world():
    """One row of every model, keyed by model."""
    tool_call = ToolCallFactory()
    conversation = tool_call.message.conversation
    return {
        Conversation: conversation,
        Message: tool_call.message,
        ToolCall: tool_call,
        AgentRun: AgentRunFactory(conversation=conversation),
        UserConfig: UserConfigFactory(user=conversation.user),
        MemoryEvent: MemoryEventFactory(user=conversation.user),
    }


def _pages(world):
    for model, obj in world.items():
        yield _url(model, "changelist")
        yield _url(model, "change", obj.pk)
        yield _url(model, "history", obj.pk)


def test_staff_can_view_every_changelist_change_and_history_page(staff_client, world):
    for url in _pages(world):
        assert staff_client.get(url).status_code == 200, url


@pytest.mark.parametrize("who", ["anonymous", "non_staff"])
def test_anonymous_and_non_staff_are_sent_to_the_login_page(client, world, who):
    if who == "non_staff":
        client.force_login(UserFactory())
    for url in _pages(world):
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("admin:login")), url


@pytest.mark.parametrize("model", MODELS)
def test_add_and_delete_pages_are_refused(staff_client, world, model):
    obj = world[model]
    assert staff_client.get(_url(model, "add")).status_code == 403
    assert staff_client.get(_url(model, "delete", obj.pk)).status_code == 403


def _snapshot(world):
    return {model: list(model.objects.order_by("pk").values()) for model in world}


@pytest.mark.parametrize("model", MODELS)
def test_every_post_is_refused_and_changes_nothing(staff_client, world, model):
    obj = world[model]
    before = _snapshot(world)
    posts = [
        (_url(model, "add"), {}),
        (_url(model, "change", obj.pk), {"status": "archived", "enable_memory": ""}),
        (_url(model, "delete", obj.pk), {"post": "yes"}),
        (_url(model, "changelist"), {"action": "delete_selected", "_selected_action": [obj.pk]}),
    ]
    for url, data in posts:
        assert staff_client.post(url, data).status_code == 403, url
    assert _snapshot(world) == before


def test_no_page_offers_an_add_link_or_bulk_action(staff_client, world):
    for model in MODELS:
        html = staff_client.get(_url(model, "changelist")).content.decode()
        assert _url(model, "add") not in html
        assert 'name="action"' not in html


@pytest.mark.parametrize("model", MODELS)
def test_no_changelist_offers_to_count_every_filter_choice(staff_client, world, model):
    assert "Show counts" not in staff_client.get(_url(model, "changelist")).content.decode()
    plain = _changelist_queries(staff_client, model)
    with CaptureQueriesContext(connection) as queries:
        staff_client.get(_url(model, "changelist"), {"_facets": "True"})
    assert len(queries) == plain  # no count per filter choice


FACTORIES = {
    Conversation: ConversationFactory,
    Message: MessageFactory,
    ToolCall: ToolCallFactory,
    AgentRun: AgentRunFactory,
    UserConfig: UserConfigFactory,
    MemoryEvent: MemoryEventFactory,
}


def _changelist_queries(client, model):
    with CaptureQueriesContext(connection) as queries:
        assert client.get(_url(model, "changelist")).status_code == 200
    return len(queries)


@pytest.mark.parametrize("model", MODELS)
def test_changelist_costs_the_same_queries_for_two_rows_and_for_forty(staff_client, model):
    FACTORIES[model].create_batch(2)
    few = _changelist_queries(staff_client, model)
    FACTORIES[model].create_batch(38)
    assert _changelist_queries(staff_client, model) == few
    assert few <= 8


def _grow(model, obj, count):
    """Add `count` rows of everything `obj`'s change page lists or links to."""
    if model is Conversation:
        MessageFactory.create_batch(count, conversation=obj)
        AgentRunFactory.create_batch(count, conversation=obj)
        ConversationFactory.create_batch(count, user=obj.user, parent=obj)
    elif model is Message:
        ToolCallFactory.create_batch(count, message=obj)
    elif model is AgentRun:
        AgentRunFactory.create_batch(count, conversation=obj.conversation, parent_run=obj)
        MemoryEventFactory.create_batch(count, user=obj.user, run=obj)
    elif model is UserConfig:
        run = AgentRunFactory(conversation__user=obj.user)
        MemoryEventFactory.create_batch(count, user=obj.user, run=run)
        ToolCallFactory.create_batch(count, message__conversation=run.conversation)


def _change_queries(client, url):
    client.get(url)  # warm per-process caches (content types, permissions)
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url).status_code == 200
    return len(queries)


@pytest.mark.parametrize("model", MODELS)
def test_change_page_costs_the_same_queries_for_two_related_rows_and_for_forty(
    staff_client, world, model
):
    obj = world[model]
    _grow(model, obj, 2)
    few = _change_queries(staff_client, _url(model, "change", obj.pk))
    _grow(model, obj, 38)
    assert _change_queries(staff_client, _url(model, "change", obj.pk)) == few


def test_user_page_costs_the_same_queries_for_two_threads_and_for_forty(staff_client, world):
    user = world[Conversation].user
    url = reverse("admin:auth_user_change", args=[user.pk])
    ConversationFactory.create_batch(2, user=user)
    few = _change_queries(staff_client, url)
    ConversationFactory.create_batch(38, user=user)
    AgentRunFactory.create_batch(38, conversation=world[Conversation])
    assert _change_queries(staff_client, url) == few


def _search_terms(world):
    run = world[AgentRun]
    return {
        Conversation: world[Conversation].thread_id,
        Message: world[Message].conversation.thread_id,
        ToolCall: world[ToolCall].tool_call_id,
        AgentRun: str(run.run_id),
        UserConfig: world[UserConfig].user.username,
        MemoryEvent: str(world[MemoryEvent].run.run_id),
    }


@pytest.mark.parametrize("model", MODELS)
def test_search_finds_the_row_by_its_public_id(staff_client, world, model):
    FACTORIES[model].create_batch(2)
    response = staff_client.get(_url(model, "changelist"), {"q": _search_terms(world)[model]})
    assert response.status_code == 200
    assert [obj.pk for obj in response.context["cl"].result_list] == [world[model].pk]


FILTERS = [
    (Conversation, "status", "archived"),
    (Conversation, "source", "agent_call"),
    (Message, "role", "tool"),
    (Message, "message_type", "tool_result"),
    (ToolCall, "status", "error"),
    (ToolCall, "name", "read_thread_messages"),
    (AgentRun, "status", "running"),
    (AgentRun, "run_type", "subagent"),
    (UserConfig, "enable_memory", False),
    (MemoryEvent, "kind", "user_cleared"),
]


@pytest.mark.parametrize(("model", "field", "value"), FILTERS)
def test_list_filters_narrow_the_changelist(staff_client, world, model, field, value):
    match = FACTORIES[model](**{field: value})
    query = {f"{field}__exact": int(value) if isinstance(value, bool) else value}
    response = staff_client.get(_url(model, "changelist"), query)
    assert response.status_code == 200
    assert [obj.pk for obj in response.context["cl"].result_list] == [match.pk]


# Fields a change page shows through a stand-in (a link, a time with seconds and zone).
STAND_INS = {
    (UserConfig, "enable_memory"): "memory_switch",
    (UserConfig, "memory_write_approval"): "approval_switch",
    (Conversation, "user"): "user_link",
    (Conversation, "parent"): "parent_link",
    (Conversation, "created_at"): "created",
    (Conversation, "updated_at"): "updated",
    (Message, "conversation"): "thread_link",
    (Message, "owner"): "owner_link",
    (Message, "created_at"): "created",
    (ToolCall, "message"): "message_link",
    (ToolCall, "created_at"): "created",
    (AgentRun, "user"): "user_link",
    (AgentRun, "conversation"): "thread_link",
    (AgentRun, "parent_run"): "parent_run_link",
    (AgentRun, "resumes"): "resumes_link",
    (AgentRun, "lease_expires_at"): "lease_expires",
    (AgentRun, "created_at"): "created",
    (AgentRun, "started_at"): "started",
    (AgentRun, "finished_at"): "finished",
    (UserConfig, "user"): "user_link",
    (MemoryEvent, "user"): "user_link",
    (MemoryEvent, "actor"): "actor_link",
    (MemoryEvent, "run"): "provenance",
    (MemoryEvent, "created_at"): "created",
}


@pytest.mark.parametrize("model", MODELS)
def test_change_page_shows_every_model_field_read_only(rf, model):
    model_admin = admin.site._registry[model]
    request = rf.get("/")
    shown = model_admin.get_fields(request)
    assert model_admin.get_readonly_fields(request) == shown
    for field in model._meta.fields:
        if field.name == "id":
            continue  # the page's URL and title carry it
        expected = STAND_INS.get((model, field.name), field.name)
        assert expected in shown or f"{expected}_excerpt" in shown, field.name


def test_staff_can_view_every_page_of_the_demo_data(staff_client):
    call_command("seed_demo", stdout=io.StringIO())
    for model in MODELS:
        assert staff_client.get(_url(model, "changelist")).status_code == 200
        for pk in model.objects.values_list("pk", flat=True):
            assert staff_client.get(_url(model, "change", pk)).status_code == 200, (model, pk)


def test_a_table_postgresql_never_analysed_is_counted_exactly_not_guessed(
    staff_client, monkeypatch
):
    # A fresh demo: the table has never been analysed (TRUNCATE makes it so again), and the
    # planner's guess from its pages was "about 1990 user configs" for three rows.
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {UserConfig._meta.db_table}")
    UserConfigFactory.create_batch(3)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT reltuples FROM pg_class WHERE oid = to_regclass(%s)",
            [UserConfig._meta.db_table],
        )
        assert cursor.fetchone()[0] < 0  # never analysed
    monkeypatch.setattr("conversations.admin_base.ESTIMATED_COUNT_FROM_ROWS", 1)
    response = staff_client.get(_url(UserConfig, "changelist"))
    html = response.content.decode()
    assert "3 user configs" in html
    assert "(estimated)" not in html
    assert response.context["cl"].paginator.num_pages == 1
