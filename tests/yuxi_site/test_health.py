import pytest
from django.core.management import call_command
from django.test import Client

from tests.database import unreachable_database


@pytest.mark.django_db
def test_healthz_answers_ok_after_a_database_round_trip():
    response = Client().get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"database": "ok"}


@pytest.mark.django_db(transaction=True)
def test_healthz_answers_503_while_the_database_is_unreachable_and_recovers():
    client = Client()
    with unreachable_database():
        response = client.get("/healthz")
        assert response.status_code == 503
        assert response["Content-Type"] == "application/json"
        assert response.json() == {"database": "unavailable"}
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
