"""The API's request and response schemas (django-ninja `Schema`), and the refusals each kind
of operation declares: the shapes the OpenAPI document publishes, kept apart from the views so
that a view module reads as what it does, and a shape shared by two views is written once.
"""

from datetime import datetime
from typing import Any, Literal

from ninja import Field, Schema
from pydantic import ConfigDict, StrictBool, StrictStr

from memory_app.credentials import CredentialKind
from memory_app.memory_file import INVISIBLE_CHARACTERS_WARNING


class Error(Schema):
    error: str


class Body(Schema):
    """A request body: a field the operation does not take is refused (400), never ignored, so
    a client that thinks it sent `user_id` learns that it cannot choose whose data it touches."""

    model_config = ConfigDict(extra="forbid")


class DecisionIn(Body):
    decision: Literal["approve", "edit", "reject"]
    content: StrictStr | None = Field(None, description="the text to write instead (edit only)")
    replaces: StrictStr | None = Field(None, description="the text it corrects (edit only)")


class ChatIn(Body):
    message: StrictStr | None = Field(None, description="the user's message (or send `resume`)")
    thread_id: StrictStr | None = None
    resume: DecisionIn | None = Field(
        None, description="the decision about the memory write pending in `thread_id`"
    )


class ToolCallOutcome(Schema):
    name: str
    status: str


class ApprovalOut(Schema):
    tool_call_id: str
    content: Any = Field(description="the text the agent proposes to remember")
    replaces: Any = Field(description="the exact text it would correct, or null")


class ChatOut(Schema):
    thread_id: str
    run_id: str
    status: str = Field(description="`succeeded`, or `interrupted`: a memory write waits")
    reply: str
    tool_calls: list[ToolCallOutcome]
    approval: ApprovalOut | None = Field(description="the write waiting for your decision")


class MemoryOut(Schema):
    enable_memory: bool
    text: str
    size_bytes: int
    etag: str = Field(description="`sha256:` + the hex digest of MEMORY.md (sent as `If-Match`)")


class MemoryWarning(Schema):
    line: int = Field(description="1-based line of the text")
    kind: str = Field(
        description="what it looks like: "
        + ", ".join([*CredentialKind, INVISIBLE_CHARACTERS_WARNING])
    )


class MemoryWrittenOut(MemoryOut):
    warnings: list[MemoryWarning] = Field(
        description="credentials the text holds: kept as written (your own write is never "
        "refused for one), but memory is read into every prompt the agent gets"
    )


class MemoryProblem(Schema):
    error: str
    etag: str
    size_bytes: int


class MemoryIn(Body):
    text: StrictStr


class MemoryVersionOut(Schema):
    sha256: str = Field(description="the hex SHA-256 of that earlier MEMORY.md's bytes")
    size_bytes: int | None = Field(description="its size; null only if neither kept nor recorded")
    replaced_at: datetime = Field(description="when a change last replaced it")
    kind: str = Field(
        description="the change that produced these bytes: a ledger kind (agent_added, "
        "user_edited, ...), or initial when no recorded change did (the seed, a file older "
        "than the ledger)"
    )
    replaced_by: str = Field(
        description="the ledger kind of the change that last replaced it (agent_replaced, "
        "user_cleared, ...)"
    )
    available: bool = Field(description="whether its bytes are still kept (read, restore)")


class MemoryVersionsOut(Schema):
    versions: list[MemoryVersionOut]


class MemoryVersionTextOut(Schema):
    sha256: str
    text: str
    size_bytes: int


class LineChangeOut(Schema):
    kind: str = Field(
        description="the ledger kind of the change that brought the line (agent_added, "
        "agent_replaced, user_edited, user_restored)"
    )
    at: datetime = Field(description="when that change was made")
    by: Literal["agent", "you", "staff"] = Field(
        description="`agent` for the agent's write (decided by you or not), `you` for your own "
        "edit or restore, `staff` for another person's"
    )
    run_id: str | None = Field(description="the agent run that wrote it (null: not the agent's)")
    thread_id: str | None = Field(description="the thread of that run (null: not the agent's)")


class EarlierOut(Schema):
    kind: Literal["earlier"] = Field(
        description="no recorded change can be shown to have brought the line: it is older "
        "than the versions kept, the history was forgotten, or the file changed outside the app"
    )


class MemoryLineOut(Schema):
    number: int = Field(description="1-based, as in the file")
    text: str = Field(description="the line without its line ending")
    origin: LineChangeOut | EarlierOut


class MemoryLinesOut(Schema):
    etag: str = Field(description="the etag of the file these lines are from (send as `If-Match`)")
    lines: list[MemoryLineOut]


class SettingsOut(Schema):
    enable_memory: bool
    memory_write_approval: bool


class SettingsBody(Body):
    enable_memory: StrictBool | None = None
    memory_write_approval: StrictBool | None = Field(
        None, description="each memory write waits for your decision (`resume` on chat/)"
    )


class ThreadOut(Schema):
    thread_id: str
    title: str
    status: str
    source: str
    created_at: datetime
    updated_at: datetime


class PendingApprovalOut(ApprovalOut):
    run_id: str
    created_at: datetime


class ListedThreadOut(ThreadOut):
    pending_approval: PendingApprovalOut | None = Field(
        description="the memory write waiting for your decision in this thread"
    )


class ThreadPageOut(Schema):
    threads: list[ListedThreadOut]
    next_cursor: str | None = Field(description="pass as `cursor` for the next page; null: done")


class MessageOut(Schema):
    id: int
    role: str = Field(description="`user` or `assistant`")
    content: str
    created_at: datetime
    tool_calls: list[ToolCallOutcome] = Field(
        description="the tools the turn called before this reply (assistant messages only)"
    )


class MessagePageOut(Schema):
    messages: list[MessageOut] = Field(description="oldest first within the page")
    next_cursor: str | None = Field(
        description="pass as `cursor` for the older page before these; null: the thread's start"
    )


class ThreadStatusIn(Body):
    status: Literal["active", "archived", "deleted"] | None = None
    title: StrictStr | None = Field(None, description="a title of your choice")


class ExportToolCall(Schema):
    tool_call_id: str
    name: str
    input: Any
    output: str
    status: str
    error: str
    metadata: Any
    created_at: datetime


class ExportMessage(Schema):
    id: int
    role: str
    message_type: str
    content: str
    image_content: str | None
    attachments: Any
    feedback: Any
    metadata: Any
    created_at: datetime
    tool_calls: list[ExportToolCall]


class ExportThread(Schema):
    thread_id: str
    title: str
    status: str
    source: str
    parent_thread_id: str | None
    metadata: Any
    created_at: datetime
    updated_at: datetime
    messages: list[ExportMessage]


class ExportUser(Schema):
    id: int
    username: str = Field(description="the value of the user model's USERNAME_FIELD")
    username_field: str = Field(description="the user model's USERNAME_FIELD (e.g. email)")
    # Present where the user model has the field.
    email: str | None = None
    first_name: str | None = None
    last_name: str | None = None
    date_joined: datetime | None = None
    last_login: datetime | None = None


class ExportMemory(Schema):
    text: str | None
    etag: str
    size_bytes: int
    problem: str | None


class ExportEvent(Schema):
    kind: str
    actor: str | None
    run_id: str | None
    before_sha256: str
    after_sha256: str
    size_bytes: int
    created_at: datetime


class ExportVersion(Schema):
    sha256: str
    size_bytes: int
    text: str


class ExportPendingApproval(Schema):
    thread_id: str
    run_id: str
    tool_call_id: str
    content: Any
    replaces: Any
    created_at: datetime


class ApprovalsOut(Schema):
    approvals: list[ExportPendingApproval] = Field(description="oldest first, one per thread")


class ExportDocument(Schema):
    user: ExportUser
    enable_memory: bool
    memory: ExportMemory | None
    agents_md: str | None
    user_md: str | None
    memory_events: list[ExportEvent]
    memory_versions: list[ExportVersion]
    pending_approvals: list[ExportPendingApproval]
    threads: list[ExportThread]


# Refusals every authenticated operation can answer with.
COMMON = {401: Error, 403: Error, 405: Error, 503: Error}
UNSAFE = {**COMMON, 400: Error, 413: Error}
# A write made only if the file is still the version `If-Match` names: 428 without it, 412
# when it names another.
IF_MATCH = {412: Error, 428: Error, **UNSAFE}
