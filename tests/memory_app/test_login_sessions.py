"""Each login's session is recorded for its user, and the record goes with the session."""

import pytest
from django.contrib.sessions.models import Session
from django.test import Client
from django.urls import reverse

from memory_app.login_sessions import delete_user_sessions
from memory_app.models import LoginSession
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def log_in(browser: Client, user) -> str:
    response = browser.post(reverse("login"), {"username": user.username, "password": "pw"})
    assert response.status_code == 302
    return browser.session.session_key


def recorded(user) -> set[str]:
    return set(LoginSession.objects.filter(user=user).values_list("session_id", flat=True))


def test_each_login_records_its_session_for_its_user():
    user, other = UserFactory(), UserFactory()
    first, second = log_in(Client(), user), log_in(Client(), user)
    Client().force_login(other)
    assert recorded(user) == {first, second}
    assert len(recorded(other)) == 1


def test_logging_in_again_in_one_browser_keeps_one_record_of_its_current_session():
    user, other = UserFactory(), UserFactory()
    browser = Client()
    key = log_in(browser, user)
    assert log_in(browser, user) == key  # Django keeps the session of the same user
    assert recorded(user) == {key}
    switched = log_in(browser, other)  # another user: Django flushes it, a new key
    assert switched != key
    assert (recorded(user), recorded(other)) == (set(), {switched})


def test_logging_out_deletes_the_session_and_its_record():
    user = UserFactory()
    browser = Client()
    key = log_in(browser, user)
    browser.post(reverse("logout"))
    assert not Session.objects.filter(session_key=key).exists()
    assert recorded(user) == set()


def test_deleting_a_users_sessions_leaves_other_users_sessions():
    user, other = UserFactory(), UserFactory()
    mine = [log_in(Client(), user), log_in(Client(), user)]
    theirs = log_in(Client(), other)
    assert delete_user_sessions(user_id=user.pk) == 2
    assert not Session.objects.filter(session_key__in=mine).exists()
    assert Session.objects.filter(session_key=theirs).exists()
    assert recorded(other) == {theirs}
