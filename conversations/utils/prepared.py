"""`PreparedQuery`: a queryset compiled to SQL once, then run with new parameter values.

Django compiles a queryset's SQL anew every time it runs. For the few queries every chat turn
sends (the thread's entry check, its recent dialogue), building and compiling them costs more
CPU than the database spends answering them. A `PreparedQuery` builds its queryset once, from
the same ORM code that states the query's rules (so those keep one owner), with a placeholder
value for each parameter; compiles it; and then runs that SQL with each call's values in the
placeholders' places (through `prepared_cursor`, so PostgreSQL plans it once per connection
too), turning the rows into what the queryset itself would give (model instances with their
annotations, or `values()` dicts), through the compiler's own converters.

`columns_of` and `instance_from_row` do the same for a raw statement's rows: a model's columns
in field order as select-list SQL, and the instance the ORM would load from such a row.

A placeholder must reach the SQL as a parameter of its own, unchanged (an int, a string, an
aware datetime: a value the ORM passes through as it is) and equal to no other parameter of
the query; compiling refuses one that does not (`ImproperlyConfigured`). A call's values must
be of the placeholders' types: they go to the database as given, without the ORM's conversion.
"""

import functools
import threading
from collections.abc import Callable, Sequence
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from django.db.models import Model, QuerySet
from django.db.models.query import ModelIterable, ValuesIterable

from conversations.utils.connections import prepared_cursor


def columns_of(model: type[Model], *, table: str = "") -> str:
    """Every column of `model` in its fields' order (as `instance_from_row` takes them), as
    select-list SQL qualified by `table` if given: a raw statement's `RETURNING` or `SELECT`."""
    prefix = f"{table}." if table else ""
    return ", ".join(f'{prefix}"{field.column}"' for field in model._meta.concrete_fields)


def instance_from_row(model: type[Model], row: Sequence[object], *, using: str) -> Model:
    """The `model` instance a row of `columns_of(model)` holds, as the ORM loads one from
    database `using` (each field's own conversion of its value applied: a JSON field's
    text decoded)."""
    names, converters = _loading(model, using)
    database = connections[using]
    values = list(row)
    for index, convert in converters:
        values[index] = convert(values[index], None, database)
    return model.from_db(using, names, values)


@functools.cache
def _loading(model: type[Model], using: str) -> tuple[list[str], list[tuple[int, Callable]]]:
    """How `instance_from_row` loads `model`: its fields' names in column order, and the
    position and converter of each field that has one (read once per model and database)."""
    fields = model._meta.concrete_fields
    converters = [
        (index, convert)
        for index, field in enumerate(fields)
        for convert in field.get_db_converters(connections[using])
    ]
    return [field.attname for field in fields], converters


class _Compiled:
    """A queryset's compiled SQL, its parameters, where each placeholder goes in them, and how
    rows become results."""

    def __init__(self, queryset: QuerySet, placeholders: dict[str, object]) -> None:
        if queryset._iterable_class not in (ModelIterable, ValuesIterable):
            raise ImproperlyConfigured("only model and values() querysets can be prepared")
        self.db = queryset.db
        self.compiler = queryset.query.get_compiler(using=self.db)
        self.sql, params = self.compiler.as_sql()
        self.params = list(params)
        self.slots: dict[str, list[int]] = {}
        for name, value in placeholders.items():
            found = [
                index
                for index, param in enumerate(self.params)
                if type(param) is type(value) and param == value
            ]
            if not found:
                raise ImproperlyConfigured(f"placeholder {name!r} is not a parameter of the SQL")
            self.slots[name] = found
        self.as_values = queryset._iterable_class is ValuesIterable
        query = queryset.query
        self.names = [*query.extra_select, *query.values_select, *query.annotation_select]

    def run(self, values: dict[str, object]) -> list[Any]:
        if values.keys() != self.slots.keys():
            raise TypeError(f"a prepared query takes exactly {sorted(self.slots)}")
        params = list(self.params)
        for name, indices in self.slots.items():
            for index in indices:
                params[index] = values[name]
        with prepared_cursor(self.db) as cursor:
            cursor.execute(self.sql, params)
            rows = cursor.fetchall()
        if self.compiler.has_extra_select:  # columns selected only to order by
            rows = [row[: self.compiler.col_count] for row in rows]
        converted = self.compiler.results_iter(results=[rows])
        if self.as_values:
            return [dict(zip(self.names, row, strict=True)) for row in converted]
        return [self._instance(row) for row in converted]

    def _instance(self, row: tuple) -> Model:
        """What `ModelIterable` makes of one row: the model from its fields, then each
        annotation as an attribute."""
        compiler = self.compiler
        fields = compiler.klass_info["select_fields"]
        start, end = fields[0], fields[-1] + 1
        names = [column[0].target.attname for column in compiler.select[start:end]]
        instance = compiler.klass_info["model"].from_db(self.db, names, row[start:end])
        for name, position in compiler.annotation_col_map.items():
            setattr(instance, name, row[position])
        return instance


class PreparedQuery:
    """`build(**placeholders)` compiled once (at the first call, on its database), run with
    each call's values: `PreparedQuery(build, user_id=-7_123_456_789)(user_id=5)` gives what
    `list(build(user_id=5))` gives."""

    def __init__(self, build: Callable[..., QuerySet], **placeholders: object) -> None:
        self._build = build
        self._placeholders = placeholders
        self._compiled: _Compiled | None = None
        self._lock = threading.Lock()

    def __call__(self, **values: object) -> list[Any]:
        compiled = self._compiled
        if compiled is None:
            with self._lock:
                if self._compiled is None:
                    built = self._build(**self._placeholders)
                    self._compiled = _Compiled(built, self._placeholders)
                compiled = self._compiled
        return compiled.run(values)
