"""Every tool name is defined once and is the name its tool is offered and stored under."""

from memory_app import tool_names
from memory_app.runtime.subagent import DelegateToSubagentTool
from memory_app.services.plan import MemoryWriteStatus
from memory_app.tools import ToolStatus, build_memory_tools
from tests.factories import RunningAgentRunFactory, context_for


def test_the_memory_tools_carry_the_defined_names_in_their_fixed_order(db):
    tools = build_memory_tools(context_for(RunningAgentRunFactory()))
    assert tuple(tool.name for tool in tools) == tool_names.MEMORY_TOOL_NAMES
    assert tool_names.MEMORY_TOOL_NAMES == (
        tool_names.REMEMBER_MEMORY_TOOL,
        tool_names.SEARCH_THREAD_MESSAGES_TOOL,
        tool_names.READ_THREAD_MESSAGES_TOOL,
    )


def test_the_subagent_tool_carries_the_defined_name():
    assert DelegateToSubagentTool.model_fields["name"].default == tool_names.SUBAGENT_TOOL_NAME


def test_every_write_status_is_a_tool_status_of_the_same_text():
    assert {ToolStatus(status) for status in MemoryWriteStatus} == {
        ToolStatus.ADDED,
        ToolStatus.UNCHANGED,
        ToolStatus.REPLACED,
    }
