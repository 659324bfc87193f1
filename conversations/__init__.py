"""The conversations app: threads, messages, tool calls and agent runs, with run identity and
leases, history lookback, and every read and write of its own tables."""

# The app's public names, by module: the models, the run repository's calls a team's own agent
# loop makes, history lookback, the writes a team's loop stores its messages with, the
# checkpointer, the settings, the read-only admin base, and the helpers both apps share (their
# old `yuxi_site` paths forward here). Each module listed here declares exactly these names in
# `__all__`; every other module and name of the app is internal and may change without notice
# (`docs/python-api.md`). Strings only: this module imports none of the app's modules, which
# Django loads in its own order. A change here is deliberate (a test pins a copy).
PUBLIC_API: dict[str, tuple[str, ...]] = {
    "conversations.admin_base": ("ReadOnlyAdmin",),
    "conversations.checkpoints": ("checkpointer",),
    "conversations.conf": ("setting", "DEFAULTS"),
    "conversations.models": ("Conversation", "Message", "ToolCall", "AgentRun", "VISIBLE_THREAD"),
    "conversations.repository": (
        "search_thread_messages",
        "read_thread_messages",
        "HistoryNotFound",
        "HistoryQueryError",
    ),
    "conversations.runs": (
        "create_run",
        "claim_run",
        "start_run",
        "renew_lease",
        "finish_run",
        "check_lease_owner",
        "parse_context",
        "lock_run_for_tool",
        "lease_keeper",
        "fail_expired_runs",
        "ToolRuntimeContext",
    ),
    "conversations.services": ("add_message", "record_tool_call", "complete_tool_call"),
    "conversations.utils.connections": (
        "release_connection",
        "direct_connection",
        "in_worker_thread",
    ),
    "conversations.utils.db_functions": ("ClockTimestamp",),
    "conversations.utils.ids": ("parse_uid",),
    "conversations.utils.log_format": ("KeyValueFormatter",),
    "conversations.utils.statements": ("count_statements",),
    "conversations.utils.string_utils": ("truncate_utf8", "is_storable_text"),
}
