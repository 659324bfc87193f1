"""Opening a turn: the entry checks (a storable message or decision, outside any transaction,
an active user), the thread (a new message first declines the thread's undecided approval,
if any), the run created and claimed together with the user's message in one statement (a
`resume` run names the interrupted run it `resumes`: unique, so one decision wins), then the
run handed to the process's lease keeper. Database work only, no model.
"""

import os
import socket
import uuid

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.utils.translation import gettext_noop

from conversations import runs, services
from conversations.models import AgentRun, Conversation, Message
from conversations.runs import ToolRuntimeContext
from conversations.runs.rows import checkpoint_key
from conversations.runs.starting import start_run_with_messages
from conversations.runs.tool_lock import TOOL_RUN_TYPES
from conversations.selectors.approvals import pending_approval, undecided_interrupts
from conversations.selectors.dialogue import chat_thread_entry
from conversations.users import active_user_q
from memory_app.runtime.approval import refuse_unfit_decision
from memory_app.runtime.entry_checks import check_decision, check_message
from memory_app.runtime.errors import (
    ChatError,
    ChatInputError,
    ChatNothingToResume,
    ChatThreadNotFound,
)
from memory_app.runtime.turns import AgentRunHandle, Turn
from memory_app.tool_results import DECLINED_RESULT


def _refuse_inside_transaction() -> None:
    """The memory file is published before a caller's commit: a rollback would leave the file
    changed and the run gone, so a run never starts inside a caller's transaction."""
    try:
        with transaction.atomic(durable=True):
            pass
    except RuntimeError as exc:
        raise ChatError("an agent run cannot start inside a database transaction") from exc


_INACTIVE_USER = "this user may not chat"


def _refuse_inactive_user(user_id: int) -> None:
    users = get_user_model().objects.filter(active_user_q(""), pk=user_id)
    if not users.exists():
        raise ChatError(_INACTIVE_USER)


def _entry_thread(*, user_id: int, thread_id: str | None, first_message: str) -> Conversation:
    """The entry checks every top-level run passes, then its thread (a new one if None). In an
    existing thread one query checks the user, finds the thread and says whether an approval
    waits undecided in it (`conversation.undecided`)."""
    _refuse_inside_transaction()
    if thread_id is None:
        conversation = services.start_chat_thread(user_id=user_id, first_message=first_message)
        if conversation is None:
            raise ChatError(_INACTIVE_USER)
        conversation.undecided = False
        return conversation
    conversation, undecided = chat_thread_entry(user_id=user_id, thread_id=thread_id)
    if conversation is None:
        _refuse_inactive_user(user_id)  # an inactive user is refused as such, not as not found
        raise ChatThreadNotFound("no such thread")
    return conversation


def _new_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def _claim(
    *,
    user_id: int,
    conversation: Conversation,
    request_id: str,
    run_type: str,
    parent_run: AgentRun | None = None,
    resumes: AgentRun | None = None,
    message: str | None = None,
) -> tuple[AgentRunHandle, Message | None]:
    """Create and claim the run and store the user's message, in one statement, then hand
    the run to the lease keeper. A second run that `resumes` the same run raises
    `IntegrityError` (nothing is created)."""
    worker_id = _new_worker_id()
    opening = (
        [] if message is None else [services.RunMessage(role=Message.Role.USER, content=message)]
    )
    run, stored = start_run_with_messages(
        user_id=user_id,
        conversation=conversation,
        request_id=request_id,
        worker_id=worker_id,
        run_type=run_type,
        parent_run=parent_run,
        resumes=resumes,
        messages=opening,
    )
    user_message = stored[0] if stored else None
    ctx = ToolRuntimeContext(
        uid=str(user_id),
        thread_id=conversation.thread_id,
        run_id=str(run.run_id),
        request_id=request_id,
        worker_id=worker_id,
    )
    lost = runs.lease_keeper().register(run_id=ctx.run_id, worker_id=worker_id)
    handle = AgentRunHandle(
        ctx=ctx, run_id=ctx.run_id, lease_lost=lost, run=run, conversation=conversation
    )
    return handle, user_message


# `AgentRun.error` of the resume run that declines an approval because a new message came.
DECLINED_BY_MESSAGE_ERROR = "declined: the user sent a new message instead of deciding"


def _decline_undecided(conversation: Conversation) -> None:
    """Decline the thread's undecided approval before a new message: its call answered
    `declined` (so the stored history stays well-formed), its checkpoints deleted."""
    for run in undecided_interrupts(conversation_id=conversation.pk):
        run.conversation = conversation
        services.decline_approval(
            run=run,
            key=checkpoint_key(run),
            error=DECLINED_BY_MESSAGE_ERROR,
            result=DECLINED_RESULT,
        )


def open_turn(*, user_id: int, thread_id: str | None, message: str) -> Turn:
    """Open a chat turn for `message` in `user_id`'s thread (a new one when None); a pending
    approval of the thread is declined first.

    Raises `ChatInputError`, `ChatError` (inside a transaction, inactive user),
    `ChatThreadNotFound`, `django.db.DatabaseError`.
    """
    check_message(message)
    conversation = _entry_thread(user_id=user_id, thread_id=thread_id, first_message=message)
    if conversation.undecided:
        _decline_undecided(conversation)
    handle, user_message = _claim(
        user_id=user_id,
        conversation=conversation,
        request_id=f"req-{uuid.uuid4().hex}",
        run_type=AgentRun.RunType.CHAT,
        message=message,
    )
    return Turn(
        handle=handle,
        message=message,
        user_message=user_message,
        checkpoint_key=handle.run_id,
        new_thread=thread_id is None,
    )


def open_resume_turn(*, user_id: int, thread_id: str, resume: object) -> Turn:
    """Open a `resume` run carrying the user's decision about the thread's pending approval.

    Raises `ChatDecisionInvalid` (malformed decision), `ChatInputError` (no thread),
    `ChatError` (inside a transaction, inactive user), `ChatThreadNotFound`,
    `ChatNothingToResume` (nothing pending, or another decision came first),
    `ChatDecisionRefused` (a decision that could not be carried out: still pending),
    `django.db.DatabaseError`.
    """
    decision = check_decision(resume)
    if not isinstance(thread_id, str):
        raise ChatInputError(gettext_noop("a decision needs the thread_id of its thread"))
    conversation = _entry_thread(user_id=user_id, thread_id=thread_id, first_message="")
    approval = pending_approval(conversation_id=conversation.pk)
    interrupted = (
        undecided_interrupts(conversation_id=conversation.pk, run_id=approval.run_id)
        .select_related("conversation")
        .first()
        if approval is not None
        else None
    )
    if interrupted is None:
        raise ChatNothingToResume("no approval is pending in this thread")
    refuse_unfit_decision(user_id=user_id, decision=decision, proposed=approval)
    try:
        handle, _ = _claim(
            user_id=user_id,
            conversation=conversation,
            request_id=f"req-{uuid.uuid4().hex}",
            run_type=AgentRun.RunType.RESUME,
            resumes=interrupted,
        )
    except IntegrityError as exc:
        raise ChatNothingToResume("another decision settled this approval first") from exc
    return Turn(
        handle=handle,
        message=None,
        user_message=None,
        checkpoint_key=checkpoint_key(interrupted),
        decision=decision,
        approval=approval,
    )


def open_subagent_turn(*, parent: AgentRunHandle, task: str) -> Turn:
    """Open a `subagent` run of `parent` for `task`, in a persisted child thread of parent's.

    Raises `ChatInputError` for a task that is not a storable message.
    """
    check_message(task)
    user_id = int(parent.ctx.uid)
    child = services.start_thread(
        user_id=user_id,
        first_message=task,
        source=Conversation.Source.AGENT_CALL,
        parent=parent.conversation,
    )
    handle, user_message = _claim(
        user_id=user_id,
        conversation=child,
        request_id=parent.ctx.request_id,
        run_type=AgentRun.RunType.SUBAGENT,
        parent_run=parent.run,
        message=task,
    )
    return Turn(handle=handle, message=task, user_message=user_message)


def open_agent_run(
    *, user_id: int, thread_id: str | None, request_id: str | None, run_type: str
) -> Turn:
    """The open of `agent_run` and `aagent_run`: the entry checks, the thread, the run claimed."""
    if run_type not in TOOL_RUN_TYPES:
        raise ValueError("agent_run serves top-level chat or resume runs")
    conversation = _entry_thread(user_id=user_id, thread_id=thread_id, first_message="")
    handle, _ = _claim(
        user_id=user_id,
        conversation=conversation,
        request_id=request_id or f"req-{uuid.uuid4().hex}",
        run_type=run_type,
    )
    return Turn(handle=handle, message=None, user_message=None, checkpoint_key=handle.run_id)
