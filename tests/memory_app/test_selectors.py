import pytest

from conversations.models import AgentRun
from conversations.runs import claim_run, finish_run
from memory_app.selectors import memory_write_refusal
from tests.factories import AgentRunFactory, UserConfigFactory

pytestmark = pytest.mark.django_db


def _running(**fields):
    run = AgentRunFactory(**fields)
    return claim_run(worker_id="w1", run_id=run.run_id)


def test_write_is_allowed_for_a_leased_top_level_run_with_memory_on():
    run = _running()
    UserConfigFactory(user=run.user, enable_memory=True)
    assert memory_write_refusal(run) is None


def test_write_is_refused_when_the_switch_is_off():
    run = _running()
    UserConfigFactory(user=run.user, enable_memory=False)
    assert memory_write_refusal(run) == "memory is switched off for this user"


def test_run_refusal_comes_first_and_is_the_run_repository_s():
    run = _running(run_type=AgentRun.RunType.SUBAGENT)
    UserConfigFactory(user=run.user, enable_memory=False)
    assert memory_write_refusal(run) == "only a top-level chat or resume run may use memory tools"


def test_finished_run_may_not_write():
    run = _running()
    UserConfigFactory(user=run.user, enable_memory=True)
    run = finish_run(run_id=run.run_id, worker_id="w1", status=AgentRun.Status.SUCCEEDED)
    assert memory_write_refusal(run) == "run is succeeded, not running"
