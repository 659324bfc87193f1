"""The host's user model, whatever it is: its name field, who counts as active, and the
erasure fence both apps check.

A host's `AUTH_USER_MODEL` may have no `username`, `first_name`, `last_name`, `email` or
`is_active`: users are named, searched and ordered by `USERNAME_FIELD`, and a user counts as
active when the model has no `is_active` field, or it is true, and no erasure of theirs has
begun (`ErasureFence`, the apps' own per-user row, written by erasure's first commit).
"""

from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Exists, OuterRef, Q

from conversations.models import ErasureFence


def username_field() -> str:
    """The user model's `USERNAME_FIELD` (`username`, `email`, ...)."""
    return get_user_model().USERNAME_FIELD


def has_is_active() -> bool:
    """Whether the user model stores `is_active` (`AbstractBaseUser` only has the attribute)."""
    return any(field.name == "is_active" for field in get_user_model()._meta.concrete_fields)


def user_label(user: Any) -> str:
    """How staff and exports name a user: `get_username()`."""
    return str(user.get_username())


def users_named(term: str) -> list[Any]:
    """Primary keys of the user whose `USERNAME_FIELD` is exactly `term` (its unique index
    serves it)."""
    users = get_user_model().objects.filter(**{username_field(): term})
    return list(users.values_list("pk", flat=True))


def active_user_q(user: str = "user") -> Q:
    """Rows whose user counts as active: `user` is the path to the user ("user",
    "message__owner"), or "" when the rows are users themselves."""
    user_id = f"{user}_id" if user else "pk"
    q = ~Q(Exists(ErasureFence.objects.filter(user_id=OuterRef(user_id))))
    if has_is_active():
        q &= Q(**{f"{user}__is_active" if user else "is_active": True})
    return q


def active_user_sql(user: str) -> str:
    """SQL true when the user `user` names (a placeholder or a column) exists and counts as
    active. `user` appears twice: a placeholder takes its value twice."""
    model = get_user_model()
    active = ' AND "is_active"' if has_is_active() else ""
    return (
        f'(EXISTS (SELECT FROM "{model._meta.db_table}" '
        f'WHERE "{model._meta.pk.column}" = {user}{active}) '
        f'AND NOT EXISTS (SELECT FROM "{ErasureFence._meta.db_table}" WHERE "user_id" = {user}))'
    )
