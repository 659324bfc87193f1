"""Reads of a thread for the agent working in it (history lookback lives in repository.py)."""

from conversations.models import Conversation, Message

# How many earlier user/assistant text messages of the thread the model is shown.
DIALOGUE_MAX_MESSAGES = 20


def get_chat_thread(*, user_id: int | str, thread_id: str) -> Conversation | None:
    """`user_id`'s own visible thread with that id; None for any other (no existence oracle)."""
    return Conversation.objects.visible_to(user_id).filter(thread_id=thread_id).first()


def recent_dialogue(*, conversation: Conversation, before: Message) -> list[Message]:
    """The latest user/assistant text messages of the thread before `before`, oldest first."""
    messages = (
        Message.objects.filter(
            conversation=conversation,
            role__in=(Message.Role.USER, Message.Role.ASSISTANT),
            message_type=Message.Type.TEXT,
            id__lt=before.id,
        )
        .only("role", "content", "created_at")
        .order_by("-created_at", "-id")[:DIALOGUE_MAX_MESSAGES]
    )
    return list(reversed(messages))
