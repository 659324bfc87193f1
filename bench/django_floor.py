"""The Django floor of a streamed chat: bench/bare_stream_app.py's agent behind Django's ASGI
handler with the site's settings (bench/django_floor_settings.py): the site's middleware
chain (sessions, CSRF, authentication, axes, the content security policy), the logged-in user
read from the session, the request's connection handed back before the stream, and nothing
of the site's own: no run, no database write, no memory, no django-ninja.

bench/chat_turn.py's `streams` section runs it beside the site and the bare floor, in the same
kind of worker against the same wire model, so a streamed chat's worker CPU splits into what
the agent stack costs alone (the bare floor), what Django's request adds to it (this one), and
what the site adds to both.

Run: `gunicorn -c gunicorn.conf.py --pythonpath bench django_floor:application`, with
`LLM_BASE_URL` set.
"""

import json
import os

# Its own settings, whatever the environment names (the bench names the site's).
os.environ["DJANGO_SETTINGS_MODULE"] = "django_floor_settings"

from asgiref.sync import sync_to_async  # noqa: E402 (the settings module is named first)
from bare_stream_app import agent_frames  # noqa: E402
from django.core.asgi import get_asgi_application  # noqa: E402
from django.http import (  # noqa: E402
    HttpRequest,
    HttpResponse,
    HttpResponseBase,
    JsonResponse,
    StreamingHttpResponse,
)
from django.urls import path  # noqa: E402
from django.views.decorators.http import require_POST  # noqa: E402

from conversations.utils.connections import release_connection  # noqa: E402


@require_POST
async def chat_stream(request: HttpRequest) -> HttpResponseBase:
    """The bare agent's events for a logged-in user (CSRF checked by the site's middleware)."""
    user = await request.auser()
    if not user.is_authenticated:
        return JsonResponse({"detail": "Unauthorized"}, status=401)
    message = json.loads(request.body)["message"]
    # As the site's view does: the request's thread would keep its connection to the end.
    await sync_to_async(release_connection)()
    response = StreamingHttpResponse(agent_frames(message), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    return response


def healthz(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


urlpatterns = [path("healthz", healthz), path("api/chat/stream/", chat_stream)]

application = get_asgi_application()
