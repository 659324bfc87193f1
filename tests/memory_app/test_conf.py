"""Every setting the memory app reads has its default inside the app (but `WORKSPACE_ROOT`,
which a host must set), read at call time; `YUXI_AGENT_INSTRUCTIONS` replaces the role prompt
and leaves the memory rules the middleware adds."""

from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from conversations import conf as conversations_conf
from memory_app import conf
from memory_app.middleware import MEMORY_RULES
from memory_app.runtime import chat
from memory_app.workspace import Workspace
from tests.factories import memory_user
from tests.memory_app.models import RecordingModel

SETTINGS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "settings.md"


def test_an_unset_setting_reads_as_its_default(settings):
    for name in conf.DEFAULTS:
        if hasattr(settings, name):
            delattr(settings, name)
    assert {name: conf.setting(name) for name in conf.DEFAULTS} == conf.DEFAULTS


def test_the_workspace_root_has_no_default_and_its_absence_is_named(settings):
    del settings.WORKSPACE_ROOT
    with pytest.raises(ImproperlyConfigured, match="WORKSPACE_ROOT"):
        Workspace.for_user(1)


@pytest.mark.django_db(transaction=True)
def test_a_remembering_turn_needs_no_setting_of_either_app_but_the_workspace_root(
    settings, agents_file
):
    for name in [*conf.DEFAULTS, *conversations_conf.DEFAULTS]:
        if hasattr(settings, name):
            delattr(settings, name)
    user = memory_user()
    turn = chat(user_id=user.pk, message="remember that I drink oolong tea")
    assert [call["status"] for call in turn.tool_calls] == ["success"]
    assert agents_file(user.pk, "MEMORY.md").read_text() == "I drink oolong tea\n"


@pytest.mark.django_db(transaction=True)
def test_the_agent_instructions_replace_the_role_prompt_and_keep_the_memory_rules(settings):
    settings.YUXI_AGENT_INSTRUCTIONS = "You are Ada, the support desk's assistant."
    model = RecordingModel()
    chat(user_id=memory_user().pk, message="hello", model=model)
    prompt = model.system_prompt()
    assert prompt.startswith("You are Ada, the support desk's assistant.")
    assert "You are Yuxi" not in prompt
    assert MEMORY_RULES in prompt


@pytest.mark.django_db(transaction=True)
def test_without_agent_instructions_the_role_prompt_is_yuxis(settings):
    if hasattr(settings, "YUXI_AGENT_INSTRUCTIONS"):
        del settings.YUXI_AGENT_INSTRUCTIONS
    model = RecordingModel()
    chat(user_id=memory_user().pk, message="hello", model=model)
    assert model.system_prompt().startswith(conf.DEFAULT_AGENT_INSTRUCTIONS)


def documented_default(value: object) -> str:
    """How the settings page writes a default: numbers as `%g`, empty text as "empty", the
    role prompt by its opening words."""
    if isinstance(value, int | float):
        return f"`{value:g}`"
    if value == "":
        return "empty"
    return f"`{str(value)[:20]}"


@pytest.mark.parametrize("name", sorted(conf.DEFAULTS))
def test_the_settings_page_lists_each_setting_with_its_default_and_the_app_that_reads_it(name):
    rows = [
        line for line in SETTINGS_PAGE.read_text().splitlines() if line.startswith(f"| `{name}`")
    ]
    assert len(rows) == 1
    assert documented_default(conf.DEFAULTS[name]) in rows[0]
    assert "memory_app" in rows[0]
