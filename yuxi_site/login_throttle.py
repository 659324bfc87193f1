"""Login throttling on top of django-axes: a lockout per (username, address), and a daily
ceiling per username that spares the addresses its owner logs in from.

axes locks at `LOGIN_FAILURE_LIMIT` failures per (username, address) (`AXES_LOCKOUT_PARAMETERS`),
so an attacker guessing from one address cannot lock the owner out at another. That alone would
let an attacker with many addresses guess one password without end, and axes compares one
limit across its parameter sets, so this handler adds the second rule: after
`LOGIN_USERNAME_DAILY_LIMIT` failures for a username in 24 hours (axes' failure log, from every
address), that username is refused everywhere except from the addresses it logged in from
successfully in the last 30 days (axes' access log). `manage.py axes_reset_username NAME`
lifts both.
"""

from datetime import timedelta

from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import (
    get_client_username,
    get_cool_off,
    get_cool_off_iso8601,
    get_failure_limit,
)
from axes.models import AccessFailureLog, AccessLog
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

__all__ = [
    "LOGIN_CEILING_WINDOW",
    "USUAL_ADDRESS_WINDOW",
    "LoginThrottleHandler",
    "lockout_response",
    "username_over_daily_limit",
]

# The window the per-username ceiling counts failures in.
LOGIN_CEILING_WINDOW = timedelta(hours=24)
# How recent a successful login from an address must be for that address to stay open.
USUAL_ADDRESS_WINDOW = timedelta(days=30)


def username_over_daily_limit(username: str) -> bool:
    """Whether `username` has had `LOGIN_USERNAME_DAILY_LIMIT` failed logins in the last 24 h,
    from any address (one bounded query)."""
    limit = int(settings.LOGIN_USERNAME_DAILY_LIMIT)
    recent = AccessFailureLog.objects.filter(
        username=username, attempt_time__gte=timezone.now() - LOGIN_CEILING_WINDOW
    )
    return recent.values("id")[limit - 1 : limit].exists()


def _usual_address(username: str, address: str | None) -> bool:
    """Whether `username` logged in successfully from `address` in the last 30 days."""
    return bool(address) and (
        AccessLog.objects.filter(
            username=username,
            ip_address=address,
            attempt_time__gte=timezone.now() - USUAL_ADDRESS_WINDOW,
        ).exists()
    )


class LoginThrottleHandler(AxesDatabaseHandler):
    """axes' database handler plus the per-username daily ceiling (see the module)."""

    def is_locked(self, request: HttpRequest, credentials: dict | None = None) -> bool:
        if super().is_locked(request, credentials):
            return True
        username = get_client_username(request, credentials)
        if not username or not username_over_daily_limit(username):
            return False
        if _usual_address(username, getattr(request, "axes_ip_address", None)):
            return False
        # The lockout page says which rule refused the login.
        request.yuxi_username_ceiling = True
        return True

    def reset_attempts(
        self,
        *,
        ip_address: str | None = None,
        username: str | None = None,
        ip_or_username: bool = False,
    ) -> int:
        """Staff unlocking a username (`axes_reset_username`) lift its daily ceiling too: its
        failures drop out of the count."""
        count = super().reset_attempts(
            ip_address=ip_address, username=username, ip_or_username=ip_or_username
        )
        if username:
            AccessFailureLog.objects.filter(username=username).delete()
        return count


def lockout_response(
    request: HttpRequest,
    original_response: HttpResponse | None = None,
    credentials: dict | None = None,
) -> HttpResponse:
    """axes' lockout page (`AXES_LOCKOUT_TEMPLATE`, 429, the context axes gives it) with
    `Retry-After` in seconds (`AXES_LOCKOUT_CALLABLE`): the lockout window for a (username,
    address) pair, the daily ceiling's window when that rule refused. Both are upper bounds:
    failures during a lockout do not extend it."""
    cool_off = get_cool_off(request)
    context = {
        "failure_limit": get_failure_limit(request, credentials),
        "username": get_client_username(request, credentials) or "",
        "cooloff_time": get_cool_off_iso8601(cool_off) if cool_off else None,
        "cooloff_timedelta": cool_off,
    }
    response = render(
        request, settings.AXES_LOCKOUT_TEMPLATE, context, status=settings.AXES_HTTP_RESPONSE_CODE
    )
    ceiling = getattr(request, "yuxi_username_ceiling", False)
    window = LOGIN_CEILING_WINDOW if ceiling or cool_off is None else cool_off
    response["Retry-After"] = str(int(window.total_seconds()))
    return response
