"""History search: a per-user index of each visible message's words, through which a rare term's
own candidates are found (`conversations.models.ContentWords`).

The index is built concurrently (this migration is not atomic), so a project with many messages
keeps writing them while it builds: about 30 s a million messages on a 2-core machine.
"""

import django.contrib.postgres.indexes
from django.conf import settings
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models

import conversations.models

# Every run of letters or digits a word (`report_2024.pdf` holds `report`, `2024` and `pdf`; an
# e-mail address its parts), of the first 100,000 characters: the largest tsvector that many
# can make is about half of the 1 MB PostgreSQL allows (distinct pairs of 4-byte characters).
WORDS_SQL = r"""
CREATE FUNCTION yuxi_words(t text) RETURNS tsvector
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT to_tsvector('simple'::regconfig,
                       regexp_replace(left(t, 100000), '[^[:alnum:]]+', ' ', 'g'))
$$;
"""

DROP_WORDS_SQL = "DROP FUNCTION yuxi_words(text);"


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("conversations", "0012_erasure_fence"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RunSQL(WORDS_SQL, DROP_WORDS_SQL),
        AddIndexConcurrently(
            model_name="message",
            index=django.contrib.postgres.indexes.GinIndex(
                models.F("owner"),
                conversations.models.ContentWords("content"),
                condition=models.Q(("message_type", "text"), ("role__in", ("user", "assistant"))),
                name="message_owner_words_idx",
            ),
        ),
    ]
