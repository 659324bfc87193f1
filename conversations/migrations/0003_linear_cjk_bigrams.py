"""yuxi_cjk_bigrams in linear time.

0002's version cut each pair with `substr(run, i, 2)`, which walks the multibyte text from its
start every time: quadratic, so one long CJK message could stall an insert for minutes. Two
global regex scans (pairs at even and at odd offsets) give the same distinct pairs in one pass
each, so the indexes built with the old function stay valid.
"""

from django.db import migrations

LINEAR_SQL = r"""
CREATE OR REPLACE FUNCTION yuxi_cjk_bigrams(t text) RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT coalesce(array_agg(DISTINCT pair[1]), '{}')
    FROM regexp_split_to_table(t, '[\x01-\u2e7f]+') AS run,
         LATERAL (
             SELECT regexp_matches(run, '..', 'g')
             UNION ALL
             SELECT regexp_matches(substr(run, 2), '..', 'g')
         ) AS pairs(pair)
$$;
"""

QUADRATIC_SQL = r"""
CREATE OR REPLACE FUNCTION yuxi_cjk_bigrams(t text) RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT coalesce(array_agg(DISTINCT substr(run, i, 2)), '{}')
    FROM regexp_split_to_table(t, '[\x01-\u2e7f]+') AS run,
         generate_series(1, char_length(run) - 1) AS i
$$;
"""


class Migration(migrations.Migration):
    dependencies = [("conversations", "0002_message_search")]

    operations = [migrations.RunSQL(LINEAR_SQL, QUADRATIC_SQL)]
