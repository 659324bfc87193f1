"""The conversations app's configuration (label `conversations`)."""

from django.apps import AppConfig
from django.contrib.postgres.indexes import OpClass
from django.db.models import OrderBy
from django.db.models.functions import Collate
from django.db.models.indexes import IndexExpression


class ConversationsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "conversations"

    def ready(self) -> None:
        # The history search indexes put an operator class on an expression (`gin_trgm_ops` on
        # `UPPER(content)`); Django writes that as valid SQL only once `OpClass` is a
        # registered index wrapper, which `django.contrib.postgres` does in its own `ready()`.
        # Registered here too, so a host needs not install that app (the same call, so either
        # order gives the same result).
        IndexExpression.register_wrappers(OrderBy, OpClass, Collate)
