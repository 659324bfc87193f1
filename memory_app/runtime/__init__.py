"""The Chat service on LangChain, as a package; every public name is importable from here.

The Chat service is the only writer of `ToolRuntimeContext`: it creates and claims the run,
registers it with the process's lease keeper, runs the `create_agent` graph with
`context=ctx`, persists what the agent produced and finishes the run. The model never sees or
supplies any of the context's fields.

Its parts, each importing only those above it in this list:

- `limits` — the run's bounds (message size, model calls, tool calls per reply, reply text
  and tool-argument sizes, sub-agent delegations).
- `errors` — `ChatError` and its children (`ChatDecisionInvalid` and `ChatDecisionRefused`:
  a decision refused before it is spent), and the run guard's in-run signals.
- `guard` — `RunGuard`, the middleware enforcing the run's rules on every model/tool call.
- `approval` — the approval middleware (`ApprovalGate` and LangChain's human-in-the-loop on
  `remember_memory`), the check that refuses a decision that could not be carried out, and
  the resume command of a user's decision.
- `graphs` — `AgentGraph`, `build_chatbot_graph`, `build_resume_graph`, `build_subagent_graph`.
- `turns` — a turn's three phases, the seams an async or streamed turn reuses:
  `open_turn(...) -> Turn` (entry checks, thread, run created and claimed with the user's
  message, lease keeper registration); `run_agent(turn, prepare=) -> TurnOutcome` (build the
  graph and its input, run the agent; failures travel in the outcome); `close_turn(turn,
  outcome)` (finish the run and persist through `conversations.services`, or raise the
  refusal). Also `agent_run`, the same open and close around a team's own loop. For async
  callers: the database phases on worker threads, the agent phase as `astream_agent` /
  `arun_agent`, `cancel_turn` for a caller that stopped waiting, and `aagent_run`.
- `subagent` — `DelegateToSubagentTool`: a child turn on the sub-agent graph.
- `service` — `chat`, `achat` and `ChatTurn`: the three phases for one user message or
  decision.
- `streaming` — `astream_chat`, `stream_chat`: the same turn as `ChatEvent`s as it happens.
"""

from conversations.runs import ToolRuntimeContext
from memory_app.runtime.errors import (
    ChatDecisionInvalid,
    ChatDecisionRefused,
    ChatError,
    ChatInputError,
    ChatModelUnavailable,
    ChatNothingToResume,
    ChatRunLost,
    ChatThreadNotFound,
)
from memory_app.runtime.graphs import (
    CHATBOT_PROMPT,
    SUBAGENT_PROMPT,
    AgentGraph,
    build_chatbot_graph,
    build_resume_graph,
    build_subagent_graph,
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
from memory_app.runtime.service import (
    DIALOGUE_CUT_MARKER,
    ChatRequest,
    ChatTurn,
    achat,
    chat,
    chat_turn,
    chatbot_input,
)
from memory_app.runtime.streaming import astream_chat, stream_chat
from memory_app.runtime.subagent import (
    DelegateArguments,
    DelegateToSubagentTool,
    subagent_input,
)
from memory_app.runtime.turns import (
    AgentInput,
    AgentRunHandle,
    ChatEvent,
    Turn,
    TurnOutcome,
    aagent_run,
    agent_config,
    agent_run,
    arun_agent,
    astream_agent,
    cancel_turn,
    check_decision,
    check_message,
    close_turn,
    logger,
    open_resume_turn,
    open_subagent_turn,
    open_turn,
    outcome_of,
    resume_start,
    run_agent,
)
from memory_app.tool_names import SUBAGENT_TOOL_NAME

__all__ = [
    "ASSISTANT_TEXT_MAX_BYTES",
    "CHATBOT_PROMPT",
    "CHAT_MESSAGE_MAX_BYTES",
    "DIALOGUE_CUT_MARKER",
    "MAX_MODEL_CALLS",
    "MAX_SUBAGENT_CALLS_PER_RUN",
    "MAX_TOOL_CALLS_PER_REPLY",
    "SUBAGENT_PROMPT",
    "SUBAGENT_TOOL_NAME",
    "TOOL_ARGUMENTS_MAX_BYTES",
    "AgentGraph",
    "AgentInput",
    "AgentRunHandle",
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
    "stream_chat",
    "subagent_input",
]
