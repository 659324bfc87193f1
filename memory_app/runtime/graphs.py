"""The agent graphs: `build_chatbot_graph` (the chat agent, with memory when on) and
`build_subagent_graph` (a sub-agent: shared context only), both `create_agent` graphs under the
run's limits and `RunGuard`.

Building a graph reads the database (the memory check) but runs nothing: a turn builds its
graph in `run_agent`'s `prepare` step, inside the turn, so a failure there fails the run.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, ModelCallLimitMiddleware
from langchain_core.language_models import BaseChatModel
from langchain_core.tools import BaseTool
from langgraph.checkpoint.base import BaseCheckpointSaver

from conversations.runs import ToolRuntimeContext
from memory_app.conf import DEFAULT_AGENT_INSTRUCTIONS, setting
from memory_app.context import build_agent_input_context
from memory_app.llm import chat_model_from_settings
from memory_app.middleware import YuxiMemoryMiddleware
from memory_app.runtime.approval import approval_middleware
from memory_app.runtime.guard import RunGuard
from memory_app.runtime.limits import MAX_MODEL_CALLS

# The chat agent's default role prompt; a host replaces it with `YUXI_AGENT_INSTRUCTIONS`.
CHATBOT_PROMPT = DEFAULT_AGENT_INSTRUCTIONS
SUBAGENT_PROMPT = (
    "You are a Yuxi sub-agent doing one task for the main assistant. Answer the task "
    "directly; you have no memory of the user and no tools."
)


@dataclass(frozen=True)
class AgentGraph:
    """One run's agent: the compiled `create_agent` graph and what it was built from.

    `system_prompt` is what the model is shown as its system message (the shared context,
    plus the memory section the memory middleware adds on a chatbot graph with memory on);
    `tools` are the tools the memory middleware registered (the three, or none). `approval`:
    the graph stops before each memory write for the user's decision, and runs on a
    checkpointer (with a `thread_id` in its config).
    """

    agent: Any
    system_prompt: str
    tools: list[BaseTool]
    middleware: list[AgentMiddleware]
    approval: bool = False


def _shared_prompt(role_prompt: str, uid: str) -> str:
    return "\n\n".join(s for s in (role_prompt, build_agent_input_context(uid).render()) if s)


def _graph(
    ctx: ToolRuntimeContext,
    *,
    role_prompt: str,
    model: BaseChatModel | None,
    memory: YuxiMemoryMiddleware | None,
    extra_tools: Sequence[BaseTool],
    checkpointer: BaseCheckpointSaver | None = None,
) -> AgentGraph:
    shared = _shared_prompt(role_prompt, ctx.uid)
    middleware: list[AgentMiddleware] = [m for m in (memory,) if m is not None]
    # After-model hooks run last-listed first: the guard settles the reply's ids before the
    # approval gate and the human-in-the-loop middleware see them.
    if checkpointer is not None:
        middleware += approval_middleware()
    middleware += [
        ModelCallLimitMiddleware(run_limit=MAX_MODEL_CALLS, exit_behavior="error"),
        RunGuard(ctx),
    ]
    agent = create_agent(
        model or chat_model_from_settings(),
        tools=list(extra_tools),
        system_prompt=shared,
        middleware=middleware,
        checkpointer=checkpointer,
    )
    system_prompt = memory.with_memory(None).text if memory else ""
    return AgentGraph(
        agent=agent,
        system_prompt="\n\n".join(s for s in (shared, system_prompt) if s),
        tools=list(memory.tools) if memory else [],
        middleware=middleware,
        approval=checkpointer is not None,
    )


def build_chatbot_graph(
    ctx: ToolRuntimeContext,
    *,
    model: BaseChatModel | None = None,
    extra_tools: Sequence[BaseTool] = (),
    checkpointer: BaseCheckpointSaver | None = None,
) -> AgentGraph:
    """The top-level chat agent: its role prompt (`YUXI_AGENT_INSTRUCTIONS`, read now), the
    shared context, the memory middleware when `YuxiMemoryMiddleware.for_run(ctx)` gives one,
    and `extra_tools`. When the user approves
    each memory write and a `checkpointer` is given, the approval middleware too, on that
    checkpointer (otherwise the graph has none).

    Raises `django.db.DatabaseError` when the database cannot answer the memory check.
    """
    memory = YuxiMemoryMiddleware.for_run(ctx)
    approval = memory is not None and memory.write_approval
    return _graph(
        ctx,
        role_prompt=setting("YUXI_AGENT_INSTRUCTIONS"),
        model=model,
        memory=memory,
        extra_tools=extra_tools,
        checkpointer=checkpointer if approval else None,
    )


def build_resume_graph(
    ctx: ToolRuntimeContext,
    *,
    checkpointer: BaseCheckpointSaver,
    model: BaseChatModel | None = None,
    extra_tools: Sequence[BaseTool] = (),
) -> AgentGraph:
    """The chat agent of a `resume` run: always the interrupted graph's shape (the approval
    middleware and the three memory tools, bound to `ctx`) whatever the switches say now —
    LangGraph silently drops a decision resumed on a graph without them; the tools re-check
    at call time.

    Raises `django.db.DatabaseError` when the database cannot answer the memory check.
    """
    return _graph(
        ctx,
        role_prompt=setting("YUXI_AGENT_INSTRUCTIONS"),
        model=model,
        memory=YuxiMemoryMiddleware.for_resume(ctx),
        extra_tools=extra_tools,
        checkpointer=checkpointer,
    )


def build_subagent_graph(
    ctx: ToolRuntimeContext, *, model: BaseChatModel | None = None
) -> AgentGraph:
    """A sub-agent: the shared context only; never the memory prompt or tools."""
    return _graph(ctx, role_prompt=SUBAGENT_PROMPT, model=model, memory=None, extra_tools=())
