"""`ModelCallLimit`: LangChain's `ModelCallLimitMiddleware` without the two graph nodes.

The upstream middleware checks its limits in a before-model hook and counts in an after-model
hook; `create_agent` makes each hook a node of its own, so every model call took three graph
steps instead of one (about a quarter of an agent's own CPU in a remember turn, measured with
the scripted model). Here the same check and the same count run inside the model call's
wrapper: the limits, the state keys they count in (`run_model_call_count`, reset at each
invocation; `thread_model_call_count`, kept in a checkpoint), the exit behaviours and
`ModelCallLimitExceededError` are upstream's own.
"""

from collections.abc import Awaitable, Callable

from langchain.agents.middleware import (
    AgentMiddleware,
    ModelCallLimitMiddleware,
    ModelRequest,
    ModelResponse,
)
from langchain.agents.middleware.types import ExtendedModelResponse
from langgraph.types import Command

__all__ = ["ModelCallLimit"]


class ModelCallLimit(ModelCallLimitMiddleware):
    """`ModelCallLimitMiddleware(thread_limit=, run_limit=, exit_behavior=)` checked and
    counted around each model call, not in nodes of its own.

    Over a limit with `exit_behavior="error"` the call raises `ModelCallLimitExceededError`
    before the model is asked; with `"end"` the agent ends on upstream's limit message instead
    of the model's reply. Otherwise the model is called and the call counted in the state.
    """

    # The upstream hooks, taken back: a class that overrides them gets a graph node for each.
    before_model = AgentMiddleware.before_model
    abefore_model = AgentMiddleware.abefore_model
    after_model = AgentMiddleware.after_model
    aafter_model = AgentMiddleware.aafter_model

    def _over_limit(self, request: ModelRequest) -> ModelResponse | None:
        """Upstream's check for this call: raises, or the response that ends the agent, or
        None when the model may be called."""
        ended = ModelCallLimitMiddleware.before_model(self, request.state, request.runtime)
        return None if ended is None else ModelResponse(result=ended["messages"])

    def _counted(self, request: ModelRequest, response: ModelResponse) -> ExtendedModelResponse:
        """The model's response, with this call counted in the state (upstream's counts)."""
        counts = ModelCallLimitMiddleware.after_model(self, request.state, request.runtime)
        return ExtendedModelResponse(model_response=response, command=Command(update=counts))

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ModelResponse | ExtendedModelResponse:
        return self._over_limit(request) or self._counted(request, handler(request))

    async def awrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], Awaitable[ModelResponse]],
    ) -> ModelResponse | ExtendedModelResponse:
        return self._over_limit(request) or self._counted(request, await handler(request))
