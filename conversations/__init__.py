"""The conversations app: threads, messages, tool calls and agent runs, with run identity and
leases, history lookback, and every read and write of its own tables."""
