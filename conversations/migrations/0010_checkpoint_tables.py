"""The LangGraph checkpoint tables (`langgraph-checkpoint-postgres`), in the default schema.

`PostgresSaver.setup()` creates them with `CREATE INDEX CONCURRENTLY`, which can run neither
in a transaction nor while this session holds one open: so this migration is not atomic, and
`setup()` runs on an autocommit connection of its own built from the migration connection's
settings (the test database's too).
"""

from django.db import migrations

from conversations.checkpoints import drop_checkpoint_tables, setup_checkpoint_tables


def create_tables(apps, schema_editor):
    setup_checkpoint_tables(schema_editor.connection.settings_dict)


def drop_tables(apps, schema_editor):
    drop_checkpoint_tables(schema_editor.connection.settings_dict)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("conversations", "0009_run_resumes_and_interrupted")]

    operations = [migrations.RunPython(create_tables, drop_tables, elidable=False)]
