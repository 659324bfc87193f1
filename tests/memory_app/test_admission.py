"""`StreamAdmission`: streamed chats are opened at most `limit` at a time, in arrival order,
each giving its place up when its response starts (or after the hold limit), its body read
before it waits; every other request passes straight through. The wrapped application here
records what reaches it (any ASGI application will do: the wrapper's contract is about the
requests it lets through); the last tests serve the site's own application, Django and the
database behind it."""

import asyncio
import json

import pytest

from conversations.models import AgentRun
from memory_app import admission as admission_module
from memory_app.admission import STREAM_OPENINGS_AT_ONCE, StreamAdmission
from tests.factories import UserConfigFactory
from tests.wire_model import text_reply

STREAM = "/api/chat/stream/"


def request(path: str = STREAM, method: str = "POST", **scope) -> dict:
    return {"type": "http", "method": method, "path": path, "root_path": "", **scope}


def run(scenario) -> object:
    """`asyncio.run(scenario)`, failing after 10 s rather than hanging (a place never given
    up would otherwise leave a test waiting forever)."""
    return asyncio.run(asyncio.wait_for(scenario, 10))


async def receive() -> dict:
    return {"type": "http.request", "body": b"", "more_body": False}


class Recorder:
    """An ASGI application that records each request it is handed (its `tag` scope key) and
    the body it reads, then waits until the test lets it start its response, then until it
    lets it end it."""

    def __init__(self) -> None:
        self.entered: list[str] = []
        self.bodies: dict[str, bytes] = {}
        self.inside = 0
        self.most_inside = 0
        self.start: dict[str, asyncio.Event] = {}
        self.end: dict[str, asyncio.Event] = {}
        self.fail: set[str] = set()

    def events(self, tag: str) -> tuple[asyncio.Event, asyncio.Event]:
        """The events that let request `tag` start its response, and end it."""
        return (
            self.start.setdefault(tag, asyncio.Event()),
            self.end.setdefault(tag, asyncio.Event()),
        )

    def let_through(self, *tags: str) -> None:
        """Let each request of `tags` start its response and end it."""
        for tag in tags:
            for event in self.events(tag):
                event.set()

    async def __call__(self, scope, receive, send) -> None:
        tag = scope.get("tag", scope["path"])
        start, end = self.events(tag)
        self.entered.append(tag)
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.bodies[tag] = body
        self.inside += 1  # between its arrival here and the start of its response
        self.most_inside = max(self.most_inside, self.inside)
        try:
            await start.wait()
            if tag in self.fail:
                raise RuntimeError("the application failed before its response")
        finally:
            self.inside -= 1
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await end.wait()
        await send({"type": "http.response.body", "body": b"done"})


async def settle() -> None:
    """Let every task that can run, run (a few loop rounds)."""
    for _ in range(10):
        await asyncio.sleep(0)


async def discard(message: dict) -> None:
    pass


def arrive(
    admission: StreamAdmission, tag: str, path: str = STREAM, client=receive, **scope
) -> asyncio.Task:
    """A streamed chat request `tag` reaching `admission` now (its body from `client`), as a
    task."""
    return asyncio.create_task(admission(request(path, tag=tag, **scope), client, discard))


def test_streamed_chats_are_opened_at_most_limit_at_a_time_in_arrival_order():
    async def scenario():
        app = Recorder()
        admission = StreamAdmission(app, limit=2)
        tags = [f"chat-{i}" for i in range(6)]
        tasks = []
        for tag in tags:
            tasks.append(arrive(admission, tag))
            await settle()
        assert app.entered == tags[:2]
        for tag in tags:  # each response starts and ends in turn
            app.let_through(tag)
            await settle()
        await asyncio.gather(*tasks)
        return app

    app = run(scenario())
    assert app.entered == [f"chat-{i}" for i in range(6)]
    assert app.most_inside == 2


def test_a_place_is_given_up_when_the_response_starts_not_when_the_stream_ends():
    async def scenario():
        app = Recorder()
        admission = StreamAdmission(app, limit=1)
        first = arrive(admission, "first")
        await settle()
        second = arrive(admission, "second")
        await settle()
        waiting = list(app.entered)
        app.events("first")[0].set()  # its response starts; its stream goes on
        await settle()
        admitted = list(app.entered)
        app.let_through("first", "second")
        await asyncio.gather(first, second)
        return waiting, admitted

    waiting, admitted = run(scenario())
    assert waiting == ["first"]
    assert admitted == ["first", "second"]


@pytest.mark.parametrize(
    "scope",
    [
        request(STREAM, method="GET", tag="other"),
        request("/api/chat/", tag="other"),
        request("/api/memory/", tag="other"),
        {"type": "lifespan", "path": STREAM, "tag": "other"},
    ],
    ids=["GET stream", "POST /api/chat/", "POST elsewhere", "lifespan"],
)
def test_every_other_request_passes_straight_through_while_every_place_is_taken(scope):
    async def scenario():
        app = Recorder()
        admission = StreamAdmission(app, limit=1)
        holding = arrive(admission, "holding")
        await settle()
        other = asyncio.create_task(admission(scope, receive, discard))
        await settle()
        entered = list(app.entered)
        app.let_through("holding", "other")
        await asyncio.gather(holding, other)
        return entered

    assert run(scenario()) == ["holding", "other"]


def test_a_request_that_fails_before_its_response_gives_its_place_up():
    async def scenario():
        app = Recorder()
        app.fail.add("failing")
        admission = StreamAdmission(app, limit=1)
        failing = arrive(admission, "failing")
        await settle()
        after = arrive(admission, "after")
        await settle()
        app.events("failing")[0].set()
        with pytest.raises(RuntimeError, match="failed before its response"):
            await failing
        await settle()
        entered = list(app.entered)
        app.let_through("after")
        await after
        return entered

    assert run(scenario()) == ["failing", "after"]


def test_a_request_cancelled_while_it_waits_takes_no_place():
    async def scenario():
        app = Recorder()
        admission = StreamAdmission(app, limit=1)
        holding = arrive(admission, "holding")
        await settle()
        gone = arrive(admission, "gone")
        after = arrive(admission, "after")
        await settle()
        gone.cancel()
        await settle()
        while_holding = list(app.entered)
        app.let_through("holding")
        await holding
        await settle()
        entered = list(app.entered)
        app.let_through("after")
        await after
        return while_holding, entered, gone.cancelled(), app.most_inside

    while_holding, entered, cancelled, most_inside = run(scenario())
    assert cancelled
    assert while_holding == ["holding"]  # the cancelled one's place was not given to "after"
    assert entered == ["holding", "after"]
    assert most_inside == 1


def test_a_request_whose_body_has_not_all_come_takes_no_place():
    """A client that sends its body slowly, or never, holds up only its own request."""

    async def scenario():
        app = Recorder()
        admission = StreamAdmission(app, limit=1)
        sent = asyncio.Event()

        async def slow_client() -> dict:
            await sent.wait()
            return {"type": "http.request", "body": b"{}", "more_body": False}

        slow = arrive(admission, "slow", client=slow_client)
        await settle()
        quick = arrive(admission, "quick")
        await settle()
        while_slow = list(app.entered)
        app.let_through("quick")
        await quick
        sent.set()
        await settle()
        app.let_through("slow")
        await slow
        return while_slow, app.entered

    while_slow, entered = run(scenario())
    assert while_slow == ["quick"]
    assert entered == ["quick", "slow"]


def test_the_application_reads_the_body_as_the_client_sent_it():
    async def scenario():
        app = Recorder()
        admission = StreamAdmission(app, limit=1)
        messages = iter(
            [
                {"type": "http.request", "body": b'{"mess', "more_body": True},
                {"type": "http.request", "body": b'age": "hi"}', "more_body": False},
            ]
        )

        async def client() -> dict:
            return next(messages)

        task = arrive(admission, "chunked", client=client)
        await settle()
        app.let_through("chunked")
        await task
        return app.bodies["chunked"]

    assert run(scenario()) == b'{"message": "hi"}'


def test_a_body_past_djangos_upload_limit_is_not_held_here_and_does_not_wait(settings):
    """Past `DATA_UPLOAD_MAX_MEMORY_SIZE` the wrapper stops reading and hands the request on
    at once (Django refuses it): it neither buffers the rest nor takes a place."""
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10
    chunks = [b"x" * 8, b"y" * 8, b"z" * 8]

    async def scenario():
        app = Recorder()
        admission = StreamAdmission(app, limit=1)
        holding = arrive(admission, "holding")
        await settle()
        pending = iter(chunks)

        async def client() -> dict:
            body = next(pending)
            return {"type": "http.request", "body": body, "more_body": body != chunks[-1]}

        large = arrive(admission, "large", client=client)
        await settle()
        entered = list(app.entered)
        app.let_through("holding", "large")
        await asyncio.gather(holding, large)
        return entered, app.bodies["large"]

    entered, body = run(scenario())
    assert entered == ["holding", "large"]  # it went past the place "holding" has
    assert body == b"".join(chunks)  # what was read, then the rest, in order


def test_an_opening_that_hangs_gives_its_place_up_after_the_hold_limit(monkeypatch):
    monkeypatch.setattr(admission_module, "OPENING_HOLD_SECONDS", 0.05)

    async def scenario():
        app = Recorder()
        admission = StreamAdmission(app, limit=1)
        hanging = arrive(admission, "hanging")
        await settle()
        after = arrive(admission, "after")
        await settle()
        within_limit = list(app.entered)
        await asyncio.sleep(0.3)
        past_limit = list(app.entered)
        app.let_through("hanging", "after")
        await asyncio.gather(hanging, after)
        return within_limit, past_limit

    assert run(scenario()) == (["hanging"], ["hanging", "after"])


def test_each_event_loop_has_places_of_its_own():
    """A server run twice in one process (or a test's `asyncio.run` each time) serves from a
    new loop each time: an asyncio semaphore of an earlier loop would refuse it."""
    app = Recorder()
    admission = StreamAdmission(app, limit=1)

    async def one_with_a_waiter(round_: int):
        tags = [f"{round_}-a", f"{round_}-b"]
        tasks = [arrive(admission, t) for t in tags]
        await settle()
        for tag in tags:
            app.let_through(tag)
            await settle()
        await asyncio.gather(*tasks)

    run(one_with_a_waiter(1))
    run(one_with_a_waiter(2))
    assert app.entered == ["1-a", "1-b", "2-a", "2-b"]
    assert app.most_inside == 1


def test_a_limit_below_one_is_refused():
    with pytest.raises(ValueError, match="at least 1"):
        StreamAdmission(Recorder(), limit=0)


def entered_while_one_holds(
    admission: StreamAdmission, app: Recorder, path: str, root_path: str = ""
) -> list[str]:
    """What reached `app` while one request at `path` held the only place and a second one
    came (both waiting: the first alone; neither: both)."""

    async def scenario():
        tasks = [arrive(admission, tag, path, root_path=root_path) for tag in ("one", "two")]
        await settle()
        entered = list(app.entered)
        for tag in ("one", "two"):
            app.let_through(tag)
            await settle()
        await asyncio.gather(*tasks)
        return entered

    return run(scenario())


@pytest.mark.urls("tests.memory_app.host_urls")
@pytest.mark.parametrize(
    "path, root_path",
    [
        ("/memory/api/chat/stream/", ""),
        # served under a root path, the path the server hands over includes it
        ("/site/memory/api/chat/stream/", "/site"),
        ("/memory/api/chat/stream", ""),  # the API's edge serves it without its slash
    ],
)
def test_under_a_hosts_prefix_the_endpoint_is_found_from_its_urls(path, root_path):
    app = Recorder()
    admission = StreamAdmission(app, limit=1)
    assert entered_while_one_holds(admission, app, path, root_path) == ["one"]


@pytest.mark.parametrize(
    "path", ["/x/api/chat/stream/", "/api/chat/stream/more/", "/api/chat/"], ids=str
)
def test_a_path_that_only_looks_like_the_endpoint_passes_straight_through(path):
    app = Recorder()
    assert entered_while_one_holds(StreamAdmission(app, limit=1), app, path) == ["one", "two"]


# A host's URLconf that does not include the app's URLs (this module, as `pytest.mark.urls`).
urlpatterns: list = []


@pytest.mark.urls(__name__)
def test_where_the_urls_do_not_include_the_api_nothing_waits():
    app = Recorder()
    admission = StreamAdmission(app, limit=1)
    assert entered_while_one_holds(admission, app, STREAM) == ["one", "two"]


# -- the site's own application -------------------------------------------------------------


def test_the_site_serves_through_stream_admission_at_its_default():
    from yuxi_site import asgi

    assert isinstance(asgi.application, StreamAdmission)
    assert asgi.application.application is asgi.django_application
    assert asgi.application.limit == STREAM_OPENINGS_AT_ONCE == 2


@pytest.mark.django_db(transaction=True)
def test_more_streams_at_once_than_places_each_open_and_finish_through_the_site(wire_model):
    """Six streamed chats at once through the site's ASGI application (two places) against
    the wire model: every one is opened in its turn and ends `done`, its run succeeded."""
    from tests.memory_app.test_api_chat_stream import asgi_chat_stream, client_receive
    from yuxi_site.asgi import application

    wire_model.script = lambda request: text_reply("hello back")
    requests = [
        asgi_chat_stream(UserConfigFactory(enable_memory=True).user, "hello") for _ in range(6)
    ]

    async def one(scope: dict, body: bytes) -> list[str]:
        finished = asyncio.Event()
        names: list[str] = []

        async def send(message):
            if message["type"] == "http.response.body":
                for line in message.get("body", b"").split(b"\n"):
                    if line.startswith(b"data: "):
                        names.append(json.loads(line[len(b"data: ") :])["event"])
                if not message.get("more_body"):
                    finished.set()

        await asyncio.wait_for(
            application(scope, client_receive(body, disconnect_after=finished), send), 60
        )
        return names

    async def scenario():
        return await asyncio.gather(*(one(scope, body) for scope, body in requests))

    streams = run(scenario())
    assert [names[0] for names in streams] == ["run"] * 6
    assert [names[-1] for names in streams] == ["done"] * 6
    assert list(AgentRun.objects.values_list("status", flat=True)) == ["succeeded"] * 6


def test_the_stream_endpoint_is_found_by_a_url_name_the_api_declares_not_by_its_function():
    # The name admission reverses is the one the API gives its streamed chat route, stated
    # once; renaming the view's function (django-ninja's default name) cannot break it.
    from memory_app.api.chat import router
    from memory_app.api_edge import STREAM_CHAT_URL_NAME

    [operation] = [
        operation
        for path, view in router.path_operations.items()
        if path.rstrip("/").endswith("chat/stream")
        for operation in view.operations
    ]
    assert operation.url_name == STREAM_CHAT_URL_NAME
    assert admission_module._STREAM_URL_NAME.endswith(f":{STREAM_CHAT_URL_NAME}")
