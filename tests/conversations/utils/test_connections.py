import pytest
from django.db import IntegrityError, connection
from django.test.utils import CaptureQueriesContext

from conversations.utils.connections import direct_connection, prepared_cursor
from conversations.utils.statements import count_statements


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


def _prepared_statements() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


@pytest.mark.django_db
def test_a_prepared_cursor_has_the_server_prepare_its_statement_once_and_restores_the_connection():
    connection.ensure_connection()
    factory, threshold = (
        connection.connection.cursor_factory,
        connection.connection.prepare_threshold,
    )
    for value in (1, 2, 3):
        with prepared_cursor() as cursor:
            cursor.execute("SELECT %s::int + 40", [value])
            assert cursor.fetchone() == (value + 40,)
    assert _prepared_statements().count("SELECT $1::int + 40") == 1
    assert connection.connection.cursor_factory is factory
    assert connection.connection.prepare_threshold == threshold
    # Django's own cursors still bind on the client, and prepare nothing.
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s::int + 50", [1])
    assert not [sql for sql in _prepared_statements() if "+ 50" in sql]


@pytest.mark.django_db
def test_a_prepared_cursor_goes_through_djangos_wrappers_and_error_translation() -> None:
    with count_statements() as counted, prepared_cursor() as cursor:
        cursor.execute("SELECT %s::int", [7])
    assert counted.statements == ["SELECT %s::int"]
    with connection.cursor() as cursor:
        cursor.execute("CREATE TEMP TABLE once (id int PRIMARY KEY)")
    with pytest.raises(IntegrityError), prepared_cursor() as cursor:
        cursor.execute("INSERT INTO once VALUES (%s), (%s)", [1, 1])


@pytest.mark.django_db
def test_with_prepared_statements_off_a_prepared_cursor_prepares_nothing(settings) -> None:
    settings.PREPARED_STATEMENTS = False
    with prepared_cursor() as cursor:
        cursor.execute("SELECT %s::int + 60", [1])
        assert cursor.fetchone() == (61,)
    assert not [sql for sql in _prepared_statements() if "+ 60" in sql]


@pytest.mark.django_db
def test_while_django_logs_queries_a_prepared_cursor_prepares_nothing_and_logs_its_sql() -> None:
    with CaptureQueriesContext(connection) as captured, prepared_cursor() as cursor:
        cursor.execute("SELECT %s::int + 70", [1])
    assert captured[0]["sql"] == "SELECT 1::int + 70"
    assert not [sql for sql in _prepared_statements() if "+ 70" in sql]
