"""Moved to `conversations.utils.connections` (connections outside Django's pool, worker threads).

This old path forwards to it for one release, with a `DeprecationWarning`.
"""

import conversations.utils.connections as _new
from yuxi_site.moved import forward_to

__getattr__ = forward_to(__name__, _new)
