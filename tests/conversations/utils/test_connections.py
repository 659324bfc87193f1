import pytest
from django.db import DatabaseError, IntegrityError, connection
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


@pytest.mark.django_db(transaction=True)
def test_a_statement_failing_at_its_first_run_leaves_nothing_prepared_on_the_server() -> None:
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE yuxi_once (id int PRIMARY KEY)")
    try:
        for _ in range(2):
            with pytest.raises(IntegrityError), prepared_cursor() as cursor:
                cursor.execute("INSERT INTO yuxi_once VALUES (%s), (%s)", [1, 1])
            assert not [sql for sql in _prepared_statements() if "yuxi_once" in sql]
        with prepared_cursor() as cursor:
            cursor.execute("INSERT INTO yuxi_once VALUES (%s)", [1])
        assert [sql for sql in _prepared_statements() if "yuxi_once" in sql]
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE yuxi_once")


@pytest.mark.django_db(transaction=True)
def test_a_plan_a_schema_change_made_stale_fails_once_then_runs_again() -> None:
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE yuxi_shape (id int PRIMARY KEY, name varchar(8))")
        cursor.execute("INSERT INTO yuxi_shape VALUES (1, 'a')")
    try:
        with prepared_cursor() as cursor:
            cursor.execute("SELECT name FROM yuxi_shape WHERE id = %s", [1])
        with direct_connection(autocommit=True) as other:
            other.execute("ALTER TABLE yuxi_shape ALTER COLUMN name TYPE text")
        with pytest.raises(DatabaseError, match="cached plan"), prepared_cursor() as cursor:
            cursor.execute("SELECT name FROM yuxi_shape WHERE id = %s", [1])
        with prepared_cursor() as cursor:
            cursor.execute("SELECT name FROM yuxi_shape WHERE id = %s", [1])
            assert cursor.fetchone() == ("a",)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE yuxi_shape")
