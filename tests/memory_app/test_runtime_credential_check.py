"""A credential the user stated is never stored, however the model words it: the check of a
`remember_memory` call against the user's messages, alone and through chat turns with the
scripted model (approval off: the call is `rejected` and nothing is kept; approval on: it is
never put to the user)."""

import json

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.messages.tool import tool_call

from conversations import checkpoints
from conversations.models import ToolCall
from memory_app.credentials import CredentialKind, find_credentials
from memory_app.models import MemoryEvent
from memory_app.runtime import chat
from memory_app.runtime.credential_check import TURN_HOLDS_CREDENTIAL, stated_credential
from tests.factories import UserConfigFactory
from tests.memory_app.models import RecordingModel, tool_reply

PIN_MESSAGE = "Please store my bank PIN, 4821, so you can remind me later."
CARD_PASSWORD_MESSAGE = "记住我的银行卡密码是 739164"
# What the model proposed for each, or might have: no credential word left.
PIN_PARAPHRASE = "function 4821, no return type specified"
CARD_PASSWORD_PARAPHRASE = "用户的幸运数字是 739164"
SMOLLM2_CARD_PASSWORD_PROPOSAL = "The user has forgotten the password for a 739164 bank account."
REFUSAL = "memory never stores credentials: this looks like a password or PIN"
TURN_REFUSAL = TURN_HOLDS_CREDENTIAL.format(kind="a password or PIN")
SEEDED = b"# Memory\nPrefers oolong tea.\r\n"


def remember(content: str, call_id: str = "call_r"):
    return tool_call(id=call_id, name="remember_memory", args={"content": content})


# --- the check alone ---------------------------------------------------------------------------


def test_the_paraphrases_hold_no_credential_the_detector_sees():
    assert find_credentials(PIN_PARAPHRASE) == []
    assert find_credentials(CARD_PASSWORD_PARAPHRASE) == []


@pytest.mark.parametrize(
    ("said", "content"),
    [(PIN_MESSAGE, PIN_PARAPHRASE), (CARD_PASSWORD_MESSAGE, CARD_PASSWORD_PARAPHRASE)],
)
def test_a_write_repeating_a_value_the_user_stated_as_a_credential_is_found(said, content):
    messages = [HumanMessage(said), AIMessage("ok"), HumanMessage("now save it")]
    assert stated_credential(remember(content), messages) == (CredentialKind.PASSWORD, False)


@pytest.mark.parametrize("content", ["I like tea", "PIN is four eight two one"])
def test_no_write_runs_in_a_turn_whose_message_holds_a_credential(content):
    # The value may be kept in any wording (spelled out, split): nothing of that turn is saved.
    messages = [HumanMessage("hello"), AIMessage("hi"), HumanMessage(PIN_MESSAGE)]
    assert stated_credential(remember(content), messages) == (CredentialKind.PASSWORD, True)
    # A later turn's message without one: only a repeated value is refused.
    later = [*messages, AIMessage("I cannot store that."), HumanMessage("remember I like tea")]
    assert stated_credential(remember(content), later) is None


def test_only_the_users_own_messages_state_a_credential():
    messages = [HumanMessage("remember my lucky number"), AIMessage("Is it your PIN 4821?")]
    assert stated_credential(remember("lucky number 4821"), messages) is None


def test_any_other_call_or_content_is_not_checked():
    messages = [HumanMessage("my PIN is 4821")]
    search = tool_call(id="c", name="search_thread_messages", args={"query": "4821"})
    assert stated_credential(search, messages) is None
    no_text = tool_call(id="c", name="remember_memory", args={"content": 4821})
    assert stated_credential(no_text, messages) is None


# --- through a chat turn -----------------------------------------------------------------------


def agents_snapshot(agents_file, user) -> dict[str, bytes]:
    """Every file of the user's `agents/` folder (kept versions included) and its bytes, but
    the file fence's lock file (created empty, never removed)."""
    agents = agents_file(user.pk, "MEMORY.md").parent
    return {
        path.relative_to(agents).as_posix(): path.read_bytes()
        for path in agents.rglob("*")
        if path.is_file() and path.name != ".memory.lock"
    }


def assert_refused_and_nothing_kept(
    turn, before, agents_file, user, *, value: str, refusal: str = REFUSAL
) -> None:
    """The turn ended without a proposal, the call was `rejected` naming the kind only, and the
    folder and the ledger are as before."""
    assert turn.status == "succeeded" and turn.approval is None
    row = ToolCall.objects.get(tool_call_id="call_r")
    assert row.status == "error"
    assert json.loads(row.output) == {"status": "rejected", "message": refusal}
    assert value not in row.output and value not in (row.error or "")
    assert agents_snapshot(agents_file, user) == before
    assert not MemoryEvent.objects.filter(user=user, kind__startswith="agent_").exists()
    assert not checkpoints.checkpoint_exists(turn.run_id)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("approval", [False, True])
@pytest.mark.parametrize(
    ("message", "content", "value", "refusal"),
    [
        # This turn's own message holds the credential: no write of that turn runs.
        (PIN_MESSAGE, PIN_PARAPHRASE, "4821", TURN_REFUSAL),
        (CARD_PASSWORD_MESSAGE, CARD_PASSWORD_PARAPHRASE, "739164", TURN_REFUSAL),
        # What the model proposed for it: the detector finds a credential in the content itself.
        (CARD_PASSWORD_MESSAGE, SMOLLM2_CARD_PASSWORD_PROPOSAL, "739164", REFUSAL),
    ],
)
def test_a_paraphrased_credential_is_rejected_and_never_proposed(
    agents_file, approval, message, content, value, refusal
):
    user = UserConfigFactory(enable_memory=True, memory_write_approval=approval).user
    agents_file(user.pk, "MEMORY.md").write_bytes(SEEDED)
    before = agents_snapshot(agents_file, user)
    model = RecordingModel(
        replies=[tool_reply(("call_r", "remember_memory", {"content": content}))]
    )
    turn = chat(user_id=user.pk, message=message, model=model)
    assert turn.tool_calls == [{"name": "remember_memory", "status": "error"}]
    assert_refused_and_nothing_kept(turn, before, agents_file, user, value=value, refusal=refusal)
    # The model was told, and replied.
    assert len(model.calls) == 2


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("approval", [False, True])
def test_a_credential_stated_earlier_in_the_thread_counts(agents_file, approval):
    user = UserConfigFactory(enable_memory=True, memory_write_approval=approval).user
    first = chat(user_id=user.pk, message="My debit card PIN is 4821, don't tell anyone.")
    assert first.status == "succeeded"
    before = agents_snapshot(agents_file, user)
    model = RecordingModel(
        replies=[tool_reply(("call_r", "remember_memory", {"content": "Lucky number: 4821"}))]
    )
    turn = chat(
        user_id=user.pk,
        thread_id=first.thread_id,
        message="remember my lucky number, the one I just told you",
        model=model,
    )
    # The earlier message is part of what the model was shown, and of the check.
    assert any("4821" in m.text for m in model.calls[0]["messages"][:-1])
    assert_refused_and_nothing_kept(turn, before, agents_file, user, value="4821")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("approval", [False, True])
@pytest.mark.parametrize(
    ("message", "content"),
    [
        # The write's content repeats the value.
        ("remember my lucky number", "Lucky number: 4821"),
        # The turn's message does, and the model left it out of what it proposed.
        ("remember that my lucky number is 4821", "The user has a lucky number."),
    ],
)
def test_a_credential_stated_in_another_thread_is_refused_and_never_proposed(
    agents_file, approval, message, content
):
    user = UserConfigFactory(enable_memory=True, memory_write_approval=approval).user
    elsewhere = chat(user_id=user.pk, message="My debit card PIN is 4821, don't tell anyone.")
    assert elsewhere.status == "succeeded"
    before = agents_snapshot(agents_file, user)
    model = RecordingModel(
        replies=[tool_reply(("call_r", "remember_memory", {"content": content}))]
    )
    turn = chat(user_id=user.pk, message=message, model=model)
    assert turn.thread_id != elsewhere.thread_id
    # The model never saw the other thread: only the write's check against the user's own
    # recent messages finds the value.
    assert not any("4821" in m.text for m in model.calls[0]["messages"][:-1])
    assert_refused_and_nothing_kept(turn, before, agents_file, user, value="4821")
    assert not checkpoints.checkpoint_exists(turn.run_id)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("approval", [False, True])
def test_nothing_asked_in_the_same_message_as_a_credential_is_saved(agents_file, approval):
    user = UserConfigFactory(enable_memory=True, memory_write_approval=approval).user
    agents_file(user.pk, "MEMORY.md").write_bytes(SEEDED)
    before = agents_snapshot(agents_file, user)
    model = RecordingModel(
        replies=[tool_reply(("call_r", "remember_memory", {"content": "Gym locker 7350"}))]
    )
    turn = chat(
        user_id=user.pk,
        message="My PIN is 4821, but remember only that my gym locker is 7350.",
        model=model,
    )
    assert_refused_and_nothing_kept(
        turn, before, agents_file, user, value="4821", refusal=TURN_REFUSAL
    )


@pytest.mark.django_db(transaction=True)
def test_a_number_the_user_did_not_state_as_a_credential_is_written_in_a_later_turn(agents_file):
    user = UserConfigFactory(enable_memory=True).user
    first = chat(user_id=user.pk, message="My PIN is 4821, keep it to yourself.")
    model = RecordingModel(
        replies=[tool_reply(("call_r", "remember_memory", {"content": "Gym locker 7350"}))]
    )
    turn = chat(
        user_id=user.pk,
        thread_id=first.thread_id,
        message="Remember that my gym locker is 7350.",
        model=model,
    )
    assert turn.tool_calls == [{"name": "remember_memory", "status": "success"}]
    assert agents_file(user.pk, "MEMORY.md").read_bytes() == b"Gym locker 7350\n"
    assert MemoryEvent.objects.get(user=user).kind == "agent_added"
