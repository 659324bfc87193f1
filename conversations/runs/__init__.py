"""AgentRun repository: the owner of trusted run identity and worker leases.

Part by part: a run's start (`starting`: created pending and claimed, or started already
claimed), its leases (`leases`: the one "lease valid" rule, the owner check, renewal) and the
process's lease keeper (`keeper`), its finish (`finishing`), the one run-for-tool check
(`tool_lock`) on the context its tools receive (`context`), failing expired runs and a user's
runs (`reaping`), and the refusals (`errors`).

Every lease decision is judged by PostgreSQL's `clock_timestamp()` at the moment of the
check, never by the caller's clock and never by `now()`, which is frozen at transaction start
and goes stale while a call waits on a lock. The names below are the public ones; code inside
the project imports anything else from the module that owns it.
"""

from conversations.runs.context import ToolRuntimeContext, parse_context
from conversations.runs.finishing import finish_run
from conversations.runs.keeper import lease_keeper
from conversations.runs.leases import check_lease_owner, renew_lease
from conversations.runs.reaping import fail_expired_runs
from conversations.runs.starting import claim_run, create_run, start_run
from conversations.runs.tool_lock import lock_run_for_tool

__all__ = [
    "ToolRuntimeContext",
    "check_lease_owner",
    "claim_run",
    "create_run",
    "fail_expired_runs",
    "finish_run",
    "lease_keeper",
    "lock_run_for_tool",
    "parse_context",
    "renew_lease",
    "start_run",
]
