import pytest

from memory_app.context import AGENT_FILE_MAX_BYTES, build_agent_input_context

UID = 7


@pytest.fixture
def agents_dir(agents_file):
    return lambda: agents_file(UID, "x").parent


def test_context_carries_agents_and_user_files_and_renders_both(agents_dir):
    agents_dir().joinpath("AGENTS.md").write_text("Answer in English.")
    agents_dir().joinpath("USER.md").write_text("I am a botanist.")
    context = build_agent_input_context(UID)
    assert (context.agents_md, context.user_md) == ("Answer in English.", "I am a botanist.")
    rendered = context.render()
    assert "Answer in English." in rendered and "I am a botanist." in rendered


def test_context_never_opens_or_carries_memory(agents_dir, opened_files):
    agents_dir().joinpath("MEMORY.md").write_text("secret-memory-fact")
    agents_dir().joinpath("AGENTS.md").write_text("rules")
    context = build_agent_input_context(UID)
    assert "MEMORY.md" not in opened_files
    assert {"AGENTS.md", "USER.md"} <= set(opened_files)
    assert "secret-memory-fact" not in repr(context) + context.render()


def test_missing_workspace_gives_an_empty_context():
    context = build_agent_input_context(UID)
    assert (context.agents_md, context.user_md, context.render()) == ("", "", "")


@pytest.mark.parametrize("uid", ["", "-1", "../1"])
def test_a_uid_that_names_no_workspace_gives_an_empty_context(uid):
    context = build_agent_input_context(uid)
    assert (context.agents_md, context.user_md, context.render()) == ("", "", "")


def test_a_large_file_is_cut_at_a_utf8_boundary_and_marked(agents_dir):
    agents_dir().joinpath("USER.md").write_text("界" * AGENT_FILE_MAX_BYTES)
    context = build_agent_input_context(UID)
    assert context.user_md_truncated
    assert context.user_md == "界" * (AGENT_FILE_MAX_BYTES // 3)
    assert f"only the first {AGENT_FILE_MAX_BYTES} bytes" in context.render()


def test_a_symlinked_file_is_not_followed(agents_dir, tmp_path):
    outside = tmp_path / "outside.md"
    outside.write_text("followed-the-link")
    agents_dir().joinpath("AGENTS.md").symlink_to(outside)
    context = build_agent_input_context(UID)
    assert context.agents_md == ""
    assert "followed-the-link" not in context.render()
