"""`CompiledGraphs`: the process's compiled agent graphs by key, each compiled once.

A compile costs milliseconds (`create_agent` and LangGraph's compile) and a turn of a shape
already seen must cost none, so compiled graphs are kept by key; the least recently used is
dropped past `size`, so a caller that brings a new model object every turn costs a compile per
turn (as a graph built per run would) but never grows the process. Turns that need the same
graph at once wait for one compile rather than each making its own; a compile that fails
leaves nothing behind, so the next turn that needs the graph tries again.

What a key is made of and how a graph is compiled are `graphs`' business; this module only
keeps them.
"""

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

Compiled = TypeVar("Compiled")


class CompiledGraphs(Generic[Compiled]):
    """Compiled graphs by key, at most `size` of them, the least recently used dropped."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._graphs: OrderedDict[Hashable, Compiled] = OrderedDict()
        self._compiling: dict[Hashable, threading.Lock] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._graphs)

    def get(self, key: Hashable, compile_graph: Callable[[], Compiled]) -> Compiled:
        """The graph kept under `key`, made by `compile_graph()` first if there is none (once,
        however many callers ask at the same time; its exception reaches the caller whose
        compile it was, and the next caller compiles anew)."""
        with self._lock:
            if (found := self._found(key)) is not None:
                return found
            compiling = self._compiling.setdefault(key, threading.Lock())
        with compiling:
            with self._lock:
                if (found := self._found(key)) is not None:
                    return found
            try:
                built = compile_graph()
            except BaseException:  # no lock left behind: the next turn tries again
                with self._lock:
                    self._compiling.pop(key, None)
                raise
            with self._lock:
                self._graphs[key] = built
                self._compiling.pop(key, None)  # with the graph in place, in one step
                while len(self._graphs) > self.size:
                    self._graphs.popitem(last=False)
        return built

    def _found(self, key: Hashable) -> Compiled | None:
        """The graph of `key`, marked as just used, if there is one (under `_lock`)."""
        if key not in self._graphs:
            return None
        self._graphs.move_to_end(key)
        return self._graphs[key]
