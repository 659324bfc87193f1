"""What docs/python-api.md tells a backend engineer, done as they would do it."""

import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage

from conversations.models import AgentRun
from memory_app.middleware import YuxiMemoryMiddleware
from memory_app.runtime import agent_run
from memory_app.services import remember_memory
from tests.factories import UserConfigFactory

pytestmark = pytest.mark.django_db(transaction=True)

# The setup docs/python-api.md shows, then one run of a team's own loop.
SERVICE = """
import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "yuxi_site.settings")
django.setup()

from memory_app.runtime import agent_run

with agent_run(user_id={user_id}, thread_id=None) as run:
    print(run.run_id)
"""


def test_a_service_of_its_own_sets_django_up_as_documented_and_runs_an_agent_run():
    user = UserConfigFactory().user
    database = connection.settings_dict
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{database['USER']}@{database['HOST']}:{database['PORT']}/"
        f"{database['NAME']}",
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


def test_docs_show_remember_memorys_real_signature_and_the_id_travels_in_a_context_variable():
    assert list(inspect.signature(remember_memory).parameters) == ["ctx", "content", "replaces"]
    docs = Path(settings.BASE_DIR) / "docs"
    shown = (docs / "memory-writes.md").read_text()
    assert "`remember_memory(ctx, content, replaces=None) -> MemoryWriteResult" in shown
    assert "current_tool_call_id" in shown
    for page in docs.glob("*.md"):
        assert "tool_call_id=None" not in page.read_text(), page.name
    with pytest.raises(TypeError):
        remember_memory(None, "fact", tool_call_id="call_1")
