"""`ModelCallLimit`: LangChain's `ModelCallLimitMiddleware` without the two graph nodes.

The upstream middleware checks its limits in a before-model hook and counts in an after-model
hook; `create_agent` makes each hook a node of its own, so every model call took three graph
steps instead of one (about a quarter of an agent's own CPU in a remember turn, measured with
the scripted model). Here the same check and the same count run inside the model call's
wrapper: the limits, the state keys they count in (`run_model_call_count`, reset at each
invocation; `thread_model_call_count`, kept in a checkpoint) and `ModelCallLimitExceededError`
are upstream's own.

Only `exit_behavior="error"` is offered (the default here). Upstream's `"end"` jumps from its
before-model node to the graph's end; a model call's wrapper cannot jump (LangChain refuses a
`Command(goto=...)` there), and answering with the limit message as if the model had said it
is not the same (a structured-output agent would ask the model again and again). Use
upstream's `ModelCallLimitMiddleware` for `"end"`.
"""

from collections.abc import Awaitable, Callable
from typing import Literal

from langchain.agents.middleware import (
    AgentMiddleware,
    ModelCallLimitMiddleware,
    ModelRequest,
    ModelResponse,
)
from langchain.agents.middleware.types import ExtendedModelResponse
from langgraph.types import Command

__all__ = [
    "ModelCallLimit",
]


class ModelCallLimit(ModelCallLimitMiddleware):
    """`ModelCallLimitMiddleware(thread_limit=, run_limit=, exit_behavior="error")` checked
    and counted around each model call, not in nodes of its own.

    Over a limit the call raises `ModelCallLimitExceededError` before the model is asked;
    otherwise the model is called and the call counted in the state. Raises `ValueError` for
    an `exit_behavior` other than `"error"` (see the module's docstring).
    """

    def __init__(
        self,
        *,
        thread_limit: int | None = None,
        run_limit: int | None = None,
        exit_behavior: Literal["error"] = "error",
    ) -> None:
        if exit_behavior != "error":
            raise ValueError(
                f'ModelCallLimit supports exit_behavior="error" only, not {exit_behavior!r}: '
                "use ModelCallLimitMiddleware for an agent that ends at the limit"
            )
        super().__init__(thread_limit=thread_limit, run_limit=run_limit, exit_behavior="error")

    # The upstream hooks, taken back: a class that overrides them gets a graph node for each.
    before_model = AgentMiddleware.before_model
    abefore_model = AgentMiddleware.abefore_model
    after_model = AgentMiddleware.after_model
    aafter_model = AgentMiddleware.aafter_model

    def _check(self, request: ModelRequest) -> None:
        """Upstream's check for this call: raises `ModelCallLimitExceededError` over a
        limit."""
        ModelCallLimitMiddleware.before_model(self, request.state, request.runtime)

    def _counted(self, request: ModelRequest, response: ModelResponse) -> ExtendedModelResponse:
        """The model's response, with this call counted in the state (upstream's counts)."""
        counts = ModelCallLimitMiddleware.after_model(self, request.state, request.runtime)
        return ExtendedModelResponse(model_response=response, command=Command(update=counts))

    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ExtendedModelResponse:
        self._check(request)
        return self._counted(request, handler(request))

    async def awrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], Awaitable[ModelResponse]],
    ) -> ExtendedModelResponse:
        self._check(request)
        return self._counted(request, await handler(request))
