"""The name of every tool the agent may call, each defined once: the names tool calls are
stored under, the model is offered, and the scripted model and the ledger look for.

The two lookback tools' names belong to the history repository's read (`LOOKBACK_TOOL_NAMES`,
whose results lookback hides); they are taken from there. A leaf: it imports nothing of this app.
"""

from conversations.repository.read import LOOKBACK_TOOL_NAMES

# The agent's one memory write tool.
REMEMBER_MEMORY_TOOL = "remember_memory"
# History lookback: find the user's past messages by text, and read one past thread.
SEARCH_THREAD_MESSAGES_TOOL, READ_THREAD_MESSAGES_TOOL = LOOKBACK_TOOL_NAMES
# The three memory tools of a top-level chat run, in their fixed order.
MEMORY_TOOL_NAMES = (REMEMBER_MEMORY_TOOL, SEARCH_THREAD_MESSAGES_TOOL, READ_THREAD_MESSAGES_TOOL)
# The Chat-service tool through which the chat agent reaches a sub-agent.
SUBAGENT_TOOL_NAME = "delegate_to_subagent"
