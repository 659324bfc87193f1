"""The Chat service on LangChain, as a package; its public names are importable from here.

The Chat service is the only writer of `ToolRuntimeContext`: it creates and claims the run,
registers it with the process's lease keeper, runs the process's compiled `create_agent` graph
of the turn's shape with the run's context (`RunContext`: its identity, system message,
memory section and tool calls), persists what the agent produced and finishes the run. The
model never sees or supplies any of the context's fields.

One way to build an agent graph: `graphs.agent_middleware` lists the same middleware for the
service's shared graphs and for a graph built for one run — `YuxiMemoryMiddleware` (the memory
section and tools), the approval middleware, the model-call limit and the run guard
(`run_guards`, one middleware per rule) — and a team adds the same to its own `create_agent`.

`__all__` below is the package's stable surface (the entry points and their errors, the
context, the graph and middleware builders); every other name lives in its module and may
change. Its parts, each importing only those above it in this list:

- `limits` — the run's bounds (message size, model calls, tool calls per reply, reply text
  and tool-argument sizes, sub-agent delegations).
- `concurrency` — the process's event loop and the adapters sync and async callers reach it
  through, the relay of a stream made there, and the settling of an open or close (a
  subpackage: none of it knows a run).
- `context` — `RunContext` (and `RunCalls`): what one run of a shared graph brings at
  invocation.
- `errors` — `ChatError` and its children (`ChatDecisionInvalid` and `ChatDecisionRefused`:
  a decision refused before it is spent), the run guard's in-run signals, and
  `CHAT_HTTP_ERRORS`: the one table of what HTTP answers each refusal.
- `credential_check` — `stated_credential_refusal`: a memory write repeating a credential
  the user stated in the thread, however the model worded it, is refused before it runs.
- `replies` — what a run may take of a model's reply (bounds, storable labels and arguments,
  unique ids) and the text of a model failure.
- `call_limit` — `ModelCallLimit`: LangChain's model-call limit inside the model call.
- `guards` — the run guard: `ConnectionRelease`, `RunSystemMessage`, `LeaseGuard`,
  `ReplyCheck`, `UniqueToolCallIds`, `CredentialRefusal`, `ModelErrors`, `StartedCalls`, one
  rule each, and `run_guards`, their list.
- `approval` — the approval middleware (`ApprovalGate` and LangChain's human-in-the-loop on
  `remember_memory`), the check that refuses a decision that could not be carried out, and
  the resume command of a user's decision.
- `graph_cache` — `CompiledGraphs`: the process's compiled graphs by key, each compiled
  once however many turns ask at the same time, the least recently used dropped.
- `graphs` — `AgentGraph`, `agent_middleware`, `build_chatbot_graph`, `build_subagent_graph`
  (a graph built for one run), and `shared_graph` / `GraphShape` / `run_system_message` (the
  process's compiled graph of a shape, and what a run of it is shown), `warm_graph`.
- `turns` — a turn's parts (`Turn`, `AgentRunHandle`, `TurnContext`, `AgentInput`,
  `TurnOutcome`, `ChatEvent`) and the cancellation policy (`cancellation`).
- `opening` — `open_turn(...) -> Turn` (entry checks, thread, run created and claimed with
  the user's message, lease keeper registration), `open_resume_turn`, `open_subagent_turn`.
- `agent_phase` — `astream_agent` / `arun_agent` (the agent's `astream`; failures travel in
  the outcome), and `run_agent`, its sync adapter.
- `closing` — `close_turn(turn, outcome)` (finish the run and persist through
  `conversations.services`, or raise the refusal), `cancel_turn` for a caller that stopped
  waiting.
- `team` — `agent_run` / `aagent_run`: the same open and close around a team's own loop.
- `subagent` — `DelegateToSubagentTool`: a child turn on the sub-agent graph.
- `service` — `aturn` (the one implementation of a turn) and its adapters `chat`, `achat`
  (and `ChatTurn`), and `warm_up_graphs` (a server process compiles its graphs before it
  serves).
- `streaming` — `astream_chat`, `stream_chat`: the same turn as `ChatEvent`s as it happens.
"""

from conversations.runs import ToolRuntimeContext
from memory_app.runtime.context import RunContext
from memory_app.runtime.errors import (
    CHAT_HTTP_ERRORS,
    INTERNAL_ERROR,
    ChatDecisionInvalid,
    ChatDecisionRefused,
    ChatError,
    ChatInputError,
    ChatModelUnavailable,
    ChatNothingToResume,
    ChatRunLost,
    ChatThreadNotFound,
    http_error,
)
from memory_app.runtime.graphs import (
    AgentGraph,
    agent_middleware,
    build_chatbot_graph,
    build_subagent_graph,
)
from memory_app.runtime.guards import run_guards
from memory_app.runtime.service import ChatTurn, achat, chat, warm_up_graphs
from memory_app.runtime.streaming import astream_chat, stream_chat
from memory_app.runtime.team import TeamRun, aagent_run, agent_run
from memory_app.runtime.turns import AgentRunHandle, ChatEvent

__all__ = [
    # the entry points and what they answer
    "chat",
    "achat",
    "stream_chat",
    "astream_chat",
    "ChatTurn",
    "ChatEvent",
    "agent_run",
    "aagent_run",
    "TeamRun",
    "AgentRunHandle",
    "warm_up_graphs",
    # the context a run's tools and middleware read
    "ToolRuntimeContext",
    "RunContext",
    # the graph and middleware builders
    "AgentGraph",
    "build_chatbot_graph",
    "build_subagent_graph",
    "agent_middleware",
    "run_guards",
    # the refusals, and what HTTP answers each
    "ChatError",
    "ChatInputError",
    "ChatThreadNotFound",
    "ChatNothingToResume",
    "ChatDecisionInvalid",
    "ChatDecisionRefused",
    "ChatModelUnavailable",
    "ChatRunLost",
    "CHAT_HTTP_ERRORS",
    "INTERNAL_ERROR",
    "http_error",
]
