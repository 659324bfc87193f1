"""The memory app: a user's `MEMORY.md`, its switch and ledger, the memory tools and
middleware, and the Chat service (`runtime`) that runs the agent with them."""
