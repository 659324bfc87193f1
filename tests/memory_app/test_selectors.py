import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from conversations.models import AgentRun
from conversations.runs import claim_run, finish_run
from memory_app.selectors import (
    MEMORY_PROMPT_MAX_BYTES,
    MemorySnapshot,
    memory_enabled,
    memory_write_refusal,
    read_memory_for_prompt,
)
from memory_app.workspace import Workspace, WorkspacePathRefused
from memory_app.workspace.paths import MEMORY_RELPATH
from tests.factories import AgentRunFactory, UserConfigFactory, UserFactory


def _write_memory(uid: int, data: bytes) -> None:
    Workspace.for_user(uid).replace_authorized_file(MEMORY_RELPATH, data)


@pytest.mark.django_db
def test_memory_enabled_follows_the_switch_and_no_row_means_off():
    assert memory_enabled(UserConfigFactory(enable_memory=True).user_id)
    assert not memory_enabled(UserConfigFactory(enable_memory=False).user_id)
    assert not memory_enabled(UserFactory().pk)


@pytest.mark.django_db
@pytest.mark.parametrize("uid", ["", "not-a-number", "1.5"])
def test_a_uid_that_names_no_user_reads_as_off_instead_of_raising(uid):
    UserConfigFactory(enable_memory=True)
    assert memory_enabled(uid) is False


def test_a_missing_memory_file_reads_as_empty():
    assert read_memory_for_prompt(3) == MemorySnapshot(text="", size_bytes=0, truncated=False)


def test_a_small_memory_file_is_read_whole():
    _write_memory(3, "对花生过敏 🥜\n".encode())
    assert read_memory_for_prompt("3") == MemorySnapshot(
        text="对花生过敏 🥜\n", size_bytes=len("对花生过敏 🥜\n".encode()), truncated=False
    )


def test_a_file_of_exactly_the_budget_is_not_truncated():
    _write_memory(3, b"x" * MEMORY_PROMPT_MAX_BYTES)
    snapshot = read_memory_for_prompt(3)
    assert (snapshot.size_bytes, snapshot.truncated) == (MEMORY_PROMPT_MAX_BYTES, False)


def test_a_ten_megabyte_file_costs_the_same_bounded_read(os_read_sizes):
    _write_memory(3, b"fact\n" * (2 * 1024 * 1024))
    snapshot = read_memory_for_prompt(3)
    assert sum(os_read_sizes) <= MEMORY_PROMPT_MAX_BYTES + 1
    assert snapshot.truncated
    assert snapshot.size_bytes == MEMORY_PROMPT_MAX_BYTES
    assert snapshot.text == ("fact\n" * 5000)[:MEMORY_PROMPT_MAX_BYTES]


@pytest.mark.parametrize("char", ["é", "记", "🥜"])
def test_the_cut_never_splits_a_code_point(char):
    text = "a" + char * MEMORY_PROMPT_MAX_BYTES
    _write_memory(3, text.encode())
    snapshot = read_memory_for_prompt(3)
    width = len(char.encode())
    kept = (MEMORY_PROMPT_MAX_BYTES - 1) // width
    assert snapshot.text == "a" + char * kept
    assert snapshot.size_bytes == 1 + kept * width
    assert "\ufffd" not in snapshot.text
    assert snapshot.truncated


@pytest.mark.parametrize(
    "data",
    [b"ok\xff\xfe\n", b"\xff" * (2 * MEMORY_PROMPT_MAX_BYTES), b"fact\n\xc3(\n"],
    ids=["small", "huge", "bad-continuation"],
)
def test_bytes_that_are_not_utf8_give_no_text_and_say_so(data):
    _write_memory(3, data)
    snapshot = read_memory_for_prompt(3)
    assert (snapshot.text, snapshot.size_bytes, snapshot.invalid_encoding) == ("", 0, True)
    assert snapshot.truncated == (len(data) > MEMORY_PROMPT_MAX_BYTES)


def test_a_code_point_cut_by_the_budget_is_not_an_encoding_error():
    _write_memory(3, b"x" * (MEMORY_PROMPT_MAX_BYTES - 1) + "记".encode())
    snapshot = read_memory_for_prompt(3)
    assert (snapshot.invalid_encoding, snapshot.truncated) == (False, True)
    assert snapshot.text == "x" * (MEMORY_PROMPT_MAX_BYTES - 1)


def test_a_symlinked_memory_file_is_refused(settings, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("not memory")
    agents = settings.WORKSPACE_ROOT / "3" / "agents"
    agents.mkdir(parents=True)
    (agents / "MEMORY.md").symlink_to(secret)
    with pytest.raises(WorkspacePathRefused):
        read_memory_for_prompt(3)


@hypothesis_settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(min_size=0, max_size=12000))
def test_the_snapshot_is_the_longest_whole_character_prefix_within_the_budget(text):
    _write_memory(3, text.encode())
    snapshot = read_memory_for_prompt(3)
    assert text.startswith(snapshot.text)
    assert snapshot.size_bytes == len(snapshot.text.encode()) <= MEMORY_PROMPT_MAX_BYTES
    assert snapshot.truncated == (snapshot.text != text)
    if snapshot.truncated:
        next_char = text[len(snapshot.text)]
        assert snapshot.size_bytes + len(next_char.encode()) > MEMORY_PROMPT_MAX_BYTES


def _running(**fields):
    run = AgentRunFactory(**fields)
    return claim_run(worker_id="w1", run_id=run.run_id)


@pytest.mark.django_db
def test_write_is_allowed_for_a_leased_top_level_run_with_memory_on():
    run = _running()
    UserConfigFactory(user=run.user, enable_memory=True)
    assert memory_write_refusal(run) is None


@pytest.mark.django_db
def test_write_is_refused_when_the_switch_is_off():
    run = _running()
    UserConfigFactory(user=run.user, enable_memory=False)
    assert memory_write_refusal(run) == "memory is switched off for this user"


@pytest.mark.django_db
def test_run_refusal_comes_first_and_is_the_run_repository_s():
    run = _running(run_type=AgentRun.RunType.SUBAGENT)
    UserConfigFactory(user=run.user, enable_memory=False)
    assert memory_write_refusal(run) == "only a top-level chat or resume run may use memory tools"


@pytest.mark.django_db
def test_finished_run_may_not_write():
    run = _running()
    UserConfigFactory(user=run.user, enable_memory=True)
    run = finish_run(run_id=run.run_id, worker_id="w1", status=AgentRun.Status.SUCCEEDED)
    assert memory_write_refusal(run) == "run is succeeded, not running"


@pytest.mark.django_db
@pytest.mark.parametrize("alias", ["0{uid}", " {uid}", "+{uid}", "{uid}_0"])
def test_memory_enabled_never_reads_a_users_switch_through_an_alias_of_its_key(alias):
    config = UserConfigFactory(enable_memory=True)
    assert memory_enabled(config.user_id) is True
    assert memory_enabled(alias.format(uid=config.user_id)) is False


SMUGGLED = "".join(chr(0xE0000 + ord(c)) for c in "obey")


def test_invisible_characters_reach_the_prompt_escaped_and_joiners_raw():
    _write_memory(3, f"tea{SMUGGLED}\u202e\n👩\u200d👧\n".encode())
    snapshot = read_memory_for_prompt(3)
    assert snapshot.text == "tea\\u{E006F}\\u{E0062}\\u{E0065}\\u{E0079}\\u{202E}\n👩\u200d👧\n"
    assert snapshot.size_bytes == len(snapshot.text.encode()) and not snapshot.truncated


def test_escapes_count_against_the_prompts_budget():
    _write_memory(3, ("\u200b" * (MEMORY_PROMPT_MAX_BYTES // 3)).encode())
    snapshot = read_memory_for_prompt(3)
    assert snapshot.truncated and snapshot.size_bytes <= MEMORY_PROMPT_MAX_BYTES
    assert snapshot.text == "\\u{200B}" * (MEMORY_PROMPT_MAX_BYTES // 8)
