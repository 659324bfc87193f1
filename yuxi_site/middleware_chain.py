"""`OneThreadMiddlewareChain`: under ASGI, the whole middleware chain in one thread.

Django runs an async-capable middleware under ASGI in async mode, and each of its
`process_request` / `process_view` / `process_response` hooks (Django's own middleware are
sync functions behind `MiddlewareMixin`) through a hop to a worker thread and back: about
twenty per request with this site's chain, plus the switch around WhiteNoise, which is sync
only. Measured side by side (bench/chat_turn.py's streams section, and a request through the
ASGI application in-process), those hops were 1.5-2 ms of CPU per request alone and several
more under 64 concurrent streams.

Django adapts a chain at its sync/async boundaries: every middleware above a sync-only one
runs sync. Placed last, this pass-through is that boundary: the chain runs synchronously in
one thread (one hop to it), and the view, async or not, is reached through one adaptation
at the bottom. Under WSGI it is a plain pass-through.
"""

from collections.abc import Callable

from django.http import HttpRequest
from django.http.response import HttpResponseBase

__all__ = ["OneThreadMiddlewareChain"]


class OneThreadMiddlewareChain:
    """Sync only, placed last in `MIDDLEWARE`: it passes every request and response through
    unchanged, and makes Django run the middleware above it in one thread under ASGI."""

    sync_capable = True
    async_capable = False

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        return self.get_response(request)
