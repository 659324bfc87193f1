"""Moved to `conversations.utils.log_format` (the key=value log lines).

This old path forwards to it for one release, with a `DeprecationWarning`.
"""

import conversations.utils.log_format as _new
from yuxi_site.moved import forward_to

__getattr__ = forward_to(__name__, _new)
