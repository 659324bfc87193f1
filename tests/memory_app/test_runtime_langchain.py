"""The runtime as a LangChain integration: the middleware in a team's own `create_agent`,
`agent_run`, `ChatOpenAI` on the wire, the run's limits over HTTP, leases and query budgets."""

import asyncio
import dataclasses
import json
from urllib.parse import urlsplit

import pytest
from django.db import connection, connections
from django.test import Client
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from pydantic import Field

from conversations import runs
from conversations.models import AgentRun, Message, ToolCall
from conversations.runs.keeper import LeaseKeeper
from conversations.utils.statements import count_statements
from memory_app import runtime
from memory_app.middleware import MEMORY_RULES, YuxiMemoryMiddleware
from memory_app.runtime import (
    ChatError,
    ChatModelUnavailable,
    ChatRunLost,
    agent_run,
    chat,
)
from memory_app.runtime.limits import MAX_MODEL_CALLS, MAX_TOOL_CALLS_PER_REPLY
from memory_app.tool_names import SUBAGENT_TOOL_NAME
from tests.factories import ConversationFactory, UserConfigFactory, UserFactory
from tests.memory_app.graph_runs import invoke_in_run, record_agent_inputs
from tests.memory_app.models import RecordingModel, tool_reply
from tests.wire_model import Call, Reply

# Tools run on LangGraph's pool threads, which cannot see a test's transaction.
pytestmark = pytest.mark.django_db(transaction=True)

MEMORY_TOOLS = ["remember_memory", "search_thread_messages", "read_thread_messages"]
# Any 32 alphanumerics form a valid CSRF secret; Django checks that cookie and header agree.
CSRF_TOKEN = "a" * 32


class TeamModel(GenericFakeChatModel):
    """LangChain's own fake chat model, as a team might test with: canned replies, any tools
    bound, and every request's messages recorded."""

    seen: list = Field(default_factory=list)

    def bind_tools(self, tools, **kwargs):
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        self.seen.append(list(messages))
        return super()._generate(messages, stop, run_manager, **kwargs)


def memory_user(enable_memory: bool = True):
    return UserConfigFactory(enable_memory=enable_memory).user


# --- a team's own create_agent ----------------------------------------------------------------


def test_the_middleware_in_a_teams_own_agent_works_under_agent_run_and_not_after(agents_file):
    user = memory_user()
    agents_file(user.pk, "MEMORY.md").write_text("I drink oolong tea\n")
    thread = ConversationFactory(user=user)
    call = {"id": "c1", "name": "remember_memory", "args": {"content": "I live in Lyon"}}
    model = TeamModel(messages=iter([AIMessage("", tool_calls=[call]), AIMessage("Noted.")]))
    with agent_run(user_id=user.pk, thread_id=thread.thread_id) as run:
        memory = YuxiMemoryMiddleware.for_run(run.ctx)
        agent = create_agent(
            model,
            tools=[],
            system_prompt="You are the team's assistant.",
            middleware=[m for m in (memory,) if m],
        )
        result = agent.invoke({"messages": [HumanMessage("remember that I live in Lyon")]})
        assert AgentRun.objects.get(run_id=run.run_id).status == "running"
    assert [tool.name for tool in memory.tools] == MEMORY_TOOLS
    assert json.loads(result["messages"][2].text)["status"] == "added"
    assert result["messages"][-1].text == "Noted."
    assert agents_file(user.pk, "MEMORY.md").read_text() == "I drink oolong tea\nI live in Lyon\n"
    # Every model call got the memory section, once, after the team's own prompt.
    for messages in model.seen:
        system = messages[0].text
        assert system.startswith("You are the team's assistant.")
        assert system.count(MEMORY_RULES) == 1 and system.count("I drink oolong tea") == 1
    finished = AgentRun.objects.get(run_id=run.run_id)
    assert (finished.status, finished.worker_id, finished.error) == ("succeeded", None, "")
    remember = memory.tools[0]
    assert json.loads(remember.invoke({"content": "too late"}))["status"] == "denied"
    assert "too late" not in agents_file(user.pk, "MEMORY.md").read_text()


def test_the_middleware_adds_memory_in_the_async_hook_too(agents_file):
    user = memory_user()
    agents_file(user.pk, "MEMORY.md").write_text("I drink oolong tea\n")
    model = TeamModel(messages=iter([AIMessage("Hello.")]))
    with agent_run(user_id=user.pk, thread_id=None) as run:
        memory = YuxiMemoryMiddleware.for_run(run.ctx)
        agent = create_agent(model, system_prompt="Team prompt.", middleware=[memory])
        result = asyncio.run(agent.ainvoke({"messages": [HumanMessage("hi")]}))
    assert result["messages"][-1].text == "Hello."
    [messages] = model.seen
    assert messages[0].text.count("I drink oolong tea") == 1
    assert messages[0].text.startswith("Team prompt.")


def test_an_exception_in_a_teams_loop_fails_the_run_with_its_error_and_is_re_raised():
    user = memory_user()
    with pytest.raises(KeyError), agent_run(user_id=user.pk, thread_id=None) as run:
        raise KeyError("boom")
    failed = AgentRun.objects.get(run_id=run.run_id)
    assert (failed.status, failed.worker_id) == ("failed", None)
    assert "KeyError" in failed.error


def test_a_subagent_context_gets_no_middleware():
    user = memory_user()
    with agent_run(user_id=user.pk, thread_id=None) as run:
        child = ConversationFactory(user=user)
        sub = runs.start_run(
            user_id=user.pk,
            conversation=child,
            request_id=run.ctx.request_id,
            worker_id=run.ctx.worker_id,
            run_type=AgentRun.RunType.SUBAGENT,
            parent_run=AgentRun.objects.get(run_id=run.run_id),
        )
        sub_ctx = runtime.ToolRuntimeContext(
            uid=str(user.pk),
            thread_id=child.thread_id,
            run_id=str(sub.run_id),
            request_id=run.ctx.request_id,
            worker_id=run.ctx.worker_id,
        )
        assert YuxiMemoryMiddleware.for_run(sub_ctx) is None
        assert YuxiMemoryMiddleware.for_run(run.ctx) is not None


def test_agent_run_refuses_inside_a_transaction_and_for_an_inactive_user():
    from django.db import transaction

    user = memory_user()
    with transaction.atomic(), pytest.raises(ChatError), agent_run(user_id=user.pk, thread_id=None):
        pass
    inactive = UserFactory(is_active=False)
    with pytest.raises(ChatError), agent_run(user_id=inactive.pk, thread_id=None):
        pass
    assert not AgentRun.objects.exists()


# --- ChatOpenAI on the wire -------------------------------------------------------------------


def logged_in(user) -> Client:
    from django.conf import settings

    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    client.cookies[settings.CSRF_COOKIE_NAME] = CSRF_TOKEN
    return client


def say(client: Client, message: str):
    return client.post(
        "/api/chat/",
        data=json.dumps({"message": message}),
        content_type="application/json",
        HTTP_X_CSRFTOKEN=CSRF_TOKEN,
    )


def test_chat_drives_chat_openai_through_a_tool_round_trip(wire_model, agents_file):
    user = memory_user()
    wire_model.answer(
        Reply(calls=(Call("remember_memory", '{"content": "I like rain"}', id="call_9"),)),
        Reply(text="Saved."),
    )
    turn = chat(user_id=user.pk, message="remember that I like rain")
    assert turn.reply == "Saved."
    assert turn.tool_calls == [{"name": "remember_memory", "status": "success"}]
    assert agents_file(user.pk, "MEMORY.md").read_text() == "I like rain\n"
    first, second = (request.body for request in wire_model.requests)
    assert [tool["function"]["name"] for tool in first["tools"]] == [
        *MEMORY_TOOLS,
        SUBAGENT_TOOL_NAME,
    ]
    assert second["messages"][-2]["tool_calls"][0]["id"] == "call_9"
    tool_message = second["messages"][-1]
    assert (tool_message["role"], tool_message["tool_call_id"]) == ("tool", "call_9")
    assert json.loads(tool_message["content"])["status"] == "added"
    run = AgentRun.objects.get(run_id=turn.run_id)
    wire = json.dumps([dataclasses.asdict(request) for request in wire_model.requests])
    assert turn.run_id not in wire and run.request_id not in wire and run.worker_id is None


def test_an_http_error_of_the_model_fails_the_run_with_its_error_and_the_api_answers_502(
    settings, wire_model
):
    settings.LLM_MAX_RETRIES = 0
    user = memory_user()
    wire_model.answer(Reply(status=500))
    response = say(logged_in(user), "hi")
    assert (response.status_code, response.json()) == (
        502,
        {"error": "the model is unavailable, try again"},
    )
    run = AgentRun.objects.get()
    assert (run.status, run.worker_id) == ("failed", None)
    # The provider's own message ("wire model error 500") may echo the request: never kept.
    assert "HTTP 500" in run.error and "wire model error" not in run.error


def test_a_model_failure_names_the_model_the_endpoints_host_and_the_causes_class(
    settings, wire_model
):
    settings.LLM_MAX_RETRIES = 0
    settings.LLM_MODEL = "smol-test"
    user = memory_user()
    wire_model.answer(Reply(status=500))
    host = urlsplit(wire_model.url).netloc
    with pytest.raises(ChatModelUnavailable) as refused:
        chat(user_id=user.pk, message="hi")
    message = str(refused.value)
    assert f"smol-test at {host}" in message and "InternalServerError" in message
    assert "wire model error" not in message
    # Staff see the same on the run's page.
    assert f"the model call to smol-test at {host} failed" in AgentRun.objects.get().error


def test_a_model_timeout_is_retried_llm_max_retries_times_then_fails_the_run(settings, wire_model):
    settings.LLM_TIMEOUT_SECONDS = 0.5
    settings.LLM_MAX_RETRIES = 1
    user = memory_user()
    never = Reply(text="too late", first_token_after=60)  # until the server stops
    wire_model.answer(never, never)
    with pytest.raises(ChatModelUnavailable):
        chat(user_id=user.pk, message="hi")
    assert len(wire_model.requests) == 1 + settings.LLM_MAX_RETRIES
    run = AgentRun.objects.get()
    assert run.status == "failed" and "Timeout" in run.error


def test_a_reply_with_nine_tool_calls_fails_the_run_with_502_and_none_runs(wire_model, agents_file):
    user = memory_user()
    calls = [
        Call("remember_memory", json.dumps({"content": f"fact {i}"}), id=f"c{i}")
        for i in range(MAX_TOOL_CALLS_PER_REPLY + 1)
    ]
    wire_model.answer(Reply(calls=tuple(calls)))
    response = say(logged_in(user), "remember many things")
    assert response.status_code == 502
    run = AgentRun.objects.get()
    assert run.status == "failed" and str(MAX_TOOL_CALLS_PER_REPLY) in run.error
    assert not ToolCall.objects.exists()
    assert not agents_file(user.pk, "MEMORY.md").exists()


def test_a_ninth_model_call_fails_the_run_with_502(wire_model):
    user = memory_user()
    calls = [Call("no_such_tool", "{}", id=f"c{i}") for i in range(MAX_MODEL_CALLS + 1)]
    wire_model.answer(*(Reply(calls=(call,)) for call in calls))
    response = say(logged_in(user), "loop forever")
    assert response.status_code == 502
    assert len(wire_model.requests) == MAX_MODEL_CALLS
    run = AgentRun.objects.get()
    assert run.status == "failed" and f"{MAX_MODEL_CALLS} model calls" in run.error
    assert ToolCall.objects.filter(status="error").count() == MAX_MODEL_CALLS


# --- leases -------------------------------------------------------------------------------


# Only a guard against a keeper that never beats: the wait fails instead of hanging.
KEEPER_WAIT_SECONDS = 60


def test_a_lease_lost_mid_run_stops_it_before_its_next_model_call_and_refuses_its_tools(
    monkeypatch, agents_file
):
    user = memory_user()

    def renewal_fails(keeper, held):
        return set(), set()  # nothing renewed, nothing busy: every held lease is lost

    inputs = record_agent_inputs(monkeypatch)

    def lose_the_lease(step):
        run = AgentRun.objects.get(run_type="chat")
        lost = runs.lease_keeper().lost_event(str(run.run_id))
        monkeypatch.setattr(LeaseKeeper, "_renew", renewal_fails)
        runs.lease_keeper()._wake.set()  # beat now rather than a third of a lease from now
        assert lost.wait(KEEPER_WAIT_SECONDS)

    reply = tool_reply(("c1", "remember_memory", {"content": "written after the loss"}))
    model = RecordingModel(replies=[reply], before_step=lose_the_lease)
    with pytest.raises(ChatRunLost):
        chat(user_id=user.pk, message="remember it", model=model)
    assert len(model.calls) == 1  # no model call after the loss
    assert not agents_file(user.pk, "MEMORY.md").exists()
    run = AgentRun.objects.get()
    # The database still shows this worker's lease (only renewal failed), yet its tools refuse.
    assert run.status == "running" and run.worker_id
    later = invoke_in_run(inputs[0].graph.tools[0], {"content": "later"}, context=inputs[0].context)
    assert json.loads(later)["status"] == "denied"
    assert not agents_file(user.pk, "MEMORY.md").exists()
    assert list(Message.objects.values_list("role", flat=True)) == ["user"]


# --- query budget ---------------------------------------------------------------------------

PLAIN_TURN_MAX_STATEMENTS = 5
# A remembering turn: the plain turn's, the write's own (locks, run row, switch, ledger), and
# the credential check's two lookups (the turn's own message, then the user's recent messages
# of any thread that share a piece of the content or of that message).
REMEMBER_TURN_MAX_STATEMENTS = 11


def test_a_plain_turn_in_an_existing_thread_sends_at_most_5_statements_on_all_connections():
    user = memory_user()
    first = chat(user_id=user.pk, message="hello")
    with count_statements() as counted:
        chat(user_id=user.pk, message="and again", thread_id=first.thread_id)
    assert len(counted) <= PLAIN_TURN_MAX_STATEMENTS, counted.statements


def test_a_remember_turn_sends_at_most_11_statements_on_all_connections(agents_file):
    user = memory_user()
    first = chat(user_id=user.pk, message="hello")
    with count_statements() as counted:
        turn = chat(user_id=user.pk, message="remember that I like tea", thread_id=first.thread_id)
    assert turn.tool_calls == [{"name": "remember_memory", "status": "success"}]
    # The tool ran on another thread, on another connection: the count includes it.
    assert any("pg_advisory_xact_lock" in sql for sql in counted.statements)
    assert len(counted) <= REMEMBER_TURN_MAX_STATEMENTS, counted.statements


def checked_out_connections() -> int:
    stats = connections["default"].pool.get_stats()
    return stats["pool_size"] - stats["pool_available"]


def test_no_connection_outlives_a_turn_on_any_thread():
    user = memory_user()
    connection.close()
    before = checked_out_connections()
    turn = chat(user_id=user.pk, message="remember that I like tea")
    assert turn.tool_calls == [{"name": "remember_memory", "status": "success"}]
    # Every connection the turn took (its own, the tool thread's) is back in the pool.
    assert checked_out_connections() == before
    # The lease keeper closed its own connection when the process held no run any more.
    assert runs.lease_keeper()._conn is None
