"""History search support: pg_trgm and btree_gin, the CJK bigram function, the trigger-filled
`Message.owner_id`, and the per-user search indexes."""

import django.contrib.postgres.indexes
import django.db.models.deletion
import django.db.models.functions.text
from django.contrib.postgres.operations import BtreeGinExtension, TrigramExtension
from django.conf import settings
from django.db import migrations, models

import conversations.models

CJK_BIGRAMS_SQL = r"""
CREATE OR REPLACE FUNCTION yuxi_cjk_bigrams(t text) RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT coalesce(array_agg(DISTINCT substr(run, i, 2)), '{}')
    FROM regexp_split_to_table(t, '[\x01-\u2e7f]+') AS run,
         generate_series(1, char_length(run) - 1) AS i
$$;
"""

# owner_id follows the conversation's user: set on every insert (plain, bulk or COPY) and on
# any update naming conversation_id or owner_id; re-derived when a conversation changes hands.
OWNER_TRIGGERS_SQL = """
CREATE FUNCTION conversations_message_set_owner() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    SELECT c.user_id INTO NEW.owner_id
    FROM conversations_conversation c WHERE c.id = NEW.conversation_id;
    RETURN NEW;
END
$$;
CREATE TRIGGER conversations_message_owner
    BEFORE INSERT OR UPDATE OF conversation_id, owner_id ON conversations_message
    FOR EACH ROW EXECUTE FUNCTION conversations_message_set_owner();

CREATE FUNCTION conversations_conversation_move_owner() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE conversations_message SET owner_id = NEW.user_id WHERE conversation_id = NEW.id;
    RETURN NULL;
END
$$;
CREATE TRIGGER conversations_conversation_owner
    AFTER UPDATE OF user_id ON conversations_conversation
    FOR EACH ROW WHEN (OLD.user_id IS DISTINCT FROM NEW.user_id)
    EXECUTE FUNCTION conversations_conversation_move_owner();

UPDATE conversations_message m SET owner_id = c.user_id
FROM conversations_conversation c WHERE c.id = m.conversation_id;
"""

DROP_OWNER_TRIGGERS_SQL = """
DROP TRIGGER conversations_conversation_owner ON conversations_conversation;
DROP FUNCTION conversations_conversation_move_owner();
DROP TRIGGER conversations_message_owner ON conversations_message;
DROP FUNCTION conversations_message_set_owner();
"""

# The planner ignores expression statistics of partial indexes; these give it the frequency of
# a search pattern, so it walks a user's messages newest first for frequent terms and uses the
# trigram or bigram index for rare ones.
SEARCH_STATISTICS_SQL = """
CREATE STATISTICS conversations_message_upper_content ON (upper(content))
    FROM conversations_message;
CREATE STATISTICS conversations_message_cjk_bigrams ON (yuxi_cjk_bigrams(upper(content)))
    FROM conversations_message;
"""

DROP_SEARCH_STATISTICS_SQL = """
DROP STATISTICS conversations_message_upper_content;
DROP STATISTICS conversations_message_cjk_bigrams;
"""

VISIBLE_MESSAGE = models.Q(("message_type", "text"), ("role__in", ("user", "assistant")))


class Migration(migrations.Migration):
    dependencies = [
        ("conversations", "0001_initial"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        TrigramExtension(),
        BtreeGinExtension(),
        migrations.RunSQL(CJK_BIGRAMS_SQL, "DROP FUNCTION yuxi_cjk_bigrams(text);"),
        migrations.AddField(
            model_name="message",
            name="owner",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                db_index=False,
                editable=False,
                null=True,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.RunSQL(OWNER_TRIGGERS_SQL, DROP_OWNER_TRIGGERS_SQL),
        migrations.RunSQL(SEARCH_STATISTICS_SQL, DROP_SEARCH_STATISTICS_SQL),
        migrations.AddIndex(
            model_name="message",
            index=models.Index(
                condition=VISIBLE_MESSAGE,
                fields=["owner", "-created_at", "-id"],
                name="message_owner_recent_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="message",
            index=django.contrib.postgres.indexes.GinIndex(
                models.F("owner"),
                django.contrib.postgres.indexes.OpClass(
                    django.db.models.functions.text.Upper("content"), name="gin_trgm_ops"
                ),
                condition=VISIBLE_MESSAGE,
                name="message_owner_trgm_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="message",
            index=django.contrib.postgres.indexes.GinIndex(
                models.F("owner"),
                conversations.models.CjkBigrams(django.db.models.functions.text.Upper("content")),
                condition=VISIBLE_MESSAGE,
                name="message_owner_bigram_idx",
            ),
        ),
    ]
