"""A user's memory from the terminal: show it, switch it (or its write approval), clear it,
list, restore or forget its kept versions, export the user's data; and, for one user or all,
the lines of MEMORY.md and its kept versions that hold a credential."""

import sys

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from conversations.utils.log_format import quiet_event_logs
from memory_app import selectors, services


def find_user(username: str, *, flag: str = "--user") -> object:
    """The user `flag` names by the user model's `USERNAME_FIELD` (a username, an email...);
    a name no user has is an error that says which flag was wrong."""
    User = get_user_model()
    user = User.objects.filter(**{User.USERNAME_FIELD: username}).first()
    if user is None:
        raise CommandError(f"{flag}: no user with {User.USERNAME_FIELD} {username!r}")
    return user


def find_actor(username: str | None, user: object) -> object:
    """The user themself, or the staff member `--actor` names."""
    if username is None:
        return user
    actor = find_user(username, flag="--actor")
    if not getattr(actor, "is_staff", False):
        raise CommandError(f"--actor {username!r} is not staff")
    return actor


class Command(BaseCommand):
    help = (
        "show: the switch and MEMORY.md; on / off: the switch; approval-on / approval-off: "
        "whether each memory write waits for the user's decision; clear: empty MEMORY.md; "
        "versions: the earlier versions of MEMORY.md; restore SHA: put a kept version back "
        "(if MEMORY.md is still the version --if-match names, default: the one read now); "
        "forget-versions: remove every kept version; "
        "export: all of the user's data as JSON (to stdout or --output); "
        "scan-credentials (with --user or --all): the lines of MEMORY.md and of its kept "
        "versions that hold a credential, by line and kind, never the text."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        whose = parser.add_mutually_exclusive_group(required=True)
        whose.add_argument("--user", help="whose memory (the user model's USERNAME_FIELD value)")
        whose.add_argument("--all", action="store_true", help="scan-credentials: every user's")
        parser.add_argument("--actor", help="staff member doing it (default: the user)")
        parser.add_argument("--output", help="export: write to this file instead of stdout")
        parser.add_argument(
            "--if-match", help="restore: the etag MEMORY.md must still have (default: current)"
        )
        parser.add_argument(
            "action",
            choices=[
                "show",
                "on",
                "off",
                "approval-on",
                "approval-off",
                "clear",
                "versions",
                "restore",
                "forget-versions",
                "export",
                "scan-credentials",
            ],
        )
        parser.add_argument("sha256", nargs="?", help="restore: the version's SHA-256 (hex)")

    def handle(self, *args: object, **options: object) -> None:
        with quiet_event_logs(verbosity=options["verbosity"]):
            self._handle(options)

    def _handle(self, options: dict) -> None:
        if options["all"] or options["action"] == "scan-credentials":
            self._scan(options)
            return
        user = find_user(options["user"])
        actor = find_actor(options["actor"], user)
        action = options["action"]
        if action != "restore" and (options["sha256"] or options["if_match"]):
            raise CommandError("a SHA-256 and --if-match go with restore only")
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
            elif action == "versions":
                self._versions(user)
            elif action == "restore":
                self._restore(user, actor, options["sha256"], options["if_match"])
            elif action == "forget-versions":
                services.forget_memory_versions(user=user, actor=actor)
                self.stdout.write("kept versions forgotten")
            else:
                self._export(user, options["output"])
        except services.MemoryWriteError as exc:
            raise CommandError(str(exc)) from exc
        except selectors.MemoryVersionNotFound as exc:
            raise CommandError(f"no such version is kept: {options['sha256']}") from exc

    def _scan(self, options: dict) -> None:
        if options["action"] != "scan-credentials":
            raise CommandError("--all goes with scan-credentials only")
        if options["actor"] or options["sha256"] or options["if_match"] or options["output"]:
            raise CommandError("scan-credentials takes --user or --all only")
        if options["all"]:
            User = get_user_model()
            users = User.objects.order_by(User.USERNAME_FIELD).iterator()
        else:
            users = [find_user(options["user"])]
        lines = 0
        for user in users:
            for found in selectors.credential_lines(user=user):
                where = "MEMORY.md" if found.version is None else f"version {found.version}"
                self.stdout.write(f"{user.get_username()}: {where} line {found.line}: {found.kind}")
                lines += 1
        self.stdout.write(f"{lines} line(s) holding a credential")

    def _versions(self, user: object) -> None:
        found = selectors.list_memory_versions(user=user)
        if not found:
            self.stdout.write("no earlier version")
        for version in found:
            size = "?" if version.size_bytes is None else version.size_bytes
            kept = "kept" if version.available else "not kept"
            self.stdout.write(
                f"{version.sha256} {size} bytes, made by {version.kind}, replaced "
                f"{version.replaced_at.isoformat()} by {version.replaced_by}, {kept}"
            )

    def _restore(self, user: object, actor: object, sha256: str | None, if_match: str | None):
        if not sha256:
            raise CommandError("restore needs the SHA-256 of a kept version (see `versions`)")
        if if_match is None:
            if_match = selectors.read_memory_file(user=user).etag
        memory = services.restore_memory_version(
            user=user, sha256=sha256, if_match=if_match, actor=actor
        )
        self.stdout.write(f"restored {sha256}: etag {memory.etag}, {memory.size_bytes} bytes")

    def _show(self, user: object) -> None:
        memory = selectors.read_memory_file(user=user)
        self.stdout.write(f"memory {'on' if selectors.memory_enabled(user.pk) else 'off'}")
        self.stdout.write(f"etag {memory.etag}, {memory.size_bytes} bytes")
        if memory.problem is not None:
            self.stdout.write(f"MEMORY.md cannot be shown: {memory.problem}")
        else:
            self.stdout.write(memory.text, ending="")

    def _export(self, user: object, output: str | None) -> None:
        chunks = selectors.export_user_data(user=user)
        if output is None:
            for chunk in chunks:
                sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()
            return
        written = 0
        with open(output, "wb") as handle:
            for chunk in chunks:
                written += handle.write(chunk)
        self.stdout.write(f"exported {user.get_username()!r} to {output} ({written} bytes)")
