"""The benches' database follows the site's (`DATABASE_URL`), so benches of several checkouts
or CI runs on one PostgreSQL never share one; `BENCH_DATABASE_URL` still chooses outright. The
claimed run the benches hand their tools is one a tool accepts. `--before` loads the repository
of a git revision beside the current one."""

import pytest
from benchenv import bench_database_url, claimed_run_context, repository_at

from conversations import repository
from memory_app.selectors import read_memory_file
from memory_app.services import remember_memory
from tests.factories import memory_user

SHARED = "postgres://ci@db.internal:5433/yuxi_ci_42"


def test_the_bench_database_is_named_after_the_sites():
    assert bench_database_url({"DATABASE_URL": SHARED}) == (
        "postgres://ci@db.internal:5433/yuxi_ci_42_bench"
    )


def test_bench_database_url_chooses_outright():
    env = {"DATABASE_URL": SHARED, "BENCH_DATABASE_URL": "postgres://x@h/mine"}
    assert bench_database_url(env) == "postgres://x@h/mine"


def test_without_either_it_follows_the_sites_default_database():
    assert bench_database_url({}) == "postgres://postgres@127.0.0.1:5432/yuxi_memory_bench"


def test_a_query_string_stays_and_a_url_without_a_database_is_refused():
    url = "postgres://u:p@h:5432/site?sslmode=require"
    assert bench_database_url({"DATABASE_URL": url}) == (
        "postgres://u:p@h:5432/site_bench?sslmode=require"
    )
    with pytest.raises(SystemExit, match="BENCH_DATABASE_URL"):
        bench_database_url({"DATABASE_URL": "postgres://u@h:5432/"})


@pytest.mark.django_db
def test_a_claimed_run_context_is_one_a_tool_may_write_memory_with():
    user = memory_user()
    ctx = claimed_run_context(user, prefix="bench-test", name="one")
    assert (ctx.uid, ctx.thread_id, ctx.worker_id) == (str(user.pk), "bench-test-one", "worker-one")
    remember_memory(ctx, "prefers the aisle seat")
    assert "prefers the aisle seat" in read_memory_file(user=user).text


def test_a_revisions_repository_loads_beside_the_current_one():
    loaded = repository_at("HEAD")
    assert loaded is not repository
    assert callable(loaded.search_thread_messages) and callable(loaded.read_thread_messages)
    # Today's package is back in place for the code that imports it.
    from conversations import repository as again

    assert again is repository
