"""The edge of the API: every answer under the API's path is JSON, even to a request no
endpoint could take, wherever a host includes `memory_app.urls`.

Two things Django would otherwise answer in HTML, or crash on, before the API sees the
request: a body that is not JSON (the CSRF check reads a form body as `request.POST`, and a
multipart one without a boundary is an HTML 400, with one a 500 once the body was read), and
a path missing its trailing slash (`CommonMiddleware` redirects with an HTML 301, which a
client's POST does not follow). And Django turns an exception raised in middleware (the session
lookup or save, when the database is down) into a response through the root URLconf's
`handler500` before any outer middleware sees it, so the error views here are where such a
failure becomes the API's JSON 503 instead of an HTML page.

The edge is the apps' own: it applies to a request whose path resolves to one of the API's
routes (the namespace `yuxi_memory:memory_api`, never a host's `api`), or, for the JSON 404,
lies under the path the API's root resolves to (`api_path_prefix`, never assumed: under the
reference site it is `/api/`, in a host that includes the app under `memory/` it is
`/memory/api/`). A host's own `/api/` keeps its own answers.
"""

import functools
import sys

from django.conf import settings
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import (
    NoReverseMatch,
    Resolver404,
    get_script_prefix,
    get_urlconf,
    resolve,
    reverse,
)
from django.utils.cache import add_never_cache_headers
from django.utils.deprecation import MiddlewareMixin
from django.views import defaults

__all__ = [
    "ApiEdgeMiddleware",
    "not_found",
    "server_error",
    "API_UNAVAILABLE_MESSAGE",
    "URL_NAMESPACE",
    "API_NAMESPACE",
]

# The apps' URL namespace (`memory_app.urls`' `app_name`), and the API's inside it
# (django-ninja's `urls_namespace`): never `api`, which a host's own API may well use.
URL_NAMESPACE = "yuxi_memory"
API_NAMESPACE = f"{URL_NAMESPACE}:memory_api"
# The URL name the API gives its streamed chat endpoint, stated rather than derived from the
# view's function name: `admission.StreamAdmission` finds the endpoint by reversing it.
STREAM_CHAT_URL_NAME = "post_chat_stream"
# The one body type the API reads.
JSON_CONTENT_TYPE = "application/json"
# The body of every 503 the API sends when the database (or a lock) is unavailable.
API_UNAVAILABLE_MESSAGE = "the service is unavailable, try again"


@functools.cache
def _api_path_prefix(urlconf: object, script_prefix: str) -> str | None:
    try:
        url = reverse(f"{API_NAMESPACE}:api-root", urlconf=urlconf)
    except NoReverseMatch:
        return None
    return "/" + url.removeprefix(script_prefix)


def api_path_prefix(request: HttpRequest | None = None) -> str | None:
    """Where the API is served, as `request.path_info` spells it (e.g. `/api/`, `/memory/api/`);
    None when the URLs in use do not include it. Resolved once per URLconf."""
    urlconf = getattr(request, "urlconf", None) or get_urlconf() or settings.ROOT_URLCONF
    return _api_path_prefix(urlconf, get_script_prefix())


def _under_api_path(request: HttpRequest, path: str) -> bool:
    prefix = api_path_prefix(request)
    return prefix is not None and path.startswith(prefix)


def _is_api_route(request: HttpRequest, path: str) -> bool:
    """Whether `path` resolves to one of the API's own routes (not merely a path under it: a
    host's route listed first there stays the host's)."""
    if not _under_api_path(request, path):
        return False
    try:
        match = resolve(path, getattr(request, "urlconf", None))
    except Resolver404:
        return False
    return match.namespace == API_NAMESPACE


def _has_body(request: HttpRequest) -> bool:
    """Whether the request carries a body (a length over 0, or a chunked one of unknown length)."""
    length = request.META.get("CONTENT_LENGTH") or "0"
    chunked = "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower()
    return chunked or not length.isdigit() or int(length) > 0


class ApiEdgeMiddleware(MiddlewareMixin):
    """Under the API's path: a non-empty body that is not `application/json` is a JSON 415,
    unread; a path missing its trailing slash is served as the path with it when that one
    exists. Goes before the session and CSRF middleware.

    A `MiddlewareMixin`, so it serves the WSGI and the ASGI handler alike."""

    def process_request(self, request: HttpRequest) -> HttpResponse | None:
        path = request.path_info
        # Set when only the path with a trailing slash is the API's.
        slashed = None
        if not _is_api_route(request, path):
            slashed = None if path.endswith("/") else path + "/"
            if slashed is None or not _is_api_route(request, slashed):
                return None
        if _has_body(request) and request.content_type.lower() != JSON_CONTENT_TYPE:
            return JsonResponse(
                {"error": f"the body must be JSON (Content-Type: {JSON_CONTENT_TYPE})"},
                status=415,
            )
        if slashed is not None:
            request.path_info = slashed
            request.path = request.path + "/"
        return None


def server_error(request: HttpRequest) -> HttpResponse:
    """`handler500`: JSON 503 for a database failure under the API's path (JSON 500 for
    anything else there); Django's own page elsewhere."""
    if not _is_api_route(request, request.path_info):
        return defaults.server_error(request)
    if isinstance(sys.exc_info()[1], DatabaseError):
        return JsonResponse({"error": API_UNAVAILABLE_MESSAGE}, status=503)
    return JsonResponse({"error": "internal error"}, status=500)


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """`handler404`: JSON 404 for an unknown path under the API's path."""
    if _under_api_path(request, request.path_info):
        response = JsonResponse({"error": "not found"}, status=404)
        add_never_cache_headers(response)  # as every answer of the API
        return response
    return defaults.page_not_found(request, exception)
