"""Load demo data: users with memory on and off, threads of every kind, runs and tool calls."""

from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from conversations.models import HIDDEN_SOURCES, AgentRun, Conversation, Message, ToolCall
from conversations.runs.leases import db_clock
from memory_app.models import UserConfig
from memory_app.services import erase_user
from memory_app.tool_names import REMEMBER_MEMORY_TOOL
from memory_app.workspace import Workspace
from memory_app.workspace.paths import AGENTS_RELPATH, MEMORY_RELPATH, USER_RELPATH

STAFF_USERNAME = "admin"
STAFF_PASSWORD = "yuxi-admin"
# Passwords of the non-staff demo users (documented in the README).
DEMO_PASSWORDS = {"alice": "alice-demo", "bob": "bob-demo"}
# Whether each demo user has memory on.
DEMO_MEMORY = {"alice": True, "bob": False}

AGENTS_MD = """# Agent rules 🤖
- 用中文或用户使用的语言回答。
- Be concise; ask before booking anything.
"""

# Workspace files of each demo user: AGENTS.md, USER.md, MEMORY.md.
DEMO_FILES = {
    "alice": {
        AGENTS_RELPATH: AGENTS_MD,
        USER_RELPATH: "# User\nAlice（爱丽丝）, lives in Shanghai 🏙️, prefers metric units.\n",
        MEMORY_RELPATH: (
            "# Memory\n- 对花生过敏 🥜 (allergic to peanuts)\n- Prefers window seats ✈️\n"
        ),
    },
    "bob": {
        AGENTS_RELPATH: AGENTS_MD,
        USER_RELPATH: "# User\nBob（鲍勃）, night owl 🦉.\n",
        MEMORY_RELPATH: "# Memory\n- 喜欢绿茶 🍵\n",
    },
}


class Command(BaseCommand):
    help = (
        "Create the demo users, conversations, runs and tool calls that are missing; an "
        "existing user's password, flags and files are never changed. --reset (DEBUG only) "
        "first erases the demo users and everything of theirs."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--reset",
            action="store_true",
            help="erase the demo users (admin, alice, bob) with all their data, then seed "
            "afresh; refused unless DEBUG is on",
        )

    def handle(self, *args: object, **options: object) -> None:
        if options["reset"]:
            self._reset()
        self._seed()

    def _reset(self) -> None:
        """Erase each demo user as any user is erased (rows, ledger, workspace). Refused with
        `DEBUG` off, so a production site can never lose users named like the demo's."""
        if not settings.DEBUG:
            raise CommandError(
                "--reset erases the users admin, alice and bob with all their data: it runs "
                "only with DEBUG on (DEBUG=True)"
            )
        usernames = [STAFF_USERNAME, *DEMO_PASSWORDS]
        for user in get_user_model().objects.filter(username__in=usernames):
            erase_user(user=user, actor=user)
        self.stdout.write(f"Demo users erased: {', '.join(usernames)}.")

    @transaction.atomic
    def _seed(self) -> None:
        User = get_user_model()
        created = []
        if not User.objects.filter(username=STAFF_USERNAME).exists():
            staff = User.objects.create_superuser(STAFF_USERNAME, password=STAFF_PASSWORD)
            # The README's first example ("remember that I drink oolong tea" as admin) remembers.
            UserConfig.objects.create(user=staff, enable_memory=True)
            created.append(STAFF_USERNAME)
        seeders = {"alice": self._seed_alice, "bob": self._seed_bob}
        for username, password in DEMO_PASSWORDS.items():
            if User.objects.filter(username=username).exists():
                continue
            user = User.objects.create_user(username, password=password)
            UserConfig.objects.create(user=user, enable_memory=DEMO_MEMORY[username])
            seeders[username](user)
            # Files are not transactional: publish them only once the rows are committed.
            transaction.on_commit(lambda user=user: self._write_workspace(user))
            created.append(username)
        if created:
            self.stdout.write(self.style.SUCCESS(f"Demo data created for {', '.join(created)}."))
        else:
            self.stdout.write("Demo data already present.")

    @staticmethod
    def _write_workspace(user: object) -> None:
        workspace = Workspace.for_user(user.pk)
        for relpath, text in DEMO_FILES[user.username].items():
            workspace.replace_authorized_file(relpath, text.encode("utf-8"))

    def _seed_alice(self, alice: object) -> None:
        start = db_clock() - timedelta(days=3)
        chat = Conversation.objects.create(
            thread_id="demo-alice-chat",
            user=alice,
            title="旅行计划 ✈️ Trip planning",
            metadata={"client": "web"},
            created_at=start,
        )
        steps = [
            ("user", "text", "请记住：我对花生过敏 🥜。"),
            # The assistant text that issues the tool call carries it, as the Chat service
            # records it; the call's result follows as a tool message.
            ("assistant", "text", "好的，我会记住你对花生过敏。"),
            ("tool", "tool_result", '{"status": "added"}'),
            ("system", "text", "System note: internal routing hint (never shown to lookback)."),
            ("assistant", "tool_call", "A tool_call-type record (never shown to lookback)."),
            ("user", "text", "Next week I fly to 東京 — suggest 3 restaurants 🍣"),
            ("assistant", "text", "Sure! Here are three nut-free places near Shinjuku."),
        ]
        messages = [
            Message.objects.create(
                conversation=chat,
                role=role,
                message_type=kind,
                content=content,
                created_at=start + timedelta(minutes=i),
                metadata={"tokens": 12 + i},
            )
            for i, (role, kind, content) in enumerate(steps)
        ]
        messages[0].image_content = "data:image/png;base64,iVBORw0KGgo="
        messages[0].attachments = [{"name": "menu.pdf", "size": 1024}]
        messages[0].save(update_fields=["image_content", "attachments"])
        messages[1].feedback = {"rating": "up"}
        messages[1].save(update_fields=["feedback"])
        ToolCall.objects.create(
            message=messages[1],
            tool_call_id="call_demo_1",
            name=REMEMBER_MEMORY_TOOL,
            input={"content": "对花生过敏"},
            output='{"status": "added"}',
            status=ToolCall.Status.SUCCESS,
            metadata={"latency_ms": 14},
        )
        for status in (Conversation.Status.ARCHIVED, Conversation.Status.DELETED):
            old = Conversation.objects.create(
                thread_id=f"demo-alice-{status}",
                user=alice,
                title=f"{status} thread",
                status=status,
            )
            Message.objects.create(conversation=old, role="user", content=f"A {status} message.")
        for source in (Conversation.Source.API, *HIDDEN_SOURCES):
            other = Conversation.objects.create(
                thread_id=f"demo-alice-{source}",
                user=alice,
                title=f"{source} thread",
                source=source,
            )
            Message.objects.create(conversation=other, role="user", content=f"From {source}.")
        run = AgentRun.objects.create(
            user=alice,
            conversation=chat,
            request_id="demo-request-1",
            status=AgentRun.Status.SUCCEEDED,
            started_at=start,
            finished_at=start + timedelta(minutes=7),
        )
        child = Conversation.objects.create(
            thread_id="demo-alice-subagent",
            user=alice,
            title="SubAgent: restaurant research",
            parent=chat,
        )
        Message.objects.create(conversation=child, role="assistant", content="Sub-agent notes.")
        AgentRun.objects.create(
            user=alice,
            conversation=child,
            request_id="demo-request-1",
            run_type=AgentRun.RunType.SUBAGENT,
            parent_run=run,
            status=AgentRun.Status.SUCCEEDED,
            started_at=start + timedelta(minutes=3),
            finished_at=start + timedelta(minutes=4),
        )
        AgentRun.objects.create(user=alice, conversation=chat, request_id="demo-request-2")

    def _seed_bob(self, bob: object) -> None:
        chat = Conversation.objects.create(thread_id="demo-bob-chat", user=bob, title="Bob's notes")
        Message.objects.create(conversation=chat, role="user", content="Memory is off for me.")
        Message.objects.create(conversation=chat, role="assistant", content="Understood 👍")
