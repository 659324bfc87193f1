"""Chat with the agent from the terminal as a given user (through the same Chat service).

Ctrl-C while a turn runs cancels that turn (the run ends `cancelled`, as the runtime's
cancellation policy says) and ends the command with exit status 130."""

from django.core.management.base import BaseCommand, CommandError, CommandParser

from conversations.utils.log_format import quiet_event_logs
from memory_app.management.commands.memory import find_user
from memory_app.runtime import ChatError, chat

# The shell's exit status for a command ended by Ctrl-C (128 + SIGINT).
INTERRUPTED_EXIT_STATUS = 130


class Command(BaseCommand):
    help = "Chat with the agent as USERNAME; interactive (one line per turn) without a message."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--user", required=True, help="username to chat as")
        parser.add_argument("--thread", help="thread id to continue (default: a new thread)")
        parser.add_argument("message", nargs="?", help="one message; omit for interactive mode")

    def handle(self, *args: object, **options: object) -> None:
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
            raise CommandError(
                "interrupted: the turn was cancelled", returncode=INTERRUPTED_EXIT_STATUS
            ) from exc
        for call in turn.tool_calls:
            self.stdout.write(f"[tool {call['name']}: {call['status']}]")
        self.stdout.write(f"yuxi> {turn.reply}")
        self.stdout.write(f"(thread {turn.thread_id})")
        return turn.thread_id
