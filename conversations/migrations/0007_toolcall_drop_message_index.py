import django.db.models.deletion
from django.db import migrations, models

# The foreign key's own index duplicates the head of `toolcall_msg_idx` (message, created_at,
# id). Only the index is dropped: Django's AlterField would also drop and re-add the foreign
# key, which re-checks every tool call against Message while holding both tables' locks.
INDEX = "conversations_toolcall_message_id_3394f62c"


class Migration(migrations.Migration):
    dependencies = [
        ("conversations", "0006_admin_indexes"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="toolcall",
                    name="message",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="tool_calls",
                        to="conversations.message",
                    ),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    sql=f'DROP INDEX IF EXISTS "{INDEX}"',
                    reverse_sql=(
                        f'CREATE INDEX IF NOT EXISTS "{INDEX}" '
                        'ON "conversations_toolcall" ("message_id")'
                    ),
                ),
            ],
        ),
    ]
