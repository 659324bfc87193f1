"""Reads of threads outside history lookback (which is `conversations.repository`), one module
per concern: `dialogue` (the thread a user chats in and its recent dialogue), `pages` (a user's
threads and a thread's messages, a page at a time), `approvals` (the memory writes waiting for
a user's decision), `export` (a user's threads and approvals exported, their rows counted),
`stated_messages` (the user's own messages a memory write is checked against) and `staff`
(bounded excerpts of the stored record for the staff pages).

Nothing is public here: callers import each read from the module that owns it.
"""
