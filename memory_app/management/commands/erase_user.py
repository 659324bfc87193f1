"""Erase a user and all their data: rows, memory ledger, workspace (idempotent)."""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from memory_app.management.commands.memory import find_actor
from memory_app.services import MemoryWriteError, erase_user


class Command(BaseCommand):
    help = "Erase USERNAME: every thread, message, run, memory event, the workspace and the user."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--user", required=True, help="the user to erase (their USERNAME_FIELD value)"
        )
        parser.add_argument("--actor", help="staff member doing it (default: the user)")
        parser.add_argument("--yes", action="store_true", help="confirm: this cannot be undone")

    def handle(self, *args: object, **options: object) -> None:
        if not options["yes"]:
            raise CommandError("erasure cannot be undone: add --yes to confirm")
        User = get_user_model()
        user = User.objects.filter(**{User.USERNAME_FIELD: options["user"]}).first()
        if user is None:
            self.stdout.write(
                f"no user with {User.USERNAME_FIELD} {options['user']!r}: nothing to erase"
            )
            return
        actor = find_actor(options["actor"], user)
        try:
            report = erase_user(user=user, actor=actor)
        except MemoryWriteError as exc:
            raise CommandError(f"{exc}; run it again to finish the erasure") from exc
        counts = ", ".join(f"{key} {value}" for key, value in report.counts.items())
        self.stdout.write(self.style.SUCCESS(f"erased {options['user']!r}: {counts}"))
