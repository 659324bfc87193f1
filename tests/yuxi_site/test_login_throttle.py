"""Login throttling (django-axes): five failed logins for a username lock it out, right password
or not, on the site's login page and the admin's alike, until the window since the last
failure has passed."""

from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.test import Client

from tests.factories import StaffUserFactory, UserFactory

pytestmark = pytest.mark.django_db

PASSWORD = "pw"  # the factories' password
LOGIN_PAGES = ["/accounts/login/", "/admin/login/"]


def _login(client: Client, page: str, username: str, password: str, **meta: str):
    return client.post(page, {"username": username, "password": password}, **meta)


def _logged_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


def _fail(page: str, username: str, times: int) -> None:
    """`times` wrong passwords, each from another address and browser, as a rotating attacker."""
    for n in range(times):
        response = _login(
            Client(),
            page,
            username,
            "wrong",
            REMOTE_ADDR=f"198.51.100.{n + 1}",
            HTTP_USER_AGENT=f"attacker/{n}",
        )
        # The form again, saying it did not match; the failure that reaches the limit already
        # answers with the lockout.
        expected = 429 if n + 1 == settings.LOGIN_FAILURE_LIMIT else 200
        assert response.status_code == expected, n


def test_the_limits_are_the_documented_settings():
    assert settings.LOGIN_FAILURE_LIMIT == settings.AXES_FAILURE_LIMIT == 5
    assert settings.LOGIN_LOCKOUT_SECONDS == 900
    assert timedelta(seconds=900) == settings.AXES_COOLOFF_TIME
    assert settings.AXES_LOCKOUT_PARAMETERS == ["username"]
    assert settings.AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT is False


@pytest.mark.parametrize("page", LOGIN_PAGES)
def test_four_failures_still_let_the_right_password_in(page):
    user = StaffUserFactory()
    _fail(page, user.username, settings.LOGIN_FAILURE_LIMIT - 1)
    client = Client()
    _login(client, page, user.username, PASSWORD)
    assert _logged_in(client)


@pytest.mark.parametrize("page", LOGIN_PAGES)
def test_after_five_failures_even_the_right_password_is_refused_with_429(page):
    user = StaffUserFactory()
    _fail(page, user.username, settings.LOGIN_FAILURE_LIMIT)
    client = Client()
    response = _login(client, page, user.username, PASSWORD)
    assert response.status_code == 429
    assert not _logged_in(client)
    body = response.content.decode()
    assert "Too many failed logins" in body
    assert "Try again in 15 minutes at most" in body
    assert settings.AXES_LOCKOUT_TEMPLATE in [template.name for template in response.templates]


def test_failures_on_one_login_page_lock_the_other_too():
    user = StaffUserFactory()
    _fail("/accounts/login/", user.username, settings.LOGIN_FAILURE_LIMIT)
    client = Client()
    assert _login(client, "/admin/login/", user.username, PASSWORD).status_code == 429
    assert not _logged_in(client)


def test_another_username_is_not_locked_out():
    locked, other = UserFactory(), UserFactory()
    _fail("/accounts/login/", locked.username, settings.LOGIN_FAILURE_LIMIT)
    client = Client()
    _login(client, "/accounts/login/", other.username, PASSWORD)
    assert _logged_in(client)


@pytest.mark.parametrize("page", LOGIN_PAGES)
def test_the_right_password_works_again_once_the_window_since_the_last_failure_passed(page):
    user = StaffUserFactory()
    _fail(page, user.username, settings.LOGIN_FAILURE_LIMIT)
    window = timedelta(seconds=settings.LOGIN_LOCKOUT_SECONDS)
    attempts = AccessAttempt.objects.filter(username=user.username)
    last_failure = max(attempts.values_list("attempt_time", flat=True))
    # Move axes' own clock: the last failure was a minute short of the window ago.
    attempts.update(attempt_time=last_failure - window + timedelta(seconds=60))
    still_locked = Client()
    assert _login(still_locked, page, user.username, PASSWORD).status_code == 429
    # A failure during the lockout does not start the window again.
    assert _login(Client(), page, user.username, "wrong").status_code == 429
    assert attempts.filter(attempt_time__gte=last_failure).count() == 0
    attempts.update(attempt_time=last_failure - window - timedelta(seconds=1))
    client = Client()
    _login(client, page, user.username, PASSWORD)
    assert _logged_in(client)
