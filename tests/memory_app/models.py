"""Chat models for runtime tests: the scripted model recording what it was shown, and the
replies a test scripts for it. (A real HTTP model server is `tests.wire_model.WireModel`.)"""

from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field

from conversations.utils.connections import release_connection
from memory_app.llm import ScriptedChatModel


class RecordingModel(ScriptedChatModel):
    """The scripted model, recording what each call was shown; `before_step(n)` runs first and
    `replies` (AIMessages) answer before the script does."""

    calls: list = Field(default_factory=list)
    replies: list = Field(default_factory=list)
    before_step: object = None

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        self.calls.append({"messages": list(messages), "tools": list(self.bound_tools)})
        if self.before_step:
            try:
                self.before_step(len(self.calls))
            finally:
                # The model runs on an executor thread of the process loop: a connection the
                # hook opened there would stay open for the rest of the test session.
                release_connection()
        if self.replies:
            return ChatResult(generations=[ChatGeneration(message=self.replies.pop(0))])
        return super()._generate(messages, stop, run_manager, **kwargs)

    def system_prompt(self, step: int = 0) -> str:
        return self.calls[step]["messages"][0].text

    def tool_names(self, step: int = 0) -> list[str]:
        return self.calls[step]["tools"]


def tool_reply(*calls: tuple) -> AIMessage:
    """A model reply asking for tool calls `(id, name, args)`."""
    return AIMessage(content="", tool_calls=[{"id": i, "name": n, "args": a} for i, n, a in calls])
