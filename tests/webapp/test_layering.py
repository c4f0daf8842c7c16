"""The web apps' floor plan (docs/architecture.md): no import cycle between two parts of ``webapp``.

A part is an app (``webapp/accounts``, ``webapp/jobs``, ...) or a top-level module (``webapp/api.py``,
``webapp/urls.py``, ...). An app that needs what an app above it holds (jobs, resolving a library
item or a watermark key) asks a source that app registered (``webapp/jobs/references.py``) instead
of importing it. Imports inside functions count, as in ``tests/mlcore/test_layering.py``, whose
reader this uses; imports under ``if TYPE_CHECKING:`` only name types and do not.
"""

from __future__ import annotations

from pathlib import Path

import webapp
from tests.mlcore.test_layering import imports_of

PACKAGE = Path(webapp.__file__).parent


def part_of(module: str) -> str | None:
    """``webapp.jobs`` for ``webapp.jobs.api.router``, ``webapp.api`` for ``webapp.api``, ``webapp`` for
    the package's own ``__init__``; ``None`` outside webapp."""
    parts = module.split(".")
    if parts[0] != "webapp":
        return None
    return ".".join(parts[:2])


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def part_graph() -> dict[str, dict[str, set[str]]]:
    """For each part, the parts it imports, each with the modules that import it (for the message)."""
    graph: dict[str, dict[str, set[str]]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = module_name(path)
        here = part_of(name)
        assert here is not None  # every module under webapp/ is part of webapp
        graph.setdefault(here, {})
        for imported in imports_of(path.read_text(), name, is_package=path.name == "__init__.py"):
            there = part_of(imported)
            if there is not None and there != here:
                graph[here].setdefault(there, set()).add(f"{name} imports {imported}")
    return graph


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(found)


def test_the_cycle_finder_finds_a_cycle_through_a_third_part() -> None:
    edges = {"jobs": {"api"}, "api": {"library"}, "library": {"jobs"}, "portal": {"jobs"}}
    assert cycles(edges) == [["api", "jobs", "library"]]
    assert cycles({"jobs": {"accounts"}, "library": {"jobs", "accounts"}}) == []


def test_the_graph_sees_deferred_imports_and_names_the_importer() -> None:
    graph = part_graph()
    # webapp/library/apps.py imports the jobs' reference registry inside ready().
    assert "webapp.library.apps imports webapp.jobs.references" in graph["webapp.library"]["webapp.jobs"]
    assert "webapp.jobs" in graph["webapp.api"] and "webapp.library" in graph["webapp.api"]


def test_no_two_parts_of_the_web_app_import_each_other() -> None:
    graph = part_graph()
    found = cycles({part: set(imported) for part, imported in graph.items()})
    # On failure, say which imports close each cycle.
    detail = {
        " -> ".join(cycle): sorted(why for a in cycle for b in cycle if b in graph.get(a, {}) for why in graph[a][b])
        for cycle in found
    }
    assert detail == {}
