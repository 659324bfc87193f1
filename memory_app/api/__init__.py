"""The JSON API (django-ninja): chat, the user's own memory, its kept versions and where each
of its lines came from, settings, threads, export; served at `api/` below wherever a host
includes `memory_app.urls`.

Thin adapters over the services and selectors, one module per concern: `schemas` (the
shapes), `chat` (a turn, as JSON or as a stream), `memory` (the file, its versions and lines,
the switches), `threads` (threads, messages, approvals, export) and `errors` (how every
exception is answered, the memory errors by one table). This package assembles them into one
`NinjaAPI`. The user always comes from the request's authentication (`memory_app.api_auth`:
the host's `MEMORY_API_AUTH`, then the Django session with CSRF checked for unsafe methods,
after authentication, so an anonymous caller gets 401). Every error, the framework's own
included, has one shape: `{"error": "..."}`.
"""

import functools
from collections.abc import Callable
from inspect import iscoroutinefunction
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, URLResolver
from django.utils.cache import add_never_cache_headers
from ninja import NinjaAPI
from ninja.operation import Operation

from memory_app.api import chat, memory, threads
from memory_app.api.errors import EXCEPTION_HANDLERS, error_response
from memory_app.api_auth import ConfiguredAuth
from memory_app.api_edge import API_NAMESPACE


class _MemoryApi(NinjaAPI):
    def get_openapi_operation_id(self, operation: Operation) -> str:
        """`memory_app_api_<view>`, whichever module of the package the view is in: a client
        generated from the document keeps its method names when a view moves."""
        return f"{__name__}_{operation.view_func.__name__}".replace(".", "_")


api = _MemoryApi(
    title="Yuxi Memory API",
    version="1",
    description=(
        "Log in on the site's login page (Django's session cookie), then send the `csrftoken` "
        "cookie's value as `X-CSRFToken` on every POST, PUT, PATCH and DELETE. Every error is "
        '`{"error": "..."}`.'
    ),
    auth=ConfiguredAuth(),
    urls_namespace=API_NAMESPACE,
    # The documents describe a user's API: only a logged-in visitor reads them.
    docs_decorator=login_required,
)
for _router in (chat.router, memory.router, threads.router):
    api.add_router("", _router)
for _exception, _handler in EXCEPTION_HANDLERS:
    api.add_exception_handler(_exception, _handler)


def _json_not_allowed(view: Callable[..., Any]) -> Callable[..., Any]:
    """Ninja answers a method no operation takes with an empty 405: give it the error shape.
    An async view (a path whose operation is async) stays async. Every answer of the API is
    kept out of the browser's cache (`no-store`): nothing of a user's outlives their session,
    Back after logging out included."""

    def shaped(response: HttpResponse) -> HttpResponse:
        add_never_cache_headers(response)
        if response.status_code == 405 and not response.get("Content-Type", "").startswith(
            "application/json"
        ):
            allowed = response["Allow"]
            response = error_response(405, f"use {allowed.replace(',', ' or')}")
            response["Allow"] = allowed
        return response

    @functools.wraps(view)  # keeps ninja's csrf_exempt marker
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        return shaped(view(request, *args, **kwargs))

    @functools.wraps(view)
    async def awrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        return shaped(await view(request, *args, **kwargs))

    return awrapped if iscoroutinefunction(view) else wrapped


def api_urls() -> tuple[list[URLPattern | URLResolver], str, str]:
    """`api.urls`, each view answering an unknown method in the API's error shape."""
    patterns, app_name, namespace = api.urls
    for pattern in patterns:
        if isinstance(pattern, URLPattern):
            pattern.callback = _json_not_allowed(pattern.callback)
    return patterns, app_name, namespace
