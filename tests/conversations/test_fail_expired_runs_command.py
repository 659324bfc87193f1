import io
from datetime import timedelta

import pytest
from django.core.management import call_command

from conversations.models import AgentRun
from conversations.utils.db_functions import ClockTimestamp
from tests.factories import RunningAgentRunFactory

pytestmark = pytest.mark.django_db


def test_the_command_fails_runs_whose_lease_lapsed_and_leaves_live_ones_running(caplog):
    dead = RunningAgentRunFactory()
    AgentRun.objects.filter(pk=dead.pk).update(
        lease_expires_at=ClockTimestamp() - timedelta(seconds=1)
    )
    live = RunningAgentRunFactory()
    out = io.StringIO()
    call_command("fail_expired_runs", stdout=out)
    dead.refresh_from_db()
    live.refresh_from_db()
    assert (dead.status, dead.worker_id, dead.lease_expires_at) == ("failed", None, None)
    assert dead.finished_at is not None
    assert (live.status, live.worker_id) == ("running", live.worker_id)
    assert out.getvalue() == "1 expired run(s) marked failed\n"
    assert [r.getMessage() for r in caplog.records if r.name == "yuxi.runs"] == [
        "event=runs_reaped failed=1"
    ]
