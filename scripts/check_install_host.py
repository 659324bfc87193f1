"""The checks `scripts/check_install.py` runs inside the host project it generated, one per
call (`python install_checks.py <check>`, with `DJANGO_SETTINGS_MODULE=host.settings`), using
only the installed wheel and what docs/integration.md told the host to add (its
`memory_service` and `team_agent` modules among them). Prints what it saw; exits non-zero
with the reason when a check fails."""

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
from django.conf import settings  # noqa: E402 - only after django.setup()
from django.contrib.auth import get_user_model  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import setup_test_environment  # noqa: E402

from memory_app.services import set_memory_write_approval  # noqa: E402

USERNAME = "ada"


def _user():
    user, _ = get_user_model().objects.get_or_create(username=USERNAME)
    return user


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


CHECKS = {"origin": origin, "turn": turn, "approval": approval, "api": api}

if __name__ == "__main__":
    CHECKS[sys.argv[1]]()
