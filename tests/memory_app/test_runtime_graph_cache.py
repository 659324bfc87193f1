"""`CompiledGraphs`: compiled once per key, the least recently used dropped past its size."""

import threading
import time

import pytest

from memory_app.runtime.graph_cache import CompiledGraphs


def counting_compile(made: list[str], name: str, *, seconds: float = 0.0):
    def compile_graph() -> str:
        time.sleep(seconds)
        made.append(name)
        return f"graph {name}"

    return compile_graph


def test_a_key_seen_before_gets_its_graph_without_a_compile():
    graphs, made = CompiledGraphs[str](size=4), []
    assert graphs.get("a", counting_compile(made, "a")) == "graph a"
    assert graphs.get("a", counting_compile(made, "a again")) == "graph a"
    assert made == ["a"]


def test_past_its_size_the_least_recently_used_graph_is_dropped():
    graphs, made = CompiledGraphs[str](size=2), []
    graphs.get("a", counting_compile(made, "a"))
    graphs.get("b", counting_compile(made, "b"))
    graphs.get("a", counting_compile(made, "unused"))  # "a" is now the more recent
    graphs.get("c", counting_compile(made, "c"))  # drops "b"
    assert len(graphs) == 2
    graphs.get("a", counting_compile(made, "unused"))
    graphs.get("b", counting_compile(made, "b"))  # compiled anew
    assert made == ["a", "b", "c", "b"]


def test_callers_asking_for_one_key_at_once_share_its_one_compile():
    graphs, made = CompiledGraphs[str](size=4), []
    start = threading.Barrier(8)
    got: list[str] = []

    def ask() -> None:
        start.wait()
        got.append(graphs.get("a", counting_compile(made, "a", seconds=0.2)))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert made == ["a"]
    assert got == ["graph a"] * 8


def test_a_failed_compile_keeps_nothing_and_the_next_caller_compiles_anew():
    graphs, made = CompiledGraphs[str](size=4), []

    def failing() -> str:
        raise LookupError("no such model")

    with pytest.raises(LookupError):
        graphs.get("a", failing)
    assert len(graphs) == 0
    assert graphs.get("a", counting_compile(made, "a")) == "graph a"
    assert made == ["a"]
