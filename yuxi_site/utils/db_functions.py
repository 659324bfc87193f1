"""Moved to `conversations.utils.db_functions` (the database clock, column sizes and prefixes).

This old path forwards to it for one release, with a `DeprecationWarning`.
"""

import conversations.utils.db_functions as _new
from yuxi_site.moved import forward_to

__getattr__ = forward_to(__name__, _new)
