"""The edge of /api/: every answer there is JSON, even to a request no endpoint could take.

Two things Django would otherwise answer in HTML, or crash on, before the API sees the
request: a body that is not JSON (the CSRF check reads a form body as `request.POST`, and a
multipart one without a boundary is an HTML 400, with one a 500 once the body was read), and
a path missing its trailing slash (`CommonMiddleware` redirects with an HTML 301, which a
client's POST does not follow).
"""

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import is_valid_path
from django.utils.deprecation import MiddlewareMixin

__all__ = ["API_PREFIX", "JSON_CONTENT_TYPE", "ApiEdgeMiddleware"]

# Requests under this path are API requests: every answer to them is JSON.
API_PREFIX = "/api/"
# The one body type the API reads.
JSON_CONTENT_TYPE = "application/json"


def _has_body(request: HttpRequest) -> bool:
    """Whether the request carries a body (a length over 0, or a chunked one of unknown length)."""
    length = request.META.get("CONTENT_LENGTH") or "0"
    chunked = "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower()
    return chunked or not length.isdigit() or int(length) > 0


class ApiEdgeMiddleware(MiddlewareMixin):
    """Under /api/: a non-empty body that is not `application/json` is a JSON 415, unread; a
    path missing its trailing slash is served as the path with it when that one exists.

    A `MiddlewareMixin`, so it serves the WSGI and the ASGI handler alike."""

    def process_request(self, request: HttpRequest) -> HttpResponse | None:
        if not request.path_info.startswith(API_PREFIX):
            return None
        if _has_body(request) and request.content_type.lower() != JSON_CONTENT_TYPE:
            return JsonResponse(
                {"error": f"the body must be JSON (Content-Type: {JSON_CONTENT_TYPE})"},
                status=415,
            )
        if not request.path_info.endswith("/"):
            slashed = request.path_info + "/"
            if is_valid_path(slashed, getattr(request, "urlconf", None)):
                request.path_info = slashed
                request.path = request.path + "/"
        return None
