"""Every setting the conversations app reads has its default inside the app, read at call
time; the settings page lists each with that default."""

from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from conversations import conf, runs
from tests.factories import ConversationFactory

SETTINGS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "settings.md"


def test_an_unset_setting_reads_as_its_default(settings):
    for name in conf.DEFAULTS:
        delattr(settings, name)
    assert {name: conf.setting(name) for name in conf.DEFAULTS} == conf.DEFAULTS


def test_a_set_setting_is_read_at_call_time(settings):
    settings.AGENT_RUN_LEASE_SECONDS = 7
    assert conf.setting("AGENT_RUN_LEASE_SECONDS") == 7


def test_a_setting_without_default_must_be_set(settings):
    with pytest.raises(ImproperlyConfigured, match="NO_SUCH_SETTING"):
        conf.setting("NO_SUCH_SETTING")


@pytest.mark.django_db
def test_a_run_is_leased_for_the_default_when_the_host_sets_nothing(settings):
    del settings.AGENT_RUN_LEASE_SECONDS
    thread = ConversationFactory()
    run = runs.start_run(
        user_id=thread.user_id, conversation=thread, request_id="r1", worker_id="w1"
    )
    run.refresh_from_db()
    lease = (run.lease_expires_at - run.started_at).total_seconds()
    default = conf.DEFAULTS["AGENT_RUN_LEASE_SECONDS"]
    assert default - 1 < lease <= default + 1


@pytest.mark.parametrize("name", sorted(conf.DEFAULTS))
def test_the_settings_page_lists_each_setting_with_its_default_and_app(name):
    rows = [
        line for line in SETTINGS_PAGE.read_text().splitlines() if line.startswith(f"| `{name}`")
    ]
    assert len(rows) == 1
    assert f"`{conf.DEFAULTS[name]}`" in rows[0]
    assert "conversations" in rows[0]
