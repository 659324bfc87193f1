import socket

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.django_db
def test_healthz_answers_ok_after_a_database_round_trip():
    response = Client().get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"database": "ok"}


@pytest.mark.django_db(transaction=True)
def test_healthz_answers_503_while_the_database_is_unreachable_and_recovers():
    client = Client()
    saved = dict(connection.settings_dict)
    connection.close()
    connection.settings_dict.update(HOST="127.0.0.1", PORT=str(_closed_port()))
    try:
        response = client.get("/healthz")
        assert response.status_code == 503
        assert response["Content-Type"] == "application/json"
        assert response.json() == {"database": "unavailable"}
    finally:
        connection.close()
        connection.settings_dict.update(saved)
    # Recovered without a restart: the next request connects afresh.
    response = client.get("/healthz")
    assert (response.status_code, response.json()) == (200, {"database": "ok"})


def test_healthz_refuses_a_post():
    assert Client().post("/healthz").status_code == 405


def test_whitenoise_serves_the_admin_static_files_that_collectstatic_gathered(settings, tmp_path):
    settings.STATIC_ROOT = tmp_path
    call_command("collectstatic", interactive=False, verbosity=0)
    response = Client().get("/static/admin/css/base.css")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/css")
    assert b"".join(response.streaming_content).strip()


@pytest.mark.django_db
def test_healthz_is_exempt_from_the_https_redirect(settings):
    settings.SECURE_SSL_REDIRECT = True
    client = Client()
    assert client.get("/healthz").status_code == 200
    redirect = client.get("/admin/")
    assert (redirect.status_code, redirect["Location"]) == (301, "https://testserver/admin/")
