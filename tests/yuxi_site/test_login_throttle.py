"""Login throttling (django-axes): five failed logins for a username from one address lock that
pair out, right password or not, on the site's login page and the admin's alike, until the
window since the last failure has passed; the owner at another address still logs in. Fifty
failures for a username in a day, from anywhere, lock it out everywhere but at the addresses
its owner logged in from; staff unlock both."""

import io
from datetime import timedelta

import pytest
from axes.models import AccessAttempt, AccessFailureLog
from django.conf import settings
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from tests.factories import StaffUserFactory, UserFactory

pytestmark = pytest.mark.django_db

PASSWORD = "pw"  # the factories' password
LOGIN_PAGES = ["/accounts/login/", "/admin/login/"]


def _login(client: Client, page: str, username: str, password: str, **meta: str):
    return client.post(page, {"username": username, "password": password}, **meta)


def _logged_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


ATTACKER = "198.51.100.7"
OWNER = "203.0.113.9"


def _fail(page: str, username: str, times: int, address: str = ATTACKER) -> None:
    """`times` wrong passwords from `address`, each from another browser (user agent and
    cookies), as an attacker rotating what it can."""
    for n in range(times):
        response = _login(
            Client(),
            page,
            username,
            "wrong",
            REMOTE_ADDR=address,
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
    assert settings.AXES_LOCKOUT_PARAMETERS == [["username", "ip_address"]]
    assert settings.LOGIN_USERNAME_DAILY_LIMIT == 50
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
    response = _login(client, page, user.username, PASSWORD, REMOTE_ADDR=ATTACKER)
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
    response = _login(client, "/admin/login/", user.username, PASSWORD, REMOTE_ADDR=ATTACKER)
    assert response.status_code == 429
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
    assert (
        _login(still_locked, page, user.username, PASSWORD, REMOTE_ADDR=ATTACKER).status_code == 429
    )
    # A failure during the lockout does not start the window again.
    again = _login(Client(), page, user.username, "wrong", REMOTE_ADDR=ATTACKER)
    assert again.status_code == 429
    assert attempts.filter(attempt_time__gte=last_failure).count() == 0
    attempts.update(attempt_time=last_failure - window - timedelta(seconds=1))
    client = Client()
    _login(client, page, user.username, PASSWORD, REMOTE_ADDR=ATTACKER)
    assert _logged_in(client)


@pytest.mark.parametrize("page", LOGIN_PAGES)
def test_an_attackers_five_failures_from_one_address_do_not_stop_the_owner_at_another(page):
    user = StaffUserFactory()
    _fail(page, user.username, settings.LOGIN_FAILURE_LIMIT)
    owner = Client()
    _login(owner, page, user.username, PASSWORD, REMOTE_ADDR=OWNER)
    assert _logged_in(owner)


def _fail_across_addresses(username: str, failures: int) -> None:
    """`failures` wrong passwords, `LOGIN_FAILURE_LIMIT` from each of as many addresses."""
    per_address = settings.LOGIN_FAILURE_LIMIT
    for n in range(failures // per_address):
        _fail("/accounts/login/", username, per_address, address=f"198.51.100.{n + 10}")


def test_fifty_failures_across_addresses_lock_the_username_but_not_at_the_owners_address():
    user = UserFactory()
    first = Client()
    _login(first, "/accounts/login/", user.username, PASSWORD, REMOTE_ADDR=OWNER)
    assert _logged_in(first)
    _fail_across_addresses(user.username, settings.LOGIN_USERNAME_DAILY_LIMIT)

    elsewhere = Client()
    response = _login(elsewhere, "/admin/login/", user.username, PASSWORD, REMOTE_ADDR="192.0.2.1")
    assert response.status_code == 429 and not _logged_in(elsewhere)
    assert "from everywhere except where it usually logs in from" in response.content.decode()

    owner = Client()
    _login(owner, "/accounts/login/", user.username, PASSWORD, REMOTE_ADDR=OWNER)
    assert _logged_in(owner)


def test_forty_nine_failures_across_addresses_do_not_lock_the_username():
    user = UserFactory()
    _fail_across_addresses(user.username, settings.LOGIN_USERNAME_DAILY_LIMIT - 5)
    for n in range(4):
        _login(
            Client(), "/accounts/login/", user.username, "wrong", REMOTE_ADDR=f"192.0.2.{n + 50}"
        )
    client = Client()
    _login(client, "/accounts/login/", user.username, PASSWORD, REMOTE_ADDR="192.0.2.1")
    assert _logged_in(client)


def test_failures_older_than_a_day_do_not_count_toward_the_ceiling():
    user = UserFactory()
    _fail_across_addresses(user.username, settings.LOGIN_USERNAME_DAILY_LIMIT)
    AccessFailureLog.objects.filter(username=user.username).update(
        attempt_time=timezone.now() - timedelta(hours=24, seconds=1)
    )
    client = Client()
    _login(client, "/accounts/login/", user.username, PASSWORD, REMOTE_ADDR="192.0.2.1")
    assert _logged_in(client)


def test_staff_unlock_a_username_from_both_rules_with_axes_reset_username():
    user = UserFactory()
    _fail_across_addresses(user.username, settings.LOGIN_USERNAME_DAILY_LIMIT)
    call_command("axes_reset_username", user.username, stdout=io.StringIO())
    for address in (ATTACKER, "198.51.100.10", "192.0.2.1"):
        client = Client()
        _login(client, "/accounts/login/", user.username, PASSWORD, REMOTE_ADDR=address)
        assert _logged_in(client), address
