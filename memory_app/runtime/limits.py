"""The limits of one run of the Chat service: message size, model calls, tool calls per reply,
the size of what the model may have stored, and delegations to a sub-agent.

A leaf of the runtime package: every other part reads its bounds from here.
"""

# A user message is at most this many bytes of UTF-8.
CHAT_MESSAGE_MAX_BYTES = 16384
# Model calls per run; one more fails the run as a model error.
MAX_MODEL_CALLS = 8
# Tool calls one model reply may ask for; a reply asking for more fails the run, none runs.
MAX_TOOL_CALLS_PER_REPLY = 8
# LangGraph's step guard, far above what MAX_MODEL_CALLS allows (a few nodes per model call).
RECURSION_LIMIT = 16 * MAX_MODEL_CALLS
# A model reply's text is at most this many bytes of UTF-8; a longer one fails the run as a
# model error and nothing of it is stored.
ASSISTANT_TEXT_MAX_BYTES = 65536
# A tool call's arguments, serialized as compact JSON, are at most this many bytes of UTF-8; a
# larger call is `rejected` and stored without them, and the run goes on.
TOOL_ARGUMENTS_MAX_BYTES = 16384
# `delegate_to_subagent` calls one run may make; more are `rejected` and the run goes on. With
# the sub-agent's own MAX_MODEL_CALLS, a turn makes at most
# MAX_MODEL_CALLS * (1 + MAX_SUBAGENT_CALLS_PER_RUN) = 24 model calls.
MAX_SUBAGENT_CALLS_PER_RUN = 2
