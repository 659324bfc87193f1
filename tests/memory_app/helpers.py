"""Helpers the memory tests share (fixtures are in `conftest.py`): a file's hash and etag
computed apart from the app, one agent write through the real write path, and a browser's
logged-in session with the headers of its unsafe requests."""

import hashlib

from django.conf import settings
from django.test import Client

from conversations.models import AgentRun
from memory_app.services import remember_memory
from tests.factories import ConversationFactory, RunningAgentRunFactory, context_for

CSRF_TOKEN = "c" * 32


def sha(data: bytes) -> str:
    """The hex SHA-256 a kept version is named by."""
    return hashlib.sha256(data).hexdigest()


def etag(data: bytes) -> str:
    """The etag of a MEMORY.md holding `data`."""
    return "sha256:" + sha(data)


def remember(user, content: str, replaces: str | None = None) -> AgentRun:
    """One agent write in a new thread of `user`, through the real write path."""
    run = RunningAgentRunFactory(conversation=ConversationFactory(user=user))
    remember_memory(context_for(run), content, replaces)
    return run


def csrf_session(user) -> Client:
    """A client logged in as `user` that checks CSRF as a browser's requests are checked; its
    unsafe requests send `unsafe_headers`."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    client.cookies[settings.CSRF_COOKIE_NAME] = CSRF_TOKEN
    return client


def unsafe_headers(if_match: str | None = None) -> dict[str, str]:
    """The CSRF token, and `If-Match` when given (None sends none)."""
    headers = {"HTTP_X_CSRFTOKEN": CSRF_TOKEN}
    if if_match is not None:
        headers["HTTP_IF_MATCH"] = if_match
    return headers
