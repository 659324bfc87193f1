"""A user's memory from the terminal: show it, switch it (or its write approval), clear it,
export the user's data."""

import sys

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from memory_app import selectors, services


def find_user(username: str) -> object:
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        raise CommandError(f"no user named {username!r}")
    return user


def find_actor(username: str | None, user: object) -> object:
    """The user themself, or the staff member `--actor` names."""
    if username is None:
        return user
    actor = find_user(username)
    if not actor.is_staff:
        raise CommandError(f"--actor {username!r} is not staff")
    return actor


class Command(BaseCommand):
    help = (
        "show: the switch and MEMORY.md; on / off: the switch; approval-on / approval-off: "
        "whether each memory write waits for the user's decision; clear: empty MEMORY.md; "
        "export: all of the user's data as JSON (to stdout or --output)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--user", required=True, help="whose memory")
        parser.add_argument("--actor", help="staff username doing it (default: the user)")
        parser.add_argument("--output", help="export: write to this file instead of stdout")
        parser.add_argument(
            "action",
            choices=["show", "on", "off", "approval-on", "approval-off", "clear", "export"],
        )

    def handle(self, *args: object, **options: object) -> None:
        user = find_user(options["user"])
        actor = find_actor(options["actor"], user)
        action = options["action"]
        try:
            if action == "show":
                self._show(user)
            elif action in ("on", "off"):
                config = services.set_memory_enabled(user=user, enabled=action == "on", actor=actor)
                self.stdout.write(f"memory {'on' if config.enable_memory else 'off'}")
            elif action in ("approval-on", "approval-off"):
                config = services.set_memory_write_approval(
                    user=user, enabled=action == "approval-on", actor=actor
                )
                self.stdout.write(
                    f"memory write approval {'on' if config.memory_write_approval else 'off'}"
                )
            elif action == "clear":
                services.clear_memory(user=user, actor=actor)
                self.stdout.write("memory cleared")
            else:
                self._export(user, options["output"])
        except services.MemoryWriteError as exc:
            raise CommandError(str(exc)) from exc

    def _show(self, user: object) -> None:
        memory = selectors.read_memory_file(user=user)
        self.stdout.write(f"memory {'on' if selectors.memory_enabled(user.pk) else 'off'}")
        self.stdout.write(f"etag {memory.etag}, {memory.size_bytes} bytes")
        if memory.problem is not None:
            self.stdout.write(f"MEMORY.md cannot be shown: {memory.problem}")
        else:
            self.stdout.write(memory.text, ending="")

    @staticmethod
    def _export(user: object, output: str | None) -> None:
        chunks = selectors.export_user_data(user=user)
        if output is None:
            for chunk in chunks:
                sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()
            return
        with open(output, "wb") as handle:
            for chunk in chunks:
                handle.write(chunk)
