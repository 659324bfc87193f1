"""Moved to `conversations.utils.string_utils` (text cuts and checks).

This old path forwards to it for one release, with a `DeprecationWarning`.
"""

import conversations.utils.string_utils as _new
from yuxi_site.moved import forward_to

__getattr__ = forward_to(__name__, _new)
