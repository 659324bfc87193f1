"""Chat with the agent from the terminal as a given user (through the same Chat service).

Ctrl-C while a turn runs cancels that turn (the run ends `cancelled`, as the runtime's
cancellation policy says) and ends the command with exit status 130. It runs with translations
off, as no request chose a language: the demo model answers in the script of each message."""

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser, no_translations

from conversations.utils.log_format import quiet_event_logs
from memory_app.management.commands.memory import find_user
from memory_app.runtime import ChatError, ChatNothingToResume, ChatTurn, chat

# The shell's exit status for a command ended by Ctrl-C (128 + SIGINT).
INTERRUPTED_EXIT_STATUS = 130

# The answers the decision prompt takes, and the decision each one is.
DECISION_ANSWERS = {
    "a": "approve",
    "approve": "approve",
    "e": "edit",
    "edit": "edit",
    "r": "reject",
    "reject": "reject",
}


def _cancelled() -> CommandError:
    """Ctrl-C during a turn: the turn is cancelled and the command ends as the shell expects."""
    return CommandError("interrupted: the turn was cancelled", returncode=INTERRUPTED_EXIT_STATUS)


class Command(BaseCommand):
    help = (
        "Chat with the agent as USERNAME; interactive (one line per turn) without a message. A "
        "memory write waiting for approval asks approve / edit / reject on standard input."
    )
    # call_command(..., stdin=...) feeds the decision prompt, as createsuperuser's own.
    stealth_options = ("stdin",)

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--user", required=True, help="who chats (the user model's USERNAME_FIELD value)"
        )
        parser.add_argument("--thread", help="thread id to continue (default: a new thread)")
        parser.add_argument("message", nargs="?", help="one message; omit for interactive mode")

    @no_translations
    def handle(self, *args: object, **options: Any) -> None:
        self.stdin = options.get("stdin") or sys.stdin
        with quiet_event_logs(verbosity=options["verbosity"]):
            self._handle(options)

    def _handle(self, options: dict) -> None:
        user = find_user(options["user"])
        thread_id = options["thread"]
        if options["message"] is not None:
            self._turn(user.pk, thread_id, options["message"])
            return
        self.stdout.write("Type a message and press Enter; an empty line or EOF ends the chat.")
        while True:
            try:
                line = input("you> ")
            except EOFError:
                break
            if not line.strip():
                break
            thread_id = self._turn(user.pk, thread_id, line)

    def _turn(self, user_id: int, thread_id: str | None, message: str) -> str:
        try:
            turn = chat(user_id=user_id, message=message, thread_id=thread_id)
        except ChatError as exc:
            raise CommandError(str(exc)) from exc
        except KeyboardInterrupt as exc:
            raise _cancelled() from exc
        self._show(turn)
        self.stdout.write(f"(thread {turn.thread_id})")
        self._decide(user_id, turn)
        return turn.thread_id

    def _show(self, turn: ChatTurn) -> None:
        """What the turn did: a line per tool call with its status, then the reply."""
        for call in turn.tool_calls:
            self.stdout.write(f"[tool {call['name']}: {call['status']}]")
        self.stdout.write(f"yuxi> {turn.reply}")

    def _decide(self, user_id: int, turn: ChatTurn) -> None:
        """Put a memory write that waits for approval to the user, and carry their decision
        (a refused decision leaves it waiting, so it is asked again); end of input leaves it
        waiting for a later decision."""
        while turn.status == "interrupted" and turn.approval:
            self.stdout.write(f"The assistant wants to remember: {turn.approval['content']}")
            if turn.approval.get("replaces"):
                self.stdout.write(f"  replacing: {turn.approval['replaces']}")
            answer = self._ask("approve, edit or reject? [a/e/r] ")
            if answer is None:
                self.stdout.write("(the write is still waiting for your decision)")
                return
            decision = DECISION_ANSWERS.get(answer.strip().lower())
            if decision is None:
                self.stdout.write("answer a (approve), e (edit) or r (reject)")
                continue
            resume: dict[str, Any] = {"decision": decision}
            if decision == "edit":
                edited = self._edited(turn.approval)
                if edited is None:
                    self.stdout.write("(the write is still waiting for your decision)")
                    return
                resume |= edited
            try:
                turn = chat(user_id=user_id, thread_id=turn.thread_id, resume=resume)
            except ChatNothingToResume as exc:
                raise CommandError(str(exc)) from exc
            except ChatError as exc:
                self.stdout.write(f"refused: {exc}")
                continue
            except KeyboardInterrupt as exc:
                raise _cancelled() from exc
            self._show(turn)

    def _edited(self, approval: dict[str, Any]) -> dict[str, Any] | None:
        """The user's own version of a proposed write: its text, and, when the proposal
        replaces a line, which line (a model may name one the file does not hold, and the
        user must be able to say "none" rather than only reject); None at the end of input."""
        content = self._ask("text to remember> ")
        if content is None:
            return None
        replaces = approval.get("replaces")
        if replaces:
            answer = self._ask("text it replaces (Enter: add it as a new line instead)> ")
            if answer is None:
                return None
            replaces = answer or None
        return {"content": content, "replaces": replaces}

    def _ask(self, prompt: str) -> str | None:
        """One line of the command's input after `prompt`; None at the end of input."""
        self.stdout.write(prompt, ending="")
        self.stdout.flush()
        line = self.stdin.readline()
        return line.rstrip("\n") if line else None
