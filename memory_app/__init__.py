"""The memory app: a user's `MEMORY.md`, its switch and ledger, the memory tools and
middleware, and the Chat service (`runtime`) that runs the agent with them."""

# The version of the distribution `yuxi-memory` (both apps): its one source, read by
# pyproject.toml; CHANGELOG.md's newest entry carries the same number.
__version__ = "0.2.0"
