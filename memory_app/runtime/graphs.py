"""The agent graphs, all made one way (`agent_middleware` and `_compile`: `create_agent` with
the memory middleware, the approval middleware, the model-call limit and the run guard):
`build_chatbot_graph` (the chat agent, with memory when on) and `build_subagent_graph` (a
sub-agent: shared context only), each built for one run (its tools and guard bound to its
`ctx`), as a team's own code needs; and `shared_graph`, the compiled graph of a shape that the
Chat service runs every turn of that shape on, compiled once per process, with the same
middleware built without a run (`YuxiMemoryMiddleware.for_graph()`, `run_guards()`).

A shared graph holds nothing of a run: no identity, no prompt, no memory. Each run brings them
at invocation as its `RunContext` (the system message read for the run, see
`run_system_message`, and its memory section). So a turn reads AGENTS.md, USER.md, MEMORY.md
and the switch anew, and compiles nothing once its shape has been seen.

Building a graph or a run's system message reads the database (the memory check) and files
but runs nothing: a turn does it in `run_agent`'s `prepare` step, inside the turn, so a
failure there fails the run.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import SystemMessage
from langchain_core.tools import BaseTool
from langgraph.checkpoint.base import BaseCheckpointSaver

from conversations.runs import ToolRuntimeContext
from memory_app.conf import DEFAULT_AGENT_INSTRUCTIONS, setting
from memory_app.context import build_agent_input_context
from memory_app.llm.settings import chat_model_from_settings, model_settings
from memory_app.middleware import MemoryPrompt, YuxiMemoryMiddleware
from memory_app.runtime.approval import approval_middleware
from memory_app.runtime.call_limit import ModelCallLimit
from memory_app.runtime.graph_cache import CompiledGraphs
from memory_app.runtime.guards import RunSystemMessage, run_guards
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


def agent_middleware(
    *,
    memory: YuxiMemoryMiddleware | None,
    approval: bool,
    ctx: ToolRuntimeContext | None = None,
) -> list[AgentMiddleware]:
    """Every agent graph's middleware, in order, for a graph built for `ctx`'s run or (None) a
    compiled graph every run of its shape shares: the run's system message (shared graphs:
    it comes with each run), the memory middleware (when given), the approval middleware
    (when `approval`), the model-call limit and the run guard (`run_guards`), bound to `ctx`
    or reading each run's context. After-model hooks run last-listed first, and the guard's
    reply checks run inside the model call: the reply's ids are settled before the approval
    gate and the human-in-the-loop middleware see them."""
    return [
        *((RunSystemMessage(),) if ctx is None else ()),
        *((memory,) if memory is not None else ()),
        *(approval_middleware() if approval else ()),
        ModelCallLimit(run_limit=MAX_MODEL_CALLS, exit_behavior="error"),
        *run_guards(ctx),
    ]


def _compile(
    model: BaseChatModel | None,
    *,
    tools: Sequence[BaseTool],
    middleware: list[AgentMiddleware],
    checkpointer: BaseCheckpointSaver | None,
    system_prompt: str | None = None,
) -> Any:
    """The one way an agent graph is made: `create_agent` with the model (or the configured
    one), the tools besides the middleware's own, and the middleware."""
    return create_agent(
        model or chat_model_from_settings(),
        tools=list(tools),
        system_prompt=system_prompt,
        middleware=middleware,
        checkpointer=checkpointer,
    )


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
    middleware = agent_middleware(memory=memory, approval=checkpointer is not None, ctx=ctx)
    agent = _compile(
        model,
        tools=extra_tools,
        middleware=middleware,
        checkpointer=checkpointer,
        system_prompt=shared,
    )
    return AgentGraph(
        agent=agent,
        system_prompt=memory.with_memory(SystemMessage(shared)).text if memory else shared,
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


def build_subagent_graph(
    ctx: ToolRuntimeContext, *, model: BaseChatModel | None = None
) -> AgentGraph:
    """A sub-agent: the shared context only; never the memory prompt or tools."""
    return _graph(ctx, role_prompt=SUBAGENT_PROMPT, model=model, memory=None, extra_tools=())


# -- shared graphs, one per shape ------------------------------------------------------------


@dataclass(frozen=True)
class GraphShape:
    """What a shared graph is compiled for: the sub-agent (`subagent`: no tools, no memory),
    or the chat agent, with the three memory tools when `memory` and the approval middleware
    when `approval` (a resume always has both: the interrupted graph's shape)."""

    subagent: bool = False
    memory: bool = False
    approval: bool = False


@dataclass(frozen=True)
class _Compiled:
    """A shared graph and what it was compiled with (`keys`: the objects whose ids key it,
    kept alive with it so that no other object can take one of their ids meanwhile)."""

    agent: Any
    tools: list[BaseTool]
    middleware: list[AgentMiddleware]
    keys: tuple[Any, ...]


# The process's compiled graphs, keyed as `_compiled` says.
_SHARED_GRAPHS: CompiledGraphs[_Compiled] = CompiledGraphs(size=32)


def _compile_shared(
    shape: GraphShape,
    model: BaseChatModel | None,
    checkpointer: BaseCheckpointSaver | None,
    extra_tools: Sequence[BaseTool],
) -> _Compiled:
    memory = YuxiMemoryMiddleware.for_graph() if shape.memory else None
    middleware = agent_middleware(memory=memory, approval=shape.approval)
    agent = _compile(
        model,
        tools=[] if shape.subagent else extra_tools,
        middleware=middleware,
        checkpointer=checkpointer if shape.approval else None,
    )
    return _Compiled(
        agent=agent,
        tools=list(memory.tools) if memory else [],
        middleware=middleware,
        keys=(model, checkpointer, *extra_tools),
    )


def _compiled(
    shape: GraphShape,
    *,
    model: BaseChatModel | None,
    checkpointer: BaseCheckpointSaver | None,
    extra_tools: Sequence[BaseTool],
) -> _Compiled:
    """The process's compiled graph of `shape` for these objects, compiled now if need be.
    Objects are keyed by identity (the entry keeps them alive); a model from settings by the
    settings it reads, so a changed `LLM_*` setting gets a graph of its own."""
    model_key = model_settings() if model is None else id(model)
    key = (shape, model_key, id(checkpointer), tuple(map(id, extra_tools)))
    return _SHARED_GRAPHS.get(key, lambda: _compile_shared(shape, model, checkpointer, extra_tools))


def shared_graph(
    shape: GraphShape,
    *,
    system_message: SystemMessage,
    memory: MemoryPrompt | None = None,
    model: BaseChatModel | None = None,
    checkpointer: BaseCheckpointSaver | None = None,
    extra_tools: Sequence[BaseTool] = (),
) -> AgentGraph:
    """One run's agent on the process's compiled graph of `shape` (compiled now if this
    shape, model — the object, or for None every `LLM_*` setting — `checkpointer` and
    `extra_tools` have not been seen, or were dropped since). The run must invoke it with a
    `RunContext` whose `system_message` and `memory` are these; `extra_tools` are tools built
    without a context (they read it from `runtime.context`), the same objects every turn."""
    compiled = _compiled(shape, model=model, checkpointer=checkpointer, extra_tools=extra_tools)
    shown = memory.with_memory(system_message) if memory is not None else system_message
    return AgentGraph(
        agent=compiled.agent,
        system_prompt=shown.text,
        tools=list(compiled.tools),
        middleware=compiled.middleware,
        approval=shape.approval,
    )


def warm_graph(shape: GraphShape, *, extra_tools: Sequence[BaseTool] = ()) -> None:
    """Compile now, unless it is already, the process's graph of `shape` for the configured
    model (what `shared_graph` runs a turn of that shape on, `extra_tools` the same objects)."""
    _compiled(shape, model=None, checkpointer=None, extra_tools=extra_tools)


def run_system_message(ctx: ToolRuntimeContext, *, subagent: bool = False) -> SystemMessage:
    """What a run of a shared graph shows the model as its system message before the memory
    middleware adds the run's memory section, read now: the role prompt
    (`YUXI_AGENT_INSTRUCTIONS` for the chat agent) and the shared context (AGENTS.md and
    USER.md)."""
    role = SUBAGENT_PROMPT if subagent else setting("YUXI_AGENT_INSTRUCTIONS")
    return SystemMessage(_shared_prompt(role, ctx.uid))
