"""The Chat service's shared graphs: compiled once per shape and model, each run bringing its
own identity, prompt and memory at invocation."""

import time

import pytest
from django.test import override_settings
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import HumanMessage

from memory_app.middleware import YuxiMemoryMiddleware
from memory_app.runtime import agent_middleware, agent_run, chat, graphs, warm_up_graphs
from memory_app.runtime.guards import (
    ConnectionRelease,
    CredentialRefusal,
    LeaseGuard,
    ModelErrors,
    ReplyCheck,
    RunSystemMessage,
    StartedCalls,
    UniqueToolCallIds,
)
from tests.concurrency import race
from tests.factories import UserConfigFactory
from tests.memory_app.graph_runs import record_agent_inputs
from tests.memory_app.models import RecordingModel, tool_reply

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def compiles(monkeypatch):
    """Every `create_agent` the runtime's graphs module calls, from now on."""
    made = []
    real = graphs.create_agent

    def counting(*args, **kwargs):
        made.append(kwargs.get("middleware"))
        return real(*args, **kwargs)

    monkeypatch.setattr(graphs, "create_agent", counting)
    return made


@pytest.fixture
def slow_compiles(compiles, monkeypatch):
    """`compiles`, each taking a fifth of a second: turns arriving together overlap it."""
    counting = graphs.create_agent

    def slow(*args, **kwargs):
        time.sleep(0.2)
        return counting(*args, **kwargs)

    monkeypatch.setattr(graphs, "create_agent", slow)
    return compiles


def every_shape_once(user_on, user_off, user_approval) -> None:
    """A turn of each shape the Chat service runs: memory on, memory off, approval (the
    interrupted turn and its resume), and a delegation to the sub-agent."""
    chat(user_id=user_on.pk, message="hello")
    chat(user_id=user_off.pk, message="hello")
    asked = chat(user_id=user_approval.pk, message="remember that I like tea")
    assert asked.status == "interrupted"
    chat(user_id=user_approval.pk, thread_id=asked.thread_id, resume={"decision": "reject"})
    chat(user_id=user_on.pk, message="ask the sub-agent: say hi")


def test_in_steady_state_a_turn_of_every_shape_compiles_no_graph(compiles):
    users = (
        UserConfigFactory(enable_memory=True).user,
        UserConfigFactory(enable_memory=False).user,
        UserConfigFactory(enable_memory=True, memory_write_approval=True).user,
    )
    every_shape_once(*users)
    first = len(compiles)
    assert first > 0
    every_shape_once(*users)
    every_shape_once(*users)
    assert len(compiles) == first  # 0 compiles per turn once each shape has been seen


@override_settings(LLM_MAX_RETRIES=4)  # a model no test has compiled for yet
def test_turns_that_need_a_new_graph_at_once_wait_for_its_one_compile(slow_compiles):
    users = [UserConfigFactory(enable_memory=True).user for _ in range(6)]
    turns = race(lambda user: chat(user_id=user.pk, message="hello"), [(u,) for u in users])
    assert [turn.status for turn in turns] == ["succeeded"] * 6
    assert len(slow_compiles) == 1


@override_settings(LLM_MAX_RETRIES=5)
def test_warming_up_compiles_the_graphs_a_fresh_processs_first_turns_run_on(compiles):
    warm_up_graphs()
    assert len(compiles) == 3  # the chat agent with memory on and off, and the sub-agent
    chat(user_id=UserConfigFactory(enable_memory=True).user.pk, message="hello")
    chat(user_id=UserConfigFactory(enable_memory=False).user.pk, message="hello")
    chat(user_id=UserConfigFactory(enable_memory=True).user.pk, message="ask the sub-agent: hi")
    warm_up_graphs()
    assert len(compiles) == 3


def test_a_changed_model_setting_compiles_a_new_graph_and_keeps_it(compiles):
    user = UserConfigFactory(enable_memory=True).user
    chat(user_id=user.pk, message="hello")
    seen = len(compiles)
    with override_settings(LLM_MAX_RETRIES=3):
        chat(user_id=user.pk, message="hello")
        assert len(compiles) == seen + 1
        chat(user_id=user.pk, message="hello")
        assert len(compiles) == seen + 1
    chat(user_id=user.pk, message="hello")
    assert len(compiles) == seen + 1  # the first setting's graph was kept


def test_a_model_object_gets_its_own_graph_and_keeps_it_for_its_turns(compiles):
    user = UserConfigFactory(enable_memory=True).user
    model = RecordingModel()
    chat(user_id=user.pk, message="hello", model=model)
    seen = len(compiles)
    chat(user_id=user.pk, message="hello again", model=model)
    assert len(compiles) == seen
    chat(user_id=user.pk, message="hello", model=RecordingModel())
    assert len(compiles) == seen + 1
    assert len(model.calls) == 2  # the graph ran the model object it was compiled for


def test_the_shared_context_is_read_per_run_not_baked_into_the_graph(agents_file, compiles):
    user = UserConfigFactory(enable_memory=True).user
    model = RecordingModel()
    agents_file(user.pk, "AGENTS.md").write_text("Answer in haiku.")
    agents_file(user.pk, "MEMORY.md").write_text("- I like tea\n")
    chat(user_id=user.pk, message="hello", model=model)
    seen = len(compiles)
    agents_file(user.pk, "AGENTS.md").write_text("Answer in limericks.")
    agents_file(user.pk, "MEMORY.md").write_text("- I like coffee\n")
    chat(user_id=user.pk, message="hello", model=model)
    assert len(compiles) == seen
    first, second = (call["messages"][0].text for call in model.calls)
    assert "haiku" in first and "I like tea" in first
    assert "limericks" in second and "I like coffee" in second
    assert "haiku" not in second and "I like tea" not in second


def test_the_switch_turned_off_between_turns_takes_the_tools_away_on_one_shared_model(compiles):
    config = UserConfigFactory(enable_memory=True)
    model = RecordingModel()
    chat(user_id=config.user.pk, message="hello", model=model)
    config.enable_memory = False
    config.save()
    chat(user_id=config.user.pk, message="hello", model=model)
    on, off = (set(call["tools"]) for call in model.calls)
    assert "remember_memory" in on
    assert not off & {"remember_memory", "search_thread_messages", "read_thread_messages"}


def test_concurrent_turns_of_two_users_on_one_shared_graph_each_see_only_their_own_memory(
    agents_file,
):
    users = [UserConfigFactory(enable_memory=True).user for _ in range(2)]
    for user, fact in zip(users, ("I keep bees", "I sail on Sundays"), strict=True):
        agents_file(user.pk, "MEMORY.md").write_text(f"- {fact}\n")

    def recall(user_id: int) -> str:
        return chat(user_id=user_id, message="What do you remember?").reply

    for _ in range(3):
        bees, sails = race(recall, [(user.pk,) for user in users])
        assert "I keep bees" in bees and "I sail on Sundays" not in bees
        assert "I sail on Sundays" in sails and "I keep bees" not in sails


def test_each_turn_runs_with_its_own_run_context(monkeypatch):
    user = UserConfigFactory(enable_memory=True).user
    inputs = record_agent_inputs(monkeypatch)
    first = chat(user_id=user.pk, message="hello")
    second = chat(user_id=user.pk, message="hello", thread_id=first.thread_id)
    assert inputs[0].graph.agent is inputs[1].graph.agent
    assert [turn.context.run_id for turn in inputs] == [first.run_id, second.run_id]
    assert inputs[0].context.calls is not inputs[1].context.calls


@override_settings(LLM_MAX_RETRIES=6)
def test_a_failed_compile_is_tried_again_by_the_next_turn_that_needs_the_graph(
    compiles, monkeypatch
):
    counting = graphs.create_agent
    failures = [LookupError("no such model")]

    def failing_once(*args, **kwargs):
        if failures:
            raise failures.pop()
        return counting(*args, **kwargs)

    monkeypatch.setattr(graphs, "create_agent", failing_once)
    with pytest.raises(LookupError):
        graphs.warm_graph(graphs.GraphShape(memory=True))
    graphs.warm_graph(graphs.GraphShape(memory=True))
    graphs.warm_graph(graphs.GraphShape(memory=True))
    assert len(compiles) == 1  # compiled on the second try, kept for the third


# --- one path: the product's turn and a team's own agent run the same middleware -------------

_HOOKS = ("wrap_model_call", "awrap_model_call", "wrap_tool_call", "awrap_tool_call")


@pytest.fixture
def hook_calls(monkeypatch):
    """Every call of a hook of the middleware the runtime builds graphs from, from now on, as
    (class, hook name, middleware object), in order."""
    calls = []
    middleware = graphs.agent_middleware(memory=YuxiMemoryMiddleware.for_graph(), approval=True)
    for cls in {type(m) for m in middleware}:
        for hook in _HOOKS:
            real = getattr(cls, hook)
            if real is getattr(AgentMiddleware, hook):
                continue

            def counting(self, request, handler, _real=real, _cls=cls, _hook=hook):
                calls.append((_cls, _hook.removeprefix("a"), self))
                return _real(self, request, handler)

            monkeypatch.setattr(cls, hook, counting)
    return calls


def _classes(calls, hook: str) -> set[type]:
    return {cls for cls, name, _ in calls if name == hook}


def test_a_teams_own_create_agent_and_the_products_turn_run_through_the_same_middleware(
    hook_calls,
):
    user = UserConfigFactory(enable_memory=True).user
    searching = [tool_reply(("call_1", "search_thread_messages", {"query": "tea"}))]

    # The product's turn (async hooks, on the process loop), on a shared graph.
    chat(user_id=user.pk, message="what tea do I like?", model=RecordingModel(replies=searching))
    product, hook_calls[:] = list(hook_calls), []

    # A team's own agent (sync hooks), built as the docs show it, around its own model.
    with agent_run(user_id=user.pk, thread_id=None) as run:
        memory = YuxiMemoryMiddleware.for_run(run.ctx)
        agent = create_agent(
            RecordingModel(replies=list(searching)),
            tools=[],
            system_prompt="You are the support assistant.",
            middleware=agent_middleware(memory=memory, approval=False, ctx=run.ctx),
        )
        agent.invoke(
            {"messages": [HumanMessage("what tea do I like?")]},
            context=run.ctx,
            config={"max_concurrency": 1},
        )
    team = hook_calls

    # The same middleware classes ran every model call and every tool call on both paths:
    # the memory middleware and each of the run guard's rules.
    guard_model = {LeaseGuard, ReplyCheck, UniqueToolCallIds, ModelErrors, ConnectionRelease}
    guard_tool = {LeaseGuard, ReplyCheck, CredentialRefusal, StartedCalls, ConnectionRelease}
    for calls in (product, team):
        assert {YuxiMemoryMiddleware, *guard_model} <= _classes(calls, "wrap_model_call")
        assert guard_tool <= _classes(calls, "wrap_tool_call")
    # Only the product's shared graph brings the run's own system message with the run.
    assert RunSystemMessage in _classes(product, "wrap_model_call")
    assert RunSystemMessage not in _classes(team, "wrap_model_call")
    # The product's memory middleware is the one its shared graph holds, built without a run.
    [shared_memory] = {m for cls, _, m in product if cls is YuxiMemoryMiddleware}
    assert shared_memory.ctx is None and shared_memory.memory_prompt is None
