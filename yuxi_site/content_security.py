"""The Content-Security-Policy on every response, error pages under `DEBUG` included.

django-csp leaves Django's 404 and 500 pages without the header while `DEBUG` is on (its
debug pages use inline styles and scripts). Here every HTML page carries the policy, whatever
`DEBUG` says: under `DEBUG` Django's own error pages then show unstyled, which is the price of
a development server that answers like production.
"""

from dataclasses import asdict

from csp.constants import HEADER
from csp.middleware import CSPMiddleware
from csp.utils import build_policy
from django.http import HttpRequest
from django.http.response import HttpResponseBase

__all__ = ["PolicyOnEveryResponseMiddleware"]


class PolicyOnEveryResponseMiddleware(CSPMiddleware):
    """django-csp's middleware, without its exemption of error pages under `DEBUG`."""

    def process_response(
        self, request: HttpRequest, response: HttpResponseBase
    ) -> HttpResponseBase:
        response = super().process_response(request, response)
        if HEADER not in response and not getattr(response, "_csp_exempt", False):
            parts = self.get_policy_parts(request=request, response=response)
            policy = build_policy(**asdict(parts))
            if policy:
                response[HEADER] = policy
        return response
