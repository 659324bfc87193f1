"""`GET /healthz`: whether this app process is warm and can reach its database, for a load
balancer."""

from django.db import DatabaseError, connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_safe

from yuxi_site.warmup import is_warm

__all__ = ["healthz"]


@require_safe
def healthz(request: HttpRequest) -> JsonResponse:
    """200 `{"database": "ok"}` after a round trip to PostgreSQL, 503 when it fails; 503
    `{"warm": false}` before the process has warmed up (`yuxi_site.warmup`), so a load balancer
    sends it nothing that would wait on the warm-up.

    Touches no session, so it answers while the database is down.
    """
    if not is_warm():
        return JsonResponse({"warm": False}, status=503)
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError:
        # A broken connection is dropped now; the next request connects afresh.
        connection.close()
        return JsonResponse({"database": "unavailable"}, status=503)
    return JsonResponse({"database": "ok"})
