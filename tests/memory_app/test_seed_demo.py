import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from conversations.models import AgentRun, Conversation, Message, ToolCall
from memory_app.models import UserConfig

pytestmark = pytest.mark.django_db


def test_seed_demo_covers_every_kind_of_record_and_is_idempotent():
    call_command("seed_demo")
    call_command("seed_demo")
    assert set(Conversation.objects.values_list("status", flat=True)) == set(
        Conversation.Status.values
    )
    assert set(Conversation.objects.values_list("source", flat=True)) == set(
        Conversation.Source.values
    )
    assert Conversation.objects.filter(parent__isnull=False).count() == 1
    assert set(Message.objects.values_list("role", flat=True)) == set(Message.Role.values)
    assert set(Message.objects.values_list("message_type", flat=True)) == set(Message.Type.values)
    assert ToolCall.objects.count() == 1
    assert AgentRun.objects.filter(parent_run__isnull=False).count() == 1
    assert set(UserConfig.objects.values_list("enable_memory", flat=True)) == {True, False}
    staff = get_user_model().objects.get(username="admin")
    assert staff.is_staff and staff.check_password("yuxi-admin")
