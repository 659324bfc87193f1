"""Moved to `memory_app.api_edge` (the API's JSON error views).

This old path forwards to it for one release, with a `DeprecationWarning`.
"""

import memory_app.api_edge as _new
from yuxi_site.moved import forward_to

__getattr__ = forward_to(__name__, _new)
