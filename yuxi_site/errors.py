"""The site's error views (`handler404`, `handler500`), answering in the API's JSON shape
under /api/, and the one message of every 503 the API sends.

Django turns an exception raised in middleware (the session lookup or save, when the database
is down) into a response through `handler500` before any outer middleware sees it, so this is
where such a failure becomes the API's JSON 503 instead of an HTML page.
"""

import sys

from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults

from yuxi_site.api_edge import API_PREFIX

__all__ = ["API_UNAVAILABLE_MESSAGE", "not_found", "server_error"]

# The body of every 503 the API sends when the database (or a lock) is unavailable.
API_UNAVAILABLE_MESSAGE = "the service is unavailable, try again"


def server_error(request: HttpRequest) -> HttpResponse:
    """JSON 503 for a database failure under /api/ (JSON 500 for anything else there)."""
    if not request.path.startswith(API_PREFIX):
        return defaults.server_error(request)
    if isinstance(sys.exc_info()[1], DatabaseError):
        return JsonResponse({"error": API_UNAVAILABLE_MESSAGE}, status=503)
    return JsonResponse({"error": "internal error"}, status=500)


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """JSON 404 for an unknown path under /api/."""
    if request.path.startswith(API_PREFIX):
        return JsonResponse({"error": "not found"}, status=404)
    return defaults.page_not_found(request, exception)
