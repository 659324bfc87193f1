"""History lookback: the agent's bounded view of its own user's past conversations.

The one owner of history field choice, per-level byte budgets and truncation flags, split by
concern so each rule has one file: `search.py` and `read.py` (the two calls), `sql.py` (the
static, fully parameterised statements they send, which spell out visibility themselves),
`budgets.py` (every cap, counted on UTF-8 bytes of `to_json(response)`, the form the tools
send), `arguments.py` (the errors and the checks of what a caller passes) and `terms.py` (how
a query becomes its terms). A host imports the two calls and the two errors they raise from
here; the rest of the project imports each name from the module that owns it.
"""

from conversations.repository.arguments import HistoryNotFound, HistoryQueryError
from conversations.repository.read import read_thread_messages
from conversations.repository.search import search_thread_messages

__all__ = ["HistoryNotFound", "HistoryQueryError", "read_thread_messages", "search_thread_messages"]
