"""Read-only staff pages for conversations, messages, tool calls and runs, one module per
model's page (`conversation`, `message`, `tool_call`, `agent_run`) and the columns and filters
they share (`columns`).

Every relation is a link, every page costs a fixed number of queries, and every search and
filter is one an index serves (see docs/admin.md). Django's admin autodiscovery imports this
package: importing the page modules registers them.
"""

from conversations.admin import agent_run, conversation, message, tool_call  # noqa: F401
