"""The checks `scripts/check_install.py` runs inside the host project it generated, one per
call (`python install_checks.py <check>`, with `DJANGO_SETTINGS_MODULE=host.settings`), using
only the installed wheel and what docs/integration.md told the host to add (its
`memory_service` and `team_agent` modules among them). Prints what it saw; exits non-zero
with the reason when a check fails. The same checks serve the `startproject` host and the
team's host (its own email-login user model, user admin, NinjaAPI under `api`, bearer
tokens): users are found by the model's `USERNAME_FIELD`."""

import asyncio
import importlib.util
import json
import sys
import sysconfig
from pathlib import Path

import django

django.setup()

import memory_service  # noqa: E402 - the guide's modules, as the host added them
import team_agent  # noqa: E402
from django.apps import apps  # noqa: E402 - only after django.setup()
from django.conf import settings  # noqa: E402
from django.contrib import admin as django_admin  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.contrib.auth.admin import GroupAdmin  # noqa: E402
from django.contrib.auth.models import Group  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import setup_test_environment  # noqa: E402
from django.urls import reverse  # noqa: E402

from memory_app.services import set_memory_write_approval  # noqa: E402

# Valid as a username and as an email.
USERNAME = "ada@example.com"
STAFF = "staff@example.com"


def _user():
    User = get_user_model()
    user, _ = User.objects.get_or_create(**{User.USERNAME_FIELD: USERNAME})
    return user


def _staff_client() -> Client:
    setup_test_environment()  # the test client's host name is allowed
    User = get_user_model()
    staff = User.objects.filter(**{User.USERNAME_FIELD: STAFF}).first()
    if staff is None:
        staff = User.objects.create_superuser(**{User.USERNAME_FIELD: STAFF, "password": "pw"})
    client = Client()
    client.force_login(staff)
    return client


def _memory(user) -> str:
    path = Path(settings.WORKSPACE_ROOT) / str(user.pk) / "agents" / "MEMORY.md"
    return path.read_text() if path.exists() else ""


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise SystemExit(f"check failed: {message}")


def origin() -> None:
    """The apps import from the virtualenv's site-packages; the reference site is absent."""
    site_packages = Path(sysconfig.get_paths()["purelib"]).resolve()
    for name in ("memory_app", "conversations"):
        found = Path(importlib.util.find_spec(name).origin).resolve()
        _expect(site_packages in found.parents, f"{name} imported from {found}")
        print(f"{name}: {found}")
    _expect(importlib.util.find_spec("yuxi_site") is None, "yuxi_site is importable in the host")
    print("yuxi_site: not importable")


def turn() -> None:
    """A turn that remembers, through the guide's `reply` (chat), then one through `areply`
    (achat) that looks the fact up in the user's history."""
    user = _user()
    memory_service.turn_memory_on(user)
    first = memory_service.reply(user, "remember that I drink oolong tea")
    print(f"chat: status={first.status} tool_calls={first.tool_calls} reply={first.reply!r}")
    _expect(first.tool_calls == [{"name": "remember_memory", "status": "success"}], "no write")
    _expect("I drink oolong tea" in _memory(user), f"MEMORY.md is {_memory(user)!r}")
    print(f"MEMORY.md: {_memory(user)!r}")
    second = asyncio.run(memory_service.areply(user, "search my history for oolong"))
    print(f"achat: status={second.status} tool_calls={second.tool_calls}")
    _expect(second.status == "succeeded", f"the async turn ended {second.status}")
    _expect(second.thread_id != first.thread_id, "the async turn reused the thread")


def approval() -> None:
    """The guide's own agent (`team_agent.team_turn`) for a user who approves each write: the
    first call stops before the write, the second carries the approval and writes."""
    user = _user()
    set_memory_write_approval(user=user, enabled=True, actor=user)
    before = _memory(user)
    thread_id, reply, approval = team_agent.team_turn(
        user.pk, text="remember that my cat is called Miso"
    )
    print(f"first call: approval={approval}")
    _expect(approval is not None, f"the write did not wait for approval (reply {reply!r})")
    _expect(_memory(user) == before, "MEMORY.md changed before the user decided")
    _, reply, again = team_agent.team_turn(user.pk, thread_id, decision={"decision": "approve"})
    print(f"second call (approve): approval={again} reply={reply!r}")
    _expect(again is None, f"still waiting: {again}")
    _expect("my cat is called Miso" in _memory(user), f"MEMORY.md is {_memory(user)!r}")
    print(f"MEMORY.md: {_memory(user)!r}")
    set_memory_write_approval(user=user, enabled=False, actor=user)


def api() -> None:
    """The API under the host's `memory/` prefix, through Django's test client."""
    setup_test_environment()  # the test client's host name is allowed
    user = _user()
    client = Client()
    client.force_login(user)
    memory = client.get("/memory/api/memory/")
    _expect(memory.status_code == 200, f"GET /memory/api/memory/ -> {memory.status_code}")
    _expect("I drink oolong tea" in memory.json()["text"], f"memory is {memory.json()}")
    print(f"GET /memory/api/memory/ -> 200, text={memory.json()['text']!r}")
    turn = client.post(
        "/memory/api/chat/",
        json.dumps({"message": "remember that my cat is called Miso"}),
        content_type="application/json",
    )
    _expect(turn.status_code == 200, f"POST /memory/api/chat/ -> {turn.status_code}")
    print(f"POST /memory/api/chat/ -> 200, tool_calls={turn.json()['tool_calls']}")
    paths = sorted(client.get("/memory/api/openapi.json").json()["paths"])
    _expect(all(path.startswith("/memory/api/") for path in paths), f"OpenAPI paths {paths}")
    print(f"GET /memory/api/openapi.json -> {len(paths)} paths, all under /memory/api/")
    docs = client.get("/memory/api/docs")
    _expect(docs.status_code == 200, f"GET /memory/api/docs -> {docs.status_code}")
    print("GET /memory/api/docs -> 200")
    root = client.get("/api/memory/")
    _expect(root.status_code == 404, f"GET /api/memory/ -> {root.status_code}")
    print("GET /api/memory/ -> 404 (nothing at the root)")


def admin() -> None:
    """Every admin page of the apps (changelists searched by the user's name and ordered,
    one change page each) and the user's own staff page, as a superuser of the host."""

    client = _staff_client()
    user = _user()
    for app_label in ("conversations", "memory_app"):
        for model in apps.get_app_config(app_label).get_models():
            if not django_admin.site.is_registered(model):
                continue
            opts = model._meta
            url = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")
            for query in ("", f"?q={USERNAME}", "?o=1", f"?user={user.pk}"):
                status = client.get(url + query).status_code
                _expect(status == 200, f"GET {url}{query} -> {status}")
            row = model.objects.order_by("pk").first()
            if row is not None:
                change = reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[row.pk])
                status = client.get(change).status_code
                _expect(status == 200, f"GET {change} -> {status}")
            print(f"{url}: 200 (plain, searched, ordered, by user){', and a row' if row else ''}")
    page = client.get(reverse("admin:yuxi_user", args=[user.pk]))
    _expect(page.status_code == 200, f"the user's staff page -> {page.status_code}")
    _expect("I drink oolong tea" in page.content.decode(), "the staff page lacks the memory")
    found = client.get(reverse("admin:yuxi_user_find") + f"?name={USERNAME}")
    _expect(found.status_code == 302, f"finding the user by name -> {found.status_code}")
    print(f"{reverse('admin:yuxi_user', args=[user.pk])}: 200, by name: 302 to it")


def page() -> None:
    """The user's own page under the host's prefix."""
    setup_test_environment()
    client = Client()
    client.force_login(_user())
    response = client.get("/memory/")
    _expect(response.status_code == 200, f"GET /memory/ -> {response.status_code}")
    _expect(USERNAME in response.content.decode(), "the page does not name the user")
    print(f"GET /memory/ -> 200, logged in as {USERNAME}")


def export() -> None:
    """The user's export: one JSON document naming the user by USERNAME_FIELD."""
    setup_test_environment()
    client = Client()
    client.force_login(_user())
    response = client.get("/memory/api/export/")
    _expect(response.status_code == 200, f"GET /memory/api/export/ -> {response.status_code}")
    document = json.loads(b"".join(response.streaming_content))
    _expect(document["user"]["username"] == USERNAME, f"export user {document['user']}")
    threads = len(document["threads"])
    print(f"GET /memory/api/export/ -> 200, user={document['user']}, threads={threads}")


def bearer() -> None:
    """A chat over the host's bearer token (the guide's MEMORY_API_AUTH example)."""
    from accounts.models import ApiToken  # only the team's host has it

    setup_test_environment()
    user = _user()
    ApiToken.objects.get_or_create(key="check-install-token", user=user)
    client = Client()
    response = client.post(
        "/memory/api/chat/",
        json.dumps({"message": "remember that I take the 8:15 train"}),
        content_type="application/json",
        HTTP_AUTHORIZATION="Bearer check-install-token",
    )
    _expect(response.status_code == 200, f"POST /memory/api/chat/ -> {response.status_code}")
    _expect("I take the 8:15 train" in _memory(user), f"MEMORY.md is {_memory(user)!r}")
    print(f"POST /memory/api/chat/ (Bearer) -> 200, tool_calls={response.json()['tool_calls']}")
    wrong = client.get("/memory/api/memory/", HTTP_AUTHORIZATION="Bearer wrong")
    _expect(wrong.status_code == 401, f"a wrong token -> {wrong.status_code}")
    print("GET /memory/api/memory/ (wrong token) -> 401")


def untouched() -> None:
    """The host's own admin classes and `api:` names are its own."""
    from accounts.admin import EmailUserAdmin  # only the team's host has it

    registered = type(django_admin.site._registry[get_user_model()])
    _expect(registered is EmailUserAdmin, f"the user admin is {registered}")
    group = type(django_admin.site._registry[Group])
    _expect(group is GroupAdmin, f"the group admin is {group}")
    print(
        f"admin: {registered.__module__}.{registered.__name__}, {group.__module__}.{group.__name__}"
    )
    _expect(reverse("api:ping") == "/api/ping", f"api:ping -> {reverse('api:ping')}")
    client = _staff_client()
    ping = client.get("/api/ping")
    _expect(ping.status_code == 200 and ping.json() == {"pong": True}, f"/api/ping {ping.content}")
    form = client.post("/api/echo", "a=1", content_type="application/x-www-form-urlencoded")
    _expect(form.status_code == 200, f"a form POST to the host's /api/echo -> {form.status_code}")
    print("api:ping -> /api/ping (200), a form POST to /api/echo -> 200 (the host's own)")
    add = client.get("/admin/accounts/emailuser/add/")
    _expect(add.status_code == 200, f"the host's user add page -> {add.status_code}")
    print("/admin/accounts/emailuser/add/ -> 200")


CHECKS = {
    "origin": origin,
    "turn": turn,
    "approval": approval,
    "api": api,
    "admin": admin,
    "page": page,
    "export": export,
    "bearer": bearer,
    "untouched": untouched,
}

if __name__ == "__main__":
    CHECKS[sys.argv[1]]()
