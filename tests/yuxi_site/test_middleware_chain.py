"""Under ASGI the site's middleware chain runs in one thread (`OneThreadMiddlewareChain`
last), not through a thread hop per middleware hook; responses are what they were."""

import asyncio

import pytest
from asgiref.sync import SyncToAsync, sync_to_async
from django.conf import settings
from django.db import connections
from django.test import AsyncClient, override_settings

from tests.factories import UserFactory

pytestmark = pytest.mark.django_db(transaction=True)

CHAIN = "yuxi_site.middleware_chain.OneThreadMiddlewareChain"


@pytest.fixture
def hops(monkeypatch):
    """Every sync call an async caller hands to a thread from now on (a spy: it still runs)."""
    made = []
    real = SyncToAsync.__call__

    async def counting(self, *args, **kwargs):
        made.append(self.func)
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(SyncToAsync, "__call__", counting)
    return made


def settings_page_and_hops(user, hops: list) -> tuple[tuple[int, dict, dict], int]:
    """`GET /api/settings/` as `user` through Django's ASGI handler (a client of its own,
    loading `MIDDLEWARE` as it is now, warmed by a first request): the response, and the
    thread hops of the second request."""

    async def scenario():
        client = AsyncClient()
        await client.aforce_login(user)
        await client.get("/api/settings/")
        hops.clear()
        response = await client.get("/api/settings/")
        counted = len(hops)
        # `Expires` is the clock at the response (never-cache): two requests a second apart
        # differ there and nowhere else; that it is set at all is still compared.
        headers = dict(response.headers)
        headers["Expires"] = bool(headers.get("Expires"))
        # The login ran on asgiref's shared thread (no request around it): its connection
        # is closed there, as the request's own are closed on theirs.
        await sync_to_async(connections.close_all)()
        return (response.status_code, headers, response.json()), counted

    try:
        return asyncio.run(scenario())
    finally:
        connections.close_all()  # what the client's sync work left open on this thread


def test_the_chain_is_last_in_the_sites_middleware():
    assert settings.MIDDLEWARE[-1] == CHAIN


def test_under_asgi_a_request_hops_to_a_thread_once_not_once_per_middleware_hook(hops):
    user = UserFactory()
    response, with_chain = settings_page_and_hops(user, hops)
    with override_settings(MIDDLEWARE=[m for m in settings.MIDDLEWARE if m != CHAIN]):
        same_response, without = settings_page_and_hops(user, hops)
    assert response[0] == 200 and "Content-Security-Policy" in response[1]
    assert same_response == response
    # The chain's one hop and Django's own around the request and the view (5 with Django
    # 5.2); without the chain each middleware hook adds one (20).
    assert with_chain <= 5, with_chain
    assert without >= 15, without
