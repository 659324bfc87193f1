"""Where each line of MEMORY.md came from: derived from real kept versions (real files under a
private workspace root) and the real ledger in PostgreSQL, after real writes of every kind."""

import pytest

from conversations.models import AgentRun
from memory_app.errors import MemoryLineNotFound
from memory_app.line_origins import ORIGIN_EVENTS_PAGE, LineOrigin
from memory_app.models import MemoryEvent
from memory_app.runtime import chat
from memory_app.selectors import memory_line_origins, memory_lines
from memory_app.services import (
    MemoryConflict,
    MemoryInputError,
    clear_memory,
    delete_memory_line,
    forget_memory_versions,
    restore_memory_version,
    write_memory_file,
)
from memory_app.versions import MEMORY_VERSIONS_DIR
from tests.factories import (
    StaffUserFactory,
    UserConfigFactory,
    memory_user,
)
from tests.memory_app.helpers import remember, sha

EARLIER = {"kind": "earlier"}


def _etag(user) -> str:
    return memory_lines(user=user).memory.etag


def _edit(user, text: str, actor=None) -> None:
    write_memory_file(user=user, text=text, if_match=_etag(user), actor=actor or user)


def _by_agent(run: AgentRun) -> dict:
    event = MemoryEvent.objects.filter(run=run).latest("id")
    return {
        "kind": event.kind,
        "at": event.created_at,
        "by": "agent",
        "run_id": str(run.run_id),
        "thread_id": run.conversation.thread_id,
    }


def _latest(user, kind: str, by: str) -> dict:
    event = MemoryEvent.objects.filter(user=user, kind=kind).latest("id")
    return {"kind": kind, "at": event.created_at, "by": by, "run_id": None, "thread_id": None}


def _origins(user) -> list[tuple[str, dict]]:
    lines = memory_line_origins(user=user)
    assert [line.number for line in lines] == list(range(1, len(lines) + 1))
    return [(line.text, line.origin) for line in lines]


def _memory_path(settings, user):
    return settings.WORKSPACE_ROOT / str(user.pk) / "agents" / "MEMORY.md"


def _currentsha(settings, user) -> str:
    return sha(_memory_path(settings, user).read_bytes())


def _versions_path(settings, user):
    return settings.WORKSPACE_ROOT / str(user.pk) / MEMORY_VERSIONS_DIR


@pytest.mark.django_db
class TestAttributed:
    def test_agent_writes_come_from_their_run_and_thread_the_first_from_the_empty_file(self):
        user = memory_user()
        tea = remember(user, "drinks oolong tea")
        lisbon = remember(user, "lives in Lisbon")
        assert _origins(user) == [
            ("drinks oolong tea", _by_agent(tea)),
            ("lives in Lisbon", _by_agent(lisbon)),
        ]

    def test_a_users_edit_is_by_you_a_staff_edit_by_staff_the_rest_keeps_its_origin(self):
        user = memory_user()
        tea = remember(user, "drinks oolong tea")
        _edit(user, "drinks oolong tea\nhas a cat\n")
        mine = _latest(user, "user_edited", "you")
        _edit(user, "drinks oolong tea\nhas a cat\nreviewed by support\n", StaffUserFactory())
        assert _origins(user) == [
            ("drinks oolong tea", _by_agent(tea)),
            ("has a cat", mine),
            ("reviewed by support", _latest(user, "user_edited", "staff")),
        ]

    def test_a_replace_brings_only_its_new_line_and_a_line_it_moved_keeps_its_origin(self):
        user = memory_user()
        first = remember(user, "drinks oolong tea")
        remember(user, "lives in Lisbon")
        replace = remember(
            user, "lives in Porto\ndrinks oolong tea", "drinks oolong tea\nlives in Lisbon"
        )
        assert _origins(user) == [
            ("lives in Porto", _by_agent(replace)),
            ("drinks oolong tea", _by_agent(first)),
        ]
        assert MemoryEvent.objects.filter(run=replace).get().kind == "agent_replaced"

    def test_restored_lines_come_from_the_restore_by_you(self, settings):
        user = memory_user()
        remember(user, "drinks oolong tea")
        before_clear = _currentsha(settings, user)
        clear_memory(user=user, actor=user)
        remember(user, "lives in Lisbon")
        restore_memory_version(user=user, sha256=before_clear, if_match=_etag(user), actor=user)
        assert _origins(user) == [("drinks oolong tea", _latest(user, "user_restored", "you"))]

    def test_a_line_moved_and_re_typed_as_a_crlf_bullet_keeps_its_origin(self):
        user = memory_user()
        tea = remember(user, "drinks oolong tea")
        cat = remember(user, "has a cat")
        _edit(user, "- has a cat  \r\n* drinks oolong tea\r\n- walks daily\r\n")
        assert _origins(user) == [
            ("- has a cat  ", _by_agent(cat)),
            ("* drinks oolong tea", _by_agent(tea)),
            ("- walks daily", _latest(user, "user_edited", "you")),
        ]

    def test_each_copy_of_a_duplicate_line_comes_from_the_change_that_made_it_that_copy(self):
        user = memory_user()
        tea = remember(user, "drinks oolong tea")
        _edit(user, "drinks oolong tea\nhas a cat\n- drinks oolong tea\n")
        copy = _latest(user, "user_edited", "you")
        # Deleting the first copy leaves one: the older origin is the first copy's.
        assert _origins(user) == [
            ("drinks oolong tea", _by_agent(tea)),
            ("has a cat", copy),
            ("- drinks oolong tea", copy),
        ]
        delete_memory_line(user=user, number=1, if_match=_etag(user), actor=user)
        assert _origins(user) == [("has a cat", copy), ("- drinks oolong tea", _by_agent(tea))]

    def test_identical_copies_are_counted_the_newest_copy_from_the_change_that_added_it(
        self, agents_file
    ):
        user = memory_user()
        agents_file(user.pk, "MEMORY.md").write_bytes(b"tea\ntea\n")
        _edit(user, "tea\ntea\ncat\ntea\n")
        third = _latest(user, "user_edited", "you")
        cat = remember(user, "has a dog")
        assert _origins(user) == [
            ("tea", EARLIER),
            ("tea", EARLIER),
            ("cat", third),
            ("tea", third),
            ("has a dog", _by_agent(cat)),
        ]

    def test_blank_lines_are_lines_numbered_with_the_file(self):
        user = memory_user()
        _edit(user, "a\n\nb\n")
        assert [(line.number, line.text) for line in memory_line_origins(user=user)] == [
            (1, "a"),
            (2, ""),
            (3, "b"),
        ]


@pytest.mark.django_db
class TestEarlier:
    def test_a_line_present_before_the_oldest_change_is_earlier(self, settings, agents_file):
        user = memory_user()
        agents_file(user.pk, "MEMORY.md").write_bytes(b"written before the ledger\n")
        tea = remember(user, "drinks oolong tea")
        assert _origins(user) == [
            ("written before the ledger", EARLIER),
            ("drinks oolong tea", _by_agent(tea)),
        ]

    def test_a_line_older_than_every_kept_version_is_earlier(self, settings):
        settings.MEMORY_VERSIONS_KEPT = 2
        user = memory_user()
        remember(user, "one")
        remember(user, "two")
        three = remember(user, "three")
        four = remember(user, "four")
        # "one\n" and "one\ntwo\n" were pruned: the walk ends at "one\ntwo\n".
        assert len(list(_versions_path(settings, user).iterdir())) == 2
        assert _origins(user) == [
            ("one", EARLIER),
            ("two", EARLIER),
            ("three", _by_agent(three)),
            ("four", _by_agent(four)),
        ]

    def test_forgetting_the_versions_makes_every_line_earlier_a_later_write_is_attributed(self):
        user = memory_user()
        remember(user, "drinks oolong tea")  # from the empty file, which is always known
        forget_memory_versions(user=user, actor=user)
        assert _origins(user) == [("drinks oolong tea", EARLIER)]
        cat = remember(user, "has a cat")
        assert _origins(user) == [("drinks oolong tea", EARLIER), ("has a cat", _by_agent(cat))]

    @pytest.mark.parametrize("damage", ["missing", "altered"])
    def test_a_version_missing_or_altered_breaks_the_chain_older_lines_are_earlier(
        self, settings, damage
    ):
        user = memory_user()
        remember(user, "drinks oolong tea")
        oldest = _currentsha(settings, user)
        remember(user, "has a cat")  # its file before is the one damaged: unknown
        dog = remember(user, "has a dog")
        version = _versions_path(settings, user) / oldest
        if damage == "missing":
            version.unlink()
        else:
            version.write_bytes(b"something else\n")
        assert _origins(user) == [
            ("drinks oolong tea", EARLIER),
            ("has a cat", EARLIER),
            ("has a dog", _by_agent(dog)),
        ]

    def test_a_change_nobody_recorded_is_crossed_where_both_its_files_are_kept(self, settings):
        user = memory_user()
        tea = remember(user, "drinks oolong tea")
        tea_only = _currentsha(settings, user)
        _edit(user, "drinks oolong tea\nhas a cat\n")
        restore_memory_version(user=user, sha256=tea_only, if_match=_etag(user), actor=user)
        # Edited outside the app: no ledger event, so the chain breaks here.
        _memory_path(settings, user).write_bytes(b"drinks oolong tea\nedited by hand\n")
        _edit(user, "drinks oolong tea\nedited by hand\nmine\n")
        assert _origins(user) == [
            ("drinks oolong tea", _by_agent(tea)),
            ("edited by hand", EARLIER),
            ("mine", _latest(user, "user_edited", "you")),
        ]

    def test_a_change_nobody_recorded_over_an_unkept_file_ends_the_walk(self, settings):
        user = memory_user()
        remember(user, "drinks oolong tea")
        _memory_path(settings, user).write_bytes(b"drinks oolong tea\nedited by hand\n")
        assert _origins(user) == [("drinks oolong tea", EARLIER), ("edited by hand", EARLIER)]

    def test_a_file_that_was_not_utf8_is_never_kept_so_what_replaced_it_is_earlier(
        self, settings, agents_file
    ):
        user = memory_user()
        agents_file(user.pk, "MEMORY.md").write_bytes(b"caf\xe9\n")
        assert memory_line_origins(user=user) == []
        assert memory_lines(user=user).memory.problem == "invalid_encoding"
        _edit(user, "café\n")
        cat = remember(user, "has a cat")
        assert _origins(user) == [("café", EARLIER), ("has a cat", _by_agent(cat))]

    def test_a_file_too_large_to_be_text_has_no_lines(self, agents_file):
        user = memory_user()
        agents_file(user.pk, "MEMORY.md").write_bytes(b"x\n" * 70000)
        lines = memory_lines(user=user)
        assert (lines.lines, lines.memory.problem) == ([], "too_large")

    def test_no_file_has_no_lines(self):
        assert memory_line_origins(user=memory_user()) == []


@pytest.mark.django_db
def test_another_users_versions_and_ledger_are_never_walked(settings):
    owner, other = memory_user(), memory_user()
    remember(other, "drinks oolong tea")
    _memory_path(settings, owner).parent.mkdir(parents=True, exist_ok=True)
    _memory_path(settings, owner).write_bytes(b"drinks oolong tea\n")
    assert _origins(owner) == [("drinks oolong tea", EARLIER)]


@pytest.mark.django_db
def test_the_walk_costs_one_query_and_reads_each_kept_version_once(
    settings, django_assert_num_queries, opened_files
):
    user = memory_user()
    tea = remember(user, "drinks oolong tea")
    tea_only = _currentsha(settings, user)
    _edit(user, "drinks oolong tea\nhas a cat\n")
    with_cat = _currentsha(settings, user)
    for _ in range(3):  # back and forth: the same two files again and again
        restore_memory_version(user=user, sha256=tea_only, if_match=_etag(user), actor=user)
        restore_memory_version(user=user, sha256=with_cat, if_match=_etag(user), actor=user)
    opened_files.clear()
    with django_assert_num_queries(1):
        lines = memory_line_origins(user=user)
    assert [(line.text, line.origin) for line in lines] == [
        ("drinks oolong tea", _by_agent(tea)),
        ("has a cat", _latest(user, "user_restored", "you")),
    ]
    assert isinstance(lines[0], LineOrigin)
    assert (opened_files.count(tea_only), opened_files.count(with_cat)) == (1, 0)


@pytest.mark.django_db
def test_a_walk_longer_than_a_page_reads_the_next_page(settings):
    settings.MEMORY_VERSIONS_KEPT = 3
    user = memory_user()
    tea = remember(user, "drinks oolong tea")
    first = _currentsha(settings, user)
    _edit(user, "drinks oolong tea\nhas a cat\n")
    second = _currentsha(settings, user)
    for _ in range(ORIGIN_EVENTS_PAGE // 2 + 1):
        restore_memory_version(user=user, sha256=first, if_match=_etag(user), actor=user)
        restore_memory_version(user=user, sha256=second, if_match=_etag(user), actor=user)
    assert MemoryEvent.objects.filter(user=user).count() > ORIGIN_EVENTS_PAGE
    assert _origins(user) == [
        ("drinks oolong tea", _by_agent(tea)),
        ("has a cat", _latest(user, "user_restored", "you")),
    ]


# --- decided writes (approval on): the real resume run ----------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("decision", "line"),
    [
        ({"decision": "approve"}, "I drink oolong tea"),
        ({"decision": "edit", "content": "I drink green tea"}, "I drink green tea"),
    ],
)
def test_a_decided_write_is_by_the_agent_in_its_thread_with_the_resume_run(decision, line):
    user = UserConfigFactory(enable_memory=True, memory_write_approval=True).user
    turn = chat(user_id=user.pk, message="remember that I drink oolong tea")
    assert turn.status == "interrupted"
    resumed = chat(user_id=user.pk, thread_id=turn.thread_id, resume=decision)
    event = MemoryEvent.objects.get(user=user, kind="agent_added")
    assert event.actor_id == user.pk  # the user decided; the agent wrote
    assert _origins(user) == [
        (
            line,
            {
                "kind": "agent_added",
                "at": event.created_at,
                "by": "agent",
                "run_id": resumed.run_id,
                "thread_id": turn.thread_id,
            },
        )
    ]


# --- removing one line ------------------------------------------------------------------------


@pytest.mark.django_db
class TestDeleteMemoryLine:
    def test_it_removes_that_line_as_a_user_edit_keeping_the_file_it_replaced(self, settings):
        user = memory_user()
        _edit(user, "one\r\ntwo\r\nthree")
        before = _memory_path(settings, user).read_bytes()
        memory = delete_memory_line(user=user, number=2, if_match=_etag(user), actor=user)
        assert _memory_path(settings, user).read_bytes() == b"one\r\nthree"
        assert (memory.text, memory.etag) == ("one\r\nthree", "sha256:" + sha(b"one\r\nthree"))
        event = MemoryEvent.objects.filter(user=user).latest("id")
        assert (event.kind, event.actor_id, event.before_sha256) == (
            "user_edited",
            user.pk,
            sha(before),
        )
        assert (_versions_path(settings, user) / sha(before)).read_bytes() == before
        delete_memory_line(user=user, number=2, if_match=_etag(user), actor=user)
        assert _memory_path(settings, user).read_bytes() == b"one\r\n"

    def test_the_other_lines_keep_their_origins(self):
        user = memory_user()
        tea = remember(user, "drinks oolong tea")
        remember(user, "has a dog")
        lisbon = remember(user, "lives in Lisbon")
        delete_memory_line(user=user, number=2, if_match=_etag(user), actor=user)
        assert _origins(user) == [
            ("drinks oolong tea", _by_agent(tea)),
            ("lives in Lisbon", _by_agent(lisbon)),
        ]

    def test_a_stale_etag_is_a_conflict_checked_before_the_number(self, settings):
        user = memory_user()
        _edit(user, "one\n")
        stale = _etag(user)
        remember(user, "two")
        before = _memory_path(settings, user).read_bytes()
        for number in (1, 99):
            with pytest.raises(MemoryConflict) as raised:
                delete_memory_line(user=user, number=number, if_match=stale, actor=user)
            assert raised.value.reason == "stale"
        assert _memory_path(settings, user).read_bytes() == before

    @pytest.mark.parametrize("number", [0, -1, 3])
    def test_a_number_the_file_has_no_line_for_is_not_found(self, settings, number):
        user = memory_user()
        _edit(user, "one\ntwo\n")
        events = MemoryEvent.objects.count()
        with pytest.raises(MemoryLineNotFound):
            delete_memory_line(user=user, number=number, if_match=_etag(user), actor=user)
        assert _memory_path(settings, user).read_bytes() == b"one\ntwo\n"
        assert MemoryEvent.objects.count() == events

    def test_a_file_that_is_not_text_has_no_line_to_remove(self, agents_file):
        user = memory_user()
        agents_file(user.pk, "MEMORY.md").write_bytes(b"caf\xe9\n")
        with pytest.raises(MemoryLineNotFound):
            delete_memory_line(user=user, number=1, if_match=_etag(user), actor=user)

    @pytest.mark.parametrize("number", ["1", 1.0, True, None])
    def test_a_number_that_is_not_an_integer_is_an_input_error(self, number):
        user = memory_user()
        _edit(user, "one\n")
        with pytest.raises(MemoryInputError):
            delete_memory_line(user=user, number=number, if_match=_etag(user), actor=user)
