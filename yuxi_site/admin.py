"""Moved to `conversations.admin_base` (the read-only admin base).

This old path forwards to it for one release, with a `DeprecationWarning`.
"""

import conversations.admin_base as _new
from yuxi_site.moved import forward_to

__getattr__ = forward_to(__name__, _new)
