import pytest
from django.db import connection

from conversations.utils.connections import direct_connection


@pytest.mark.django_db
def test_direct_connection_reaches_the_default_database_on_its_own_backend() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_database(), pg_backend_pid()")
        database, django_pid = cursor.fetchone()

    with direct_connection(autocommit=True, application_name="yuxi-test") as conn:
        row = conn.execute(
            "SELECT current_database(), pg_backend_pid(), current_setting('application_name')"
        ).fetchone()

    assert row[0] == database
    assert row[1] != django_pid
    assert row[2] == "yuxi-test"
    assert conn.closed
