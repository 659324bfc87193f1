"""Mark running runs whose worker lease lapsed as failed; run it periodically (cron, timer)."""

from django.core.management.base import BaseCommand

from conversations.runs import fail_expired_runs


class Command(BaseCommand):
    help = "Mark running agent runs whose lease has expired (their worker died) as failed."

    def handle(self, *args: object, **options: object) -> None:
        count = fail_expired_runs()
        self.stdout.write(f"{count} expired run(s) marked failed")
