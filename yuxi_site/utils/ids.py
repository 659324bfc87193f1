"""Moved to `conversations.utils.ids` (the user-id rule).

This old path forwards to it for one release, with a `DeprecationWarning`.
"""

import conversations.utils.ids as _new
from yuxi_site.moved import forward_to

__getattr__ = forward_to(__name__, _new)
