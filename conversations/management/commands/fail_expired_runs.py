"""Mark runs whose worker lease lapsed, or that stayed pending too long, as failed; run it
periodically (cron, a systemd timer)."""

import logging

from django.core.management.base import BaseCommand

from conversations.runs import fail_expired_runs

logger = logging.getLogger("yuxi.runs")


class Command(BaseCommand):
    help = (
        "Mark running agent runs whose lease has expired (their worker died) and runs pending "
        "longer than AGENT_RUN_PENDING_TIMEOUT_SECONDS as failed."
    )

    def handle(self, *args: object, **options: object) -> None:
        count = fail_expired_runs()
        if count:
            logger.warning("event=runs_reaped failed=%d", count)
        self.stdout.write(f"{count} expired run(s) marked failed")
