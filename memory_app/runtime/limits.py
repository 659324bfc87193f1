"""The limits of one run of the Chat service: message size, model calls, tool calls per reply.

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
