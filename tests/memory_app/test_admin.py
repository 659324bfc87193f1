"""A user's config page: the memory preview (the agent's own bounded, no-follow read) beside
the ledger of memory events, and the links the memory app adds to the run and user pages."""

import hashlib
import os
from pathlib import Path

import pytest
from django.conf import settings
from django.urls import reverse

from conversations.admin_base import FIELD_EXCERPT_BYTES
from conversations.models import AgentRun, ToolCall
from memory_app.admin.user_config import LINE_ORIGINS_SHOWN, LINE_TEXT_SHOWN_BYTES
from memory_app.memory_file import MEMORY_FILE_MAX_BYTES
from memory_app.models import MemoryEvent
from memory_app.runtime import chat
from memory_app.selectors import (
    LEDGER_EVENTS_SHOWN,
    MEMORY_PROMPT_MAX_BYTES,
    read_memory_file,
)
from memory_app.services import (
    clear_memory,
    forget_memory_versions,
    remember_memory,
    write_memory_file,
)
from tests.factories import (
    AgentRunFactory,
    MemoryEventFactory,
    RunningAgentRunFactory,
    ToolCallFactory,
    UserConfigFactory,
    context_for,
    memory_user,
)

pytestmark = pytest.mark.django_db

MARKER = "<script>alert('memory')</script>"


def _agents_dir(uid: int) -> Path:
    return Path(settings.WORKSPACE_ROOT) / str(uid) / "agents"


def _write_memory(uid: int, data: bytes) -> Path:
    agents = _agents_dir(uid)
    agents.mkdir(parents=True, exist_ok=True)
    path = agents / "MEMORY.md"
    path.write_bytes(data)
    return path


def _page(client, config) -> str:
    response = client.get(reverse("admin:memory_app_userconfig_change", args=[config.pk]))
    assert response.status_code == 200
    return response.content.decode()


def test_preview_shows_memory_escaped_with_its_size(staff_client):
    config = UserConfigFactory(enable_memory=True)
    text = f"- 对花生过敏 🥜\n- {MARKER}\n"
    _write_memory(config.user_id, text.encode())
    html = _page(staff_client, config)
    assert "&lt;script&gt;alert(&#x27;memory&#x27;)&lt;/script&gt;" in html
    assert "<script>alert" not in html
    assert "对花生过敏 🥜" in html
    assert (
        f"{len(text.encode())} bytes shown (the agent reads at most 24576); truncated: no" in html
    )
    assert "on: the agent&#x27;s next run reads the memory" in html


def test_preview_says_when_the_switch_is_off(staff_client):
    config = UserConfigFactory(enable_memory=False)
    _write_memory(config.user_id, b"- a fact\n")
    html = _page(staff_client, config)
    assert "off: the agent reads no memory and gets no memory tool" in html
    assert "- a fact" in html


def test_huge_memory_is_previewed_as_its_first_24_kib_only(staff_client):
    config = UserConfigFactory()
    _write_memory(config.user_id, "记".encode() * (4 * 1024 * 1024))  # 12 MiB
    response = staff_client.get(reverse("admin:memory_app_userconfig_change", args=[config.pk]))
    html = response.content.decode()
    kept = MEMORY_PROMPT_MAX_BYTES // 3 * 3
    assert f"{kept} bytes shown (the agent reads at most 24576); truncated: yes" in html
    assert html.count("记") == kept // 3
    assert len(response.content) < 100_000


def test_symlinked_memory_is_refused_and_its_target_never_shown(staff_client, tmp_path):
    config = UserConfigFactory()
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-TARGET")
    _agents_dir(config.user_id).mkdir(parents=True)
    (_agents_dir(config.user_id) / "MEMORY.md").symlink_to(secret)
    html = _page(staff_client, config)
    assert "Refused: MEMORY.md or a directory above it is a symlink" in html
    assert "TOP-SECRET-TARGET" not in html
    assert str(tmp_path) not in html


def test_symlinked_agents_directory_is_refused(staff_client, tmp_path):
    config = UserConfigFactory()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "MEMORY.md").write_text("FROM-ELSEWHERE")
    user_dir = Path(settings.WORKSPACE_ROOT) / str(config.user_id)
    user_dir.mkdir(parents=True)
    (user_dir / "agents").symlink_to(elsewhere, target_is_directory=True)
    html = _page(staff_client, config)
    assert "Refused" in html
    assert "FROM-ELSEWHERE" not in html


def test_fifo_in_place_of_memory_is_refused_without_hanging(staff_client):
    config = UserConfigFactory()
    _agents_dir(config.user_id).mkdir(parents=True)
    os.mkfifo(_agents_dir(config.user_id) / "MEMORY.md")
    assert "Refused" in _page(staff_client, config)


def test_missing_memory_is_reported_and_nothing_is_created(staff_client):
    config = UserConfigFactory()
    html = _page(staff_client, config)
    assert "MEMORY.md is missing, empty or blank: the agent gets no memory block." in html
    assert not (Path(settings.WORKSPACE_ROOT) / str(config.user_id)).exists()


def test_a_blank_memory_file_previews_as_the_agent_sees_it_no_block(staff_client):
    config = UserConfigFactory()
    _write_memory(config.user_id, b" \n\t\n")
    html = _page(staff_client, config)
    assert "MEMORY.md is missing, empty or blank: the agent gets no memory block." in html


def test_a_non_utf8_memory_file_previews_as_no_block_without_replacement_characters(
    staff_client,
):
    config = UserConfigFactory()
    _write_memory(config.user_id, b"I drink \xff oolong\n")
    html = _page(staff_client, config)
    assert "MEMORY.md is not valid UTF-8: the agent gets no memory block" in html
    assert "oolong" not in html and "\ufffd" not in html


def test_preview_never_writes_the_file(staff_client):
    config = UserConfigFactory()
    path = _write_memory(config.user_id, b"- keep me\n")
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    before = (path.read_bytes(), path.stat().st_mtime_ns, sorted(os.listdir(path.parent)))
    _page(staff_client, config)
    assert (path.read_bytes(), path.stat().st_mtime_ns, sorted(os.listdir(path.parent))) == before


EMPTY = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def _chain(user, run, count, *, break_at=None):
    """`count` chained events of `user` (each starting from the last one's file), optionally
    with one whose before hash does not follow."""
    events, before = [], EMPTY
    for n in range(count):
        after = f"{n + 1:064x}"
        start = "f" * 64 if n == break_at else before
        events.append(
            MemoryEventFactory(user=user, run=run, before_sha256=start, after_sha256=after)
        )
        before = after
    return events


def _ledger(html: str) -> str:
    return html.split('class="yuxi-ledger"', 1)[1]


def test_ledger_lists_events_newest_first_linked_to_run_thread_and_tool_call(staff_client):
    config = UserConfigFactory()
    run = AgentRunFactory(conversation__user=config.user)
    call = ToolCallFactory(message__conversation=run.conversation)
    (event,) = _chain(config.user, run, 1)
    staff = MemoryEventFactory(
        user=config.user,
        kind=MemoryEvent.Kind.USER_EDITED,
        actor=config.user,
        run=None,
        before_sha256=event.after_sha256,
    )
    ledger = _ledger(_page(staff_client, config))
    assert ledger.index(f">#{staff.pk}<") < ledger.index(f">#{event.pk}<")
    assert reverse("admin:conversations_agentrun_change", args=[run.pk]) in ledger
    assert reverse("admin:conversations_conversation_change", args=[run.conversation_id]) in ledger
    assert reverse("admin:conversations_toolcall_change", args=[call.pk]) in ledger
    assert reverse("admin:memory_app_memoryevent_change", args=[event.pk]) in ledger
    assert "the agent" in ledger and config.user.username in ledger
    assert "The chain is unbroken" in ledger


@pytest.mark.django_db(transaction=True)
def test_ledger_links_the_remember_memory_call_of_a_real_chat_turn(staff_client):
    """The Chat service stores a turn's tool calls as the run finishes (after `finished_at`):
    the ledger still finds the call through the run its message is marked with."""
    user = memory_user()
    turn = chat(user_id=user.pk, message="remember that I drink oolong tea")
    assert turn.tool_calls == [{"name": "remember_memory", "status": "success"}]
    call = ToolCall.objects.get(name="remember_memory")
    ledger = _ledger(_page(staff_client, user.memory_config))
    assert reverse("admin:conversations_toolcall_change", args=[call.pk]) in ledger


def test_ledger_points_out_a_break_in_the_chain(staff_client):
    config = UserConfigFactory()
    run = AgentRunFactory(conversation__user=config.user)
    events = _chain(config.user, run, 4, break_at=2)
    ledger = _ledger(_page(staff_client, config))
    assert "The ledger's chain breaks 1 time below" in ledger
    assert ledger.count('class="yuxi-break-row"') == 1
    row = ledger.split('class="yuxi-break-row"', 1)[1].split("</tr>", 1)[0]
    assert f">#{events[2].pk}<" in row


def test_ledger_is_bounded_and_links_to_the_rest(staff_client):
    config = UserConfigFactory()
    run = AgentRunFactory(conversation__user=config.user)
    events = _chain(config.user, run, LEDGER_EVENTS_SHOWN + 5)
    ledger = _ledger(_page(staff_client, config))
    assert f"The latest {LEDGER_EVENTS_SHOWN} events, newest first" in ledger
    assert f">#{events[-1].pk}<" in ledger
    assert f">#{events[4].pk}<" not in ledger
    assert f"{reverse('admin:memory_app_memoryevent_changelist')}?user={config.user_id}" in ledger
    assert "chain breaks" not in ledger  # the oldest shown is judged against the one before it


def test_run_page_lists_the_memory_events_it_made(staff_client):
    run = AgentRunFactory()
    (event,) = _chain(run.user, run, 1)
    html = staff_client.get(reverse("admin:conversations_agentrun_change", args=[run.pk]))
    assert reverse("admin:memory_app_memoryevent_change", args=[event.pk]) in html.content.decode()


def test_user_page_links_to_the_apps_user_page_threads_runs_and_ledger(staff_client):
    config = UserConfigFactory()
    html = staff_client.get(reverse("admin:auth_user_change", args=[config.user_id]))
    html = html.content.decode()
    assert reverse("admin:yuxi_user", args=[config.user_id]) in html
    for model in ("conversations_conversation", "conversations_agentrun", "memory_app_memoryevent"):
        assert f"{reverse(f'admin:{model}_changelist')}?user={config.user_id}" in html


def test_config_page_is_titled_by_username(staff_client):
    config = UserConfigFactory(user__username="zhang-wei")
    html = _page(staff_client, config)
    assert "<h2>zhang-wei (memory on)</h2>" in html


# -- kept versions ---------------------------------------------------------------------------


def _versions_panel(html: str) -> str:
    return html.split('class="yuxi-memory-versions"', 1)[1]


def _user_write(user, text: str) -> None:
    current = read_memory_file(user=user).etag
    write_memory_file(user=user, text=text, if_match=current, actor=user)


def test_versions_are_shown_beside_the_ledger_which_links_each_change_to_what_it_replaced(
    staff_client,
):
    config = UserConfigFactory()
    user = config.user
    old = f"- 对花生过敏 🥜\n- {MARKER}\n"
    _user_write(user, old)
    _user_write(user, "- newer\n")
    clear_memory(user=user, actor=user)
    html = _page(staff_client, config)
    panel = _versions_panel(html)
    assert "2 earlier versions, newest replacement first; 2 still kept" in panel
    assert "对花生过敏 🥜" in panel and "&lt;script&gt;" in panel and "<script>alert" not in html
    anchor = f"memory-version-{hashlib.sha256(old.encode()).hexdigest()}"
    assert f'id="{anchor}"' in panel
    ledger = _ledger(html).split('class="yuxi-memory-versions"', 1)[0]
    # Newest first: the clear and the second edit link to what they replaced; the first edit
    # replaced the empty file.
    assert ledger.count(">kept</a>") == 2 and f'href="#{anchor}"' in ledger
    assert "empty file" in ledger


def test_forgotten_versions_are_no_longer_listed_nor_linked(staff_client):
    config = UserConfigFactory()
    _user_write(config.user, "- old\n")
    _user_write(config.user, "- new\n")
    forget_memory_versions(user=config.user, actor=config.user)
    html = _page(staff_client, config)
    assert "or the user forgot the versions since" in _versions_panel(html)
    assert "- old" not in _versions_panel(html)
    assert ">kept</a>" not in html and "not kept" in _ledger(html)


def test_a_128_kib_version_is_shown_as_a_bounded_excerpt(staff_client):
    config = UserConfigFactory()
    big = "记" * (MEMORY_FILE_MAX_BYTES // 3)
    _user_write(config.user, big)
    clear_memory(user=config.user, actor=config.user)
    response = staff_client.get(reverse("admin:memory_app_userconfig_change", args=[config.pk]))
    panel = _versions_panel(response.content.decode())
    assert panel.count("记") == FIELD_EXCERPT_BYTES // 3
    assert f"first {FIELD_EXCERPT_BYTES // 3 * 3:,} of {len(big.encode()):,} bytes shown" in panel


def test_a_symlinked_versions_directory_is_reported_and_its_target_never_listed(
    staff_client, tmp_path
):
    config = UserConfigFactory()
    _user_write(config.user, "- a\n")
    _user_write(config.user, "- b\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / ("0" * 64)).write_text("not yours")
    versions = _agents_dir(config.user_id) / ".memory-versions"
    for path in versions.iterdir():
        path.unlink()
    versions.rmdir()
    versions.symlink_to(outside, target_is_directory=True)
    html = _page(staff_client, config)
    assert "Refused: the versions directory or a directory above it is a symlink" in html
    assert "not yours" not in html


@pytest.mark.django_db(transaction=True)
def test_config_page_lists_pending_approvals_with_their_run_escaped(staff_client):
    config = UserConfigFactory(enable_memory=True, memory_write_approval=True)
    turn = chat(user_id=config.user_id, message=f"remember that {MARKER}")
    assert turn.status == "interrupted"
    html = _page(staff_client, config)
    assert "1 pending approval, newest first." in html
    run = AgentRun.objects.get(run_id=turn.run_id)
    assert reverse("admin:conversations_agentrun_change", args=[run.pk]) in html
    assert "&lt;script&gt;alert(&#x27;memory&#x27;)&lt;/script&gt;" in html
    assert "<script>alert" not in html
    # Decided: no longer pending, and the page says so.
    decided = chat(user_id=config.user_id, thread_id=turn.thread_id, resume={"decision": "reject"})
    assert "No memory write is waiting for this user's decision." in _page(staff_client, config)
    # The interrupted run's page links the run that decided it, and back.
    run_page = staff_client.get(reverse("admin:conversations_agentrun_change", args=[run.pk]))
    resume = AgentRun.objects.get(run_id=decided.run_id)
    assert "decided by" in run_page.content.decode()
    assert reverse("admin:conversations_agentrun_change", args=[resume.pk]) in (
        run_page.content.decode()
    )


# --- where each line came from ------------------------------------------------------------------


def _line_origins(html: str) -> str:
    return html.split('class="yuxi-line-origins"', 1)[1].split('class="yuxi-memory-versions"')[0]


def test_each_line_shows_the_change_that_brought_it_linked_to_its_run_and_thread(staff_client):
    config = UserConfigFactory()
    user = config.user
    _write_memory(user.pk, f"from before {MARKER}\n".encode())
    run = RunningAgentRunFactory(conversation__user=user)
    remember_memory(context_for(run), "drinks oolong tea")
    _user_write(user, read_memory_file(user=user).text + "- has a cat\n")
    panel = _line_origins(_page(staff_client, config))
    assert "All 3 lines; 1 earlier than the recorded history." in panel
    rows = panel.split("<tr>")[2:]
    assert "from before &lt;script&gt;" in rows[0]
    assert "<em>earlier</em>: before the recorded" in rows[0]
    assert "<script>alert" not in panel
    assert "drinks oolong tea" in rows[1] and "the agent" in rows[1]
    assert reverse("admin:conversations_agentrun_change", args=[run.pk]) in rows[1]
    assert run.conversation.thread_id in rows[1]
    assert "- has a cat" in rows[2] and "the user" in rows[2] and "—" in rows[2]


def test_line_origins_are_bounded_and_say_so(staff_client):
    config = UserConfigFactory()
    long_line = "记" * LINE_TEXT_SHOWN_BYTES
    _user_write(config.user, long_line + "\n" + "fact\n" * (LINE_ORIGINS_SHOWN + 10))
    panel = _line_origins(_page(staff_client, config))
    assert f"The first {LINE_ORIGINS_SHOWN} of {LINE_ORIGINS_SHOWN + 11} lines" in panel
    assert panel.count("<tr>") == LINE_ORIGINS_SHOWN + 1
    assert "记" * (LINE_TEXT_SHOWN_BYTES // 3) + "</code> <em>(cut)</em>" in panel


@pytest.mark.parametrize(
    ("data", "said"),
    [(None, "missing or empty"), (b"caf\xe9\n", "not valid UTF-8"), (b"x\n" * 70000, "over 128")],
)
def test_a_file_without_lines_says_why(staff_client, data, said):
    config = UserConfigFactory()
    if data is not None:
        _write_memory(config.user_id, data)
    assert said in _line_origins(_page(staff_client, config))


def test_a_symlinked_versions_directory_is_reported_not_traced(staff_client, tmp_path):
    config = UserConfigFactory()
    _user_write(config.user, "one\n")
    _user_write(config.user, "one\ntwo\n")
    versions = _agents_dir(config.user_id) / ".memory-versions"
    for name in os.listdir(versions):
        (versions / name).unlink()
    versions.rmdir()
    (tmp_path / "elsewhere").mkdir()
    versions.symlink_to(tmp_path / "elsewhere")
    assert "Refused: MEMORY.md, the versions directory" in _line_origins(
        _page(staff_client, config)
    )


# -- admin copy: words a person reads -----------------------------------------------------------


def test_the_admin_is_headed_yuxi_memory(staff_client):
    html = staff_client.get(reverse("admin:index")).content.decode()
    assert "Yuxi Memory" in html and "Django administration" not in html


def test_the_config_page_shows_each_switch_once_in_words(staff_client):
    config = UserConfigFactory(enable_memory=True, memory_write_approval=False)
    html = _page(staff_client, config)
    assert html.count("Memory switch:") == 1 and "Enable memory:" not in html
    assert "on: the agent&#x27;s next run reads the memory" in html
    assert "off: the agent writes memory directly" in html
    assert "Memory write approval:" not in html


def test_kept_versions_say_in_words_what_made_and_what_replaced_them(staff_client):
    config = UserConfigFactory()
    _write_memory(config.user_id, b"- seeded\n")
    _user_write(config.user, "- edited\n")
    clear_memory(user=config.user, actor=config.user)
    panel = _versions_panel(_page(staff_client, config))
    assert "<th>made by</th>" in panel and "<th>replaced by</th>" in panel
    assert "User Edited" in panel and "User Cleared" in panel
    assert "Initial (no recorded change wrote it)" in panel
    assert "user_edited" not in panel and "user_cleared" not in panel


def test_the_ledger_can_hide_switch_and_approval_toggles(staff_client):
    config = UserConfigFactory()
    MemoryEventFactory(user=config.user, kind="switch_on")
    MemoryEventFactory(user=config.user, kind="approval_on")
    _user_write(config.user, "- fact\n")
    ledger = _ledger(_page(staff_client, config))
    assert 'id="yuxi-hide-toggles"' in ledger and "Hide the 2 switch and approval toggles" in ledger
    assert ledger.count("yuxi-toggle-row") == 2
    listed = staff_client.get(
        reverse("admin:memory_app_memoryevent_changelist"),
        {"user": config.user_id, "change": "file"},
    ).content.decode()
    rows = listed.split('id="result_list"', 1)[1].split("</table>", 1)[0]
    assert "User Edited" in rows and "Switch On" not in rows and "Approval On" not in rows


def _approval_turn(user, decision: dict):
    asked = chat(user_id=user.pk, message="remember that my PIN is in the drawer")
    decided = chat(user_id=user.pk, thread_id=asked.thread_id, resume=decision)
    return AgentRun.objects.get(run_id=asked.run_id), AgentRun.objects.get(run_id=decided.run_id)


@pytest.mark.django_db(transaction=True)
def test_a_declined_runs_page_shows_the_outcome_and_the_proposed_text(staff_client):
    user = UserConfigFactory(enable_memory=True, memory_write_approval=True).user
    interrupted, deciding = _approval_turn(user, {"decision": "reject"})
    for run in (interrupted, deciding):
        html = staff_client.get(
            reverse("admin:conversations_agentrun_change", args=[run.pk])
        ).content.decode()
        assert "declined: nothing written" in html, run.run_type
        assert "proposed text: <q>my PIN is in the drawer</q>" in html, run.run_type


@pytest.mark.django_db(transaction=True)
def test_an_approved_runs_page_shows_what_was_written(staff_client):
    user = UserConfigFactory(enable_memory=True, memory_write_approval=True).user
    _, deciding = _approval_turn(user, {"decision": "approve"})
    html = staff_client.get(
        reverse("admin:conversations_agentrun_change", args=[deciding.pk])
    ).content.decode()
    assert "approved: written (added)" in html
    assert "text written: <q>my PIN is in the drawer</q>" in html


def test_preview_lists_the_credentials_of_the_file_by_line_and_kind_not_their_text(staff_client):
    config = UserConfigFactory(enable_memory=True)
    _write_memory(config.user_id, b"- tea\n- my PIN: 4821\n")
    html = _page(staff_client, config)
    warning = html.split('yuxi-memory-credentials">', 1)[1].split("</div>", 1)[0]
    assert "line 2: looks like a password or PIN" in warning
    assert "4821" not in warning  # the warning names the line and kind, never the text
    assert "4821" in html  # the file's own text (preview, line origins) is still shown


def test_preview_of_a_file_without_credentials_has_no_warning(staff_client):
    config = UserConfigFactory(enable_memory=True)
    _write_memory(config.user_id, b"- order 2024112588231\n")
    assert "yuxi-memory-credentials" not in _page(staff_client, config)
