"""The admin: every model read-only, without bulk actions."""

import pytest
from django.contrib import admin
from django.test import RequestFactory

from conversations.models import AgentRun, Conversation, Message, ToolCall
from memory_app.models import UserConfig
from tests.factories import StaffUserFactory


@pytest.mark.django_db
@pytest.mark.parametrize("model", [Conversation, Message, ToolCall, AgentRun, UserConfig])
def test_every_model_has_a_read_only_admin_without_bulk_actions(model):
    model_admin = admin.site._registry[model]
    request = RequestFactory().get("/admin/")
    request.user = StaffUserFactory()
    assert not model_admin.has_add_permission(request)
    assert not model_admin.has_change_permission(request)
    assert not model_admin.has_delete_permission(request)
    assert not model_admin.get_actions(request)
