"""yuxi_utc_iso: a timestamp as the history tools show it, formatted by PostgreSQL.

The text equals Python's `isoformat()` of the UTC datetime: microseconds only when there are
any, then `+00:00`. Formatting in the statements spares the client a Python call per message.
STABLE (as `to_char` is) and a single expression, so the planner inlines it.
"""

from django.db import migrations

UTC_ISO_SQL = r"""
CREATE OR REPLACE FUNCTION yuxi_utc_iso(t timestamptz) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT replace(to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US'), '.000000', '')
           || '+00:00'
$$;
"""


class Migration(migrations.Migration):
    dependencies = [("conversations", "0007_toolcall_drop_message_index")]

    operations = [migrations.RunSQL(UTC_ISO_SQL, "DROP FUNCTION yuxi_utc_iso(timestamptz);")]
