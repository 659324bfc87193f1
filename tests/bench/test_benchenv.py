"""The benches' database follows the site's (`DATABASE_URL`), so benches of several checkouts
or CI runs on one PostgreSQL never share one; `BENCH_DATABASE_URL` still chooses outright."""

import pytest
from benchenv import bench_database_url

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
