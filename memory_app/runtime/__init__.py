"""The Chat service on LangChain, as a package; every public name is importable from here.

The Chat service is the only writer of `ToolRuntimeContext`: it creates and claims the run,
registers it with the process's lease keeper, runs the process's compiled `create_agent` graph
of the turn's shape with the run's context (`RunContext`: its identity, system message and
tool calls), persists what the agent produced and finishes the run. The model never sees or
supplies any of the context's fields.

Its parts, each importing only those above it in this list:

- `limits` — the run's bounds (message size, model calls, tool calls per reply, reply text
  and tool-argument sizes, sub-agent delegations).
- `errors` — `ChatError` and its children (`ChatDecisionInvalid` and `ChatDecisionRefused`:
  a decision refused before it is spent), the run guard's in-run signals, and
  `CHAT_HTTP_ERRORS`: the one table of what HTTP answers each refusal.
- `context` — `RunContext` (and `RunCalls`): what one run of a shared graph brings at
  invocation.
- `credential_check` — `stated_credential_refusal`: a memory write repeating a credential
  the user stated in the thread, however the model worded it, is refused before it runs.
- `guard` — `RunGuard`, the middleware enforcing the run's rules on every model/tool call.
- `approval` — the approval middleware (`ApprovalGate` and LangChain's human-in-the-loop on
  `remember_memory`), the check that refuses a decision that could not be carried out, and
  the resume command of a user's decision.
- `graph_cache` — `CompiledGraphs`: the process's compiled graphs by key, each compiled
  once however many turns ask at the same time, the least recently used dropped.
- `graphs` — `AgentGraph`, `build_chatbot_graph`, `build_resume_graph`, `build_subagent_graph`
  (a graph built for one run), and `shared_graph` / `GraphShape` / `run_system_message` (the
  process's compiled graph of a shape, and what a run of it is shown), `warm_graph`.
- `loop` — the process's one event loop (a daemon thread) every turn runs on, and the
  adapters sync and async callers reach it through (`run_sync`, `on_process_loop`).
- `caller_thread` — `CallerThread`: a sync caller's thread serving its turn's database steps
  (and keeping an interruption out of the loop).
- `relay` — an event stream made on that loop, read from another loop (`relay`) or from sync
  code (`iterate_sync`).
- `settling` — `to_the_end` and `settled`: a close or cancel awaited so nothing stops it
  halfway.
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
from memory_app.runtime.agent_phase import (
    agent_config,
    arun_agent,
    astream_agent,
    outcome_of,
    resume_start,
    run_agent,
)
from memory_app.runtime.closing import cancel_turn, close_turn
from memory_app.runtime.context import RunCalls, RunContext
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
    CHATBOT_PROMPT,
    SUBAGENT_PROMPT,
    AgentGraph,
    GraphShape,
    build_chatbot_graph,
    build_resume_graph,
    build_subagent_graph,
    run_system_message,
    shared_graph,
    warm_graph,
)
from memory_app.runtime.guard import RunGuard
from memory_app.runtime.limits import (
    ASSISTANT_TEXT_MAX_BYTES,
    CHAT_MESSAGE_MAX_BYTES,
    MAX_MODEL_CALLS,
    MAX_SUBAGENT_CALLS_PER_RUN,
    MAX_TOOL_CALLS_PER_REPLY,
    TOOL_ARGUMENTS_MAX_BYTES,
)
from memory_app.runtime.loop import logger
from memory_app.runtime.opening import (
    check_decision,
    check_message,
    open_resume_turn,
    open_subagent_turn,
    open_turn,
)
from memory_app.runtime.service import (
    DIALOGUE_CUT_MARKER,
    ChatRequest,
    ChatTurn,
    achat,
    chat,
    chat_turn,
    chatbot_input,
    warm_up_graphs,
)
from memory_app.runtime.streaming import astream_chat, stream_chat
from memory_app.runtime.subagent import (
    DelegateArguments,
    DelegateToSubagentTool,
    subagent_input,
)
from memory_app.runtime.team import TeamRun, aagent_run, agent_run
from memory_app.runtime.turns import (
    AgentInput,
    AgentRunHandle,
    ChatEvent,
    Turn,
    TurnContext,
    TurnOutcome,
)
from memory_app.tool_names import SUBAGENT_TOOL_NAME

__all__ = [
    "CHAT_HTTP_ERRORS",
    "INTERNAL_ERROR",
    "http_error",
    "ASSISTANT_TEXT_MAX_BYTES",
    "CHATBOT_PROMPT",
    "CHAT_MESSAGE_MAX_BYTES",
    "DIALOGUE_CUT_MARKER",
    "MAX_MODEL_CALLS",
    "MAX_SUBAGENT_CALLS_PER_RUN",
    "MAX_TOOL_CALLS_PER_REPLY",
    "SUBAGENT_PROMPT",
    "SUBAGENT_TOOL_NAME",
    "TeamRun",
    "TOOL_ARGUMENTS_MAX_BYTES",
    "AgentGraph",
    "AgentInput",
    "AgentRunHandle",
    "GraphShape",
    "RunCalls",
    "RunContext",
    "TurnContext",
    "ChatDecisionInvalid",
    "ChatDecisionRefused",
    "ChatError",
    "ChatEvent",
    "ChatInputError",
    "ChatModelUnavailable",
    "ChatNothingToResume",
    "ChatRunLost",
    "ChatRequest",
    "ChatThreadNotFound",
    "ChatTurn",
    "DelegateArguments",
    "DelegateToSubagentTool",
    "RunGuard",
    "ToolRuntimeContext",
    "Turn",
    "TurnOutcome",
    "aagent_run",
    "achat",
    "agent_config",
    "agent_run",
    "arun_agent",
    "astream_agent",
    "astream_chat",
    "build_chatbot_graph",
    "build_resume_graph",
    "build_subagent_graph",
    "cancel_turn",
    "chat",
    "chat_turn",
    "chatbot_input",
    "check_decision",
    "check_message",
    "close_turn",
    "logger",
    "open_resume_turn",
    "open_subagent_turn",
    "open_turn",
    "outcome_of",
    "resume_start",
    "run_agent",
    "run_system_message",
    "shared_graph",
    "stream_chat",
    "subagent_input",
    "warm_graph",
    "warm_up_graphs",
]
