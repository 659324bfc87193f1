import os
from pathlib import Path

import pytest
from django.conf import settings

from memory_app.context import AGENT_FILE_MAX_BYTES, build_agent_input_context

UID = 7


def agents_dir() -> Path:
    directory = Path(settings.WORKSPACE_ROOT) / str(UID) / "agents"
    directory.mkdir(parents=True, exist_ok=True)
    return directory


@pytest.fixture
def opened(monkeypatch) -> list[str]:
    """Every path `os.open` is asked for while the test runs."""
    names: list[str] = []
    real_open = os.open

    def recording_open(path, *args, **kwargs):
        names.append(os.fspath(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", recording_open)
    return names


def test_context_carries_agents_and_user_files_and_renders_both():
    agents_dir().joinpath("AGENTS.md").write_text("Answer in English.")
    agents_dir().joinpath("USER.md").write_text("I am a botanist.")
    context = build_agent_input_context(UID)
    assert (context.agents_md, context.user_md) == ("Answer in English.", "I am a botanist.")
    rendered = context.render()
    assert "Answer in English." in rendered and "I am a botanist." in rendered


def test_context_never_opens_or_carries_memory(opened):
    agents_dir().joinpath("MEMORY.md").write_text("secret-memory-fact")
    agents_dir().joinpath("AGENTS.md").write_text("rules")
    context = build_agent_input_context(UID)
    assert "MEMORY.md" not in {os.path.basename(name) for name in opened}
    assert {"AGENTS.md", "USER.md"} <= {os.path.basename(name) for name in opened}
    assert "secret-memory-fact" not in repr(context) + context.render()


def test_missing_workspace_gives_an_empty_context():
    context = build_agent_input_context(UID)
    assert (context.agents_md, context.user_md, context.render()) == ("", "", "")


def test_a_large_file_is_cut_at_a_utf8_boundary_and_marked():
    agents_dir().joinpath("USER.md").write_text("界" * AGENT_FILE_MAX_BYTES)
    context = build_agent_input_context(UID)
    assert context.user_md_truncated
    assert context.user_md == "界" * (AGENT_FILE_MAX_BYTES // 3)
    assert f"only the first {AGENT_FILE_MAX_BYTES} bytes" in context.render()


def test_a_symlinked_file_is_not_followed(tmp_path):
    outside = tmp_path / "outside.md"
    outside.write_text("followed-the-link")
    agents_dir().joinpath("AGENTS.md").symlink_to(outside)
    context = build_agent_input_context(UID)
    assert context.agents_md == ""
    assert "followed-the-link" not in context.render()
