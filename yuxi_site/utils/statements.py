"""Moved to `conversations.utils.statements` (counting SQL statements).

This old path forwards to it for one release, with a `DeprecationWarning`.
"""

import conversations.utils.statements as _new
from yuxi_site.moved import forward_to

__getattr__ = forward_to(__name__, _new)
