"""The memory app: a user's `MEMORY.md`, its switch and ledger, the memory tools and
middleware, and the Chat service (`runtime`) that runs the agent with them."""

# The version of the distribution `yuxi-memory` (both apps): its one source, read by
# pyproject.toml; CHANGELOG.md's newest entry carries the same number.
__version__ = "0.2.0"

# The app's public names, by module: the runtime's entry points and their errors, the services
# and selectors a team calls, the middleware and tools, the host's wiring (URLs, the API's JSON
# edge, the ASGI admission, the user admin's mixin) and the settings. Each module listed here
# declares exactly these names in `__all__`; every other module and name of the app is internal
# and may change without notice (`docs/python-api.md`). Strings only: this module imports none
# of the app's modules, which Django loads in its own order. A change here is deliberate (a
# test pins a copy).
PUBLIC_API: dict[str, tuple[str, ...]] = {
    "memory_app.admission": ("StreamAdmission", "STREAM_OPENINGS_AT_ONCE", "OPENING_HOLD_SECONDS"),
    "memory_app.api_auth": ("SessionCsrfAuth",),
    "memory_app.api_edge": (
        "ApiEdgeMiddleware",
        "not_found",
        "server_error",
        "API_UNAVAILABLE_MESSAGE",
        "URL_NAMESPACE",
        "API_NAMESPACE",
    ),
    "memory_app.conf": ("setting", "DEFAULTS"),
    "memory_app.context": ("build_agent_input_context", "AgentInputContext"),
    "memory_app.llm": ("chat_model_from_settings", "CompatibleChatOpenAI", "ScriptedChatModel"),
    "memory_app.middleware": ("YuxiMemoryMiddleware", "injected_memory"),
    "memory_app.models": ("UserConfig", "MemoryEvent"),
    "memory_app.runtime": (
        # the entry points and what they answer
        "chat",
        "achat",
        "stream_chat",
        "astream_chat",
        "ChatTurn",
        "ChatEvent",
        "agent_run",
        "aagent_run",
        "TeamRun",
        "AgentRunHandle",
        "warm_up_graphs",
        # the context a run's tools and middleware read
        "ToolRuntimeContext",
        "RunContext",
        # the graph and middleware builders
        "AgentGraph",
        "build_chatbot_graph",
        "build_subagent_graph",
        "agent_middleware",
        "run_guards",
        # the refusals, and what HTTP answers each
        "ChatError",
        "ChatInputError",
        "ChatThreadNotFound",
        "ChatNothingToResume",
        "ChatDecisionInvalid",
        "ChatDecisionRefused",
        "ChatModelUnavailable",
        "ChatRunLost",
        "CHAT_HTTP_ERRORS",
        "INTERNAL_ERROR",
        "http_error",
    ),
    "memory_app.runtime.call_limit": ("ModelCallLimit",),
    "memory_app.selectors": (
        "memory_enabled",
        "read_memory_file",
        "read_memory_for_prompt",
        "memory_write_refusal",
        "user_ledger",
        "export_user_data",
        "list_memory_versions",
        "read_memory_version",
        "memory_line_origins",
        "memory_lines",
        "MemoryFile",
        "memory_etag",
    ),
    "memory_app.services": (
        # the agent's write, and the user's own writes
        "remember_memory",
        "MemoryWriteResult",
        "set_memory_enabled",
        "set_memory_write_approval",
        "write_memory_file",
        "delete_memory_line",
        "edit_memory_line",
        "clear_memory",
        "restore_memory_version",
        "forget_memory_versions",
        "hold_memory_locks",
        "erase_user",
        "ErasureReport",
        "MEMORY_FILE_MAX_BYTES",
        # the refusals (`MemoryWriteError` and its children) and the two lookups that find nothing
        "MemoryWriteError",
        "MemoryInputError",
        "MemorySensitiveContent",
        "MemoryInvisibleText",
        "MemoryConflict",
        "MemoryFileTooLarge",
        "MemoryAccessDenied",
        "MemoryApprovalRequired",
        "MemoryUnavailable",
        "MemoryLineNotFound",
        "MemoryVersionNotFound",
    ),
    "memory_app.tools": (
        "build_memory_tools",
        "make_remember_memory_tool",
        "make_search_thread_messages_tool",
        "make_read_thread_messages_tool",
        "ToolResult",
        "ToolStatus",
    ),
    "memory_app.user_admin": ("ErasingUserAdminMixin",),
    # and the errors `read_memory_file` may raise, and a turn's when the root cannot be used
    "memory_app.workspace": (
        "Workspace",
        "WorkspaceError",
        "WorkspacePathRefused",
        "WorkspaceUnavailable",
    ),
}
