"""The AgentRun row as the repository's own SQL reads it (its table, its columns, an instance
from a raw row), and the key of a turn's checkpoints, found up the run's chain of resumes."""

from collections.abc import Sequence
from functools import cache

from django.db import connection

from conversations.models import AgentRun
from conversations.utils.prepared import instance_from_row

RUN_TABLE = AgentRun._meta.db_table


@cache
def run_fields() -> tuple[str, ...]:
    """The run's column attributes, in the order `columns_of(AgentRun)` selects them."""
    return tuple(field.attname for field in AgentRun._meta.concrete_fields)


def run_from_row(row: Sequence[object]) -> AgentRun:
    """The run of a raw row of its columns."""
    return instance_from_row(AgentRun, row, using=connection.alias)


def checkpoint_key(run: AgentRun) -> str:
    """The key of the checkpoints of `run`'s turn: the `run_id` of the run that started it (a
    resume run, interrupted again, keeps the key of the run it resumes)."""
    while run.resumes_id is not None:
        run = AgentRun.objects.only("run_id", "resumes_id").get(pk=run.resumes_id)
    return str(run.run_id)
