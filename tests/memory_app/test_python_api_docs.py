"""What docs/python-api.md tells a backend engineer, done as they would do it."""

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage

from conversations.models import AgentRun, ToolCall
from memory_app.middleware import YuxiMemoryMiddleware
from memory_app.runtime import ChatNothingToResume, agent_run
from memory_app.services import remember_memory
from tests.factories import UserConfigFactory
from tests.servers import test_database_url

pytestmark = pytest.mark.django_db(transaction=True)

# The setup docs/python-api.md shows, then one run of a team's own loop.
SERVICE = """
import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "yuxi_site.settings")
django.setup()

from memory_app.runtime import ChatNothingToResume, agent_run

with agent_run(user_id={user_id}, thread_id=None) as run:
    print(run.run_id)
"""


def test_a_service_of_its_own_sets_django_up_as_documented_and_runs_an_agent_run():
    user = UserConfigFactory().user
    env = {
        **os.environ,
        "DATABASE_URL": test_database_url(),
        "WORKSPACE_ROOT": str(settings.WORKSPACE_ROOT),
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)
    result = subprocess.run(
        [sys.executable, "-c", SERVICE.format(user_id=user.pk)],
        cwd=Path(settings.BASE_DIR),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    run_id = result.stdout.strip()
    assert AgentRun.objects.get(run_id=run_id).status == AgentRun.Status.SUCCEEDED


class _ToolCapableFakeModel(GenericFakeChatModel):
    """The doc's advice for a test model: `bind_tools` returning the model itself."""

    def bind_tools(self, tools, **kwargs):
        return self


def _answer(model) -> str:
    user = UserConfigFactory(enable_memory=True).user
    with agent_run(user_id=user.pk, thread_id=None) as run:
        memory = YuxiMemoryMiddleware.for_run(run.ctx)
        agent = create_agent(model, tools=[], middleware=[memory])
        result = agent.invoke({"messages": [HumanMessage("hi")]}, config={"max_concurrency": 1})
    return result["messages"][-1].text


def test_a_model_without_bind_tools_fails_with_a_bare_not_implemented_error():
    with pytest.raises(NotImplementedError):
        _answer(GenericFakeChatModel(messages=iter([AIMessage("hello")])))


def test_a_test_model_whose_bind_tools_returns_itself_answers():
    assert _answer(_ToolCapableFakeModel(messages=iter([AIMessage("hello")]))) == "hello"


# --- approval in your own agent ---------------------------------------------------------------


def _recipe(section: str) -> str:
    """The first Python code block under `## <section>` in docs/python-api.md."""
    text = (Path(settings.BASE_DIR) / "docs" / "python-api.md").read_text(encoding="utf-8")
    body = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    return body.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_approval_recipe_interrupts_the_teams_write_then_the_users_decision_writes_it(
    agents_file,
):
    user = UserConfigFactory(enable_memory=True, memory_write_approval=True).user
    namespace: dict = {}
    exec(_recipe("Approval in your own agent"), namespace)
    team_turn = namespace["team_turn"]

    thread_id, _, approval = team_turn(user.pk, text="remember that I drink oolong tea")
    assert approval["content"] == "I drink oolong tea"
    assert not agents_file(user.pk, "MEMORY.md").exists()
    stopped = AgentRun.objects.get(user=user)
    assert stopped.status == AgentRun.Status.INTERRUPTED
    call = ToolCall.objects.get(tool_call_id=approval["tool_call_id"])
    assert call.status == ToolCall.Status.PENDING

    _, reply, approval = team_turn(user.pk, thread_id, decision={"decision": "approve"})
    assert approval is None
    assert agents_file(user.pk, "MEMORY.md").read_text() == "I drink oolong tea\n"
    call.refresh_from_db()
    assert call.status == ToolCall.Status.SUCCESS
    assert json.loads(call.output)["status"] == "added"  # never `denied`
    resume = AgentRun.objects.get(resumes=stopped)
    assert (resume.run_type, resume.status) == ("resume", AgentRun.Status.SUCCEEDED)
    assert reply == "Saved to memory."


def test_a_decision_for_a_thread_with_nothing_pending_is_refused_as_chat_refuses_it():
    user = UserConfigFactory(enable_memory=True, memory_write_approval=True).user
    with agent_run(user_id=user.pk, thread_id=None) as run:
        thread_id = run.ctx.thread_id
    decided = agent_run(user_id=user.pk, thread_id=thread_id, resume={"decision": "approve"})
    with pytest.raises(ChatNothingToResume), decided:
        pass  # pragma: no cover


def test_docs_show_remember_memorys_real_signature_and_the_tool_passes_its_call_id_itself():
    assert list(inspect.signature(remember_memory).parameters) == ["ctx", "content", "replaces"]
    docs = Path(settings.BASE_DIR) / "docs"
    shown = (docs / "memory-writes.md").read_text()
    assert "`remember_memory(ctx, content, replaces=None) -> MemoryWriteResult" in shown
    assert "remember_tool_call(ctx, *, content, replaces, tool_call_id)" in shown
    assert "current_tool_call_id" not in shown
    for page in docs.glob("*.md"):
        assert "tool_call_id=None" not in page.read_text(), page.name
    with pytest.raises(TypeError):
        remember_memory(None, "fact", tool_call_id="call_1")
