"""Old import paths of helpers that moved into the apps (so the apps install without this
site): each old module forwards its names to the new one for one release, with a
`DeprecationWarning` that names the new path."""

import warnings
from collections.abc import Callable
from types import ModuleType

__all__ = ["forward_to"]


def forward_to(old: str, new: ModuleType) -> Callable[[str], object]:
    """A module-level `__getattr__` for `old` that hands out `new`'s public names."""

    def __getattr__(name: str) -> object:
        if name.startswith("__") or not hasattr(new, name):
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        warnings.warn(
            f"{old}.{name} moved to {new.__name__}.{name}; the old path goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(new, name)

    return __getattr__
