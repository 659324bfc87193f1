"""Who calls the HTTP API: the host's choice.

`MEMORY_API_AUTH` (default empty) names the host's own django-ninja auth, tried first on every
request: dotted paths to an auth class (made with no arguments) or a callable, or the objects
themselves, e.g. `["myproject.api_auth.BearerTokenAuth"]` for bearer tokens the host already
issues. Each gets the request and returns the authenticated user (an instance of the host's
user model) or None. Then Django's session login, with CSRF checked for unsafe methods once a
user is known, as ever: the user's own page always uses it. The authenticated user is the only
identity every endpoint acts for; no body field names a user.
"""

import functools
import inspect
import logging
from typing import Any

from asgiref.sync import async_to_sync
from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest
from django.utils.module_loading import import_string
from django.utils.translation import gettext_noop
from ninja.errors import HttpError
from ninja.security import SessionAuth
from ninja.utils import check_csrf

from memory_app.conf import setting

__all__ = [
    "SessionCsrfAuth",
]

logger = logging.getLogger("yuxi.memory")

# The 403 of an unsafe request without a valid CSRF token: what to send, and where it comes from.
CSRF_FAILED_MESSAGE = gettext_noop(
    "CSRF check failed: send the csrftoken cookie's value as the X-CSRFToken header on every "
    "POST, PUT, PATCH and DELETE (the cookie is set when you log in at /accounts/login/ and "
    "changes at each login)"
)


class SessionCsrfAuth(SessionAuth):
    """Django's session login; the CSRF check runs only once a user is known."""

    def __call__(self, request: HttpRequest) -> Any:
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated:
            return None
        if self.csrf and check_csrf(request) is not None:
            raise HttpError(403, CSRF_FAILED_MESSAGE)
        return user


@functools.cache
def _resolved(entry: Any) -> Any:
    found = import_string(entry) if isinstance(entry, str) else entry
    auth = found() if inspect.isclass(found) else found
    if not callable(auth):
        raise ImproperlyConfigured(f"MEMORY_API_AUTH: {entry!r} is not an auth class or callable")
    return auth


def configured_auths() -> list[Any]:
    """The host's auths from `MEMORY_API_AUTH`, resolved (imports cached per entry)."""
    entries = setting("MEMORY_API_AUTH")
    if isinstance(entries, str) or not isinstance(entries, list | tuple):
        raise ImproperlyConfigured("MEMORY_API_AUTH must be a list of auth classes or callables")
    return [_resolved(entry) for entry in entries]


def _called(auth: Any, request: HttpRequest) -> Any:
    result = auth(request)
    return async_to_sync(_awaited)(result) if inspect.isawaitable(result) else result


async def _awaited(result: Any) -> Any:
    return await result


class ConfiguredAuth(SessionCsrfAuth):
    """The API's one auth: each of `MEMORY_API_AUTH` (read at every request), then the
    session. Documented in the OpenAPI document as the session cookie."""

    def __call__(self, request: HttpRequest) -> Any:
        for auth in configured_auths():
            user = _called(auth, request)
            if user:
                if not isinstance(user, get_user_model()):
                    raise ImproperlyConfigured(
                        f"MEMORY_API_AUTH: {auth!r} returned {type(user).__name__}, not a user "
                        "of AUTH_USER_MODEL"
                    )
                return user
        return super().__call__(request)
