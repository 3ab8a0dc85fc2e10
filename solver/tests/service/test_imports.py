"""No import cycles in clavis.service (issue 15: a core that is easy to change).

Every import a module names, at its top, inside a function or under ``if
TYPE_CHECKING:`` (a type-only import is a dependency too: the HTTP edge names what it
needs of the service in its own protocol, edge.Service, not daemon.Clavisd), is read
from its source with ast. The graph of clavis.service's modules must have no cycle, and
the pure rules (docs/clavisd.md, "Layers") import nothing of the service's edge,
services or state."""

from __future__ import annotations

import ast
from pathlib import Path

import clavis.service

PACKAGE = "clavis.service"
SERVICE = Path(clavis.service.__file__).parent
PURE_RULES = ("classify", "plan", "power", "snapshot", "advice", "replay")
EDGE_AND_STATE = ("api", "reports", "auth", "limits", "schemas", "daemon", "store", "tables",
                  "ingest", "writer", "repack", "maintenance", "agents")  # fmt: skip


def run_imports(source: str, modules: set[str]) -> set[str]:
    """The modules of ``modules`` that ``source`` imports, when it runs or for types."""
    found: set[str] = set()
    todo: list[ast.AST] = [ast.parse(source)]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == PACKAGE:
                found |= {a.name for a in node.names} & modules
            elif node.module.startswith(PACKAGE + "."):
                found.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[2] for a in node.names
                      if a.name.startswith(PACKAGE + ".")}  # fmt: skip
        todo.extend(ast.iter_child_nodes(node))
    return found & modules


def graph() -> dict[str, set[str]]:
    paths = {p.stem: p for p in SERVICE.glob("*.py") if p.stem != "__init__"}
    return {name: run_imports(p.read_text(), set(paths)) - {name} for name, p in paths.items()}


def cycle(g: dict[str, set[str]]) -> list[str]:
    """One cycle of ``g`` as the modules along it, or [] when there is none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(v: str) -> list[str]:
        state[v] = 1
        path.append(v)
        for w in sorted(g[v]):
            if state.get(w) == 1:
                return [*path[path.index(w) :], w]
            if w not in state and (found := visit(w)):
                return found
        state[v] = 2
        path.pop()
        return []

    for v in sorted(g):
        if v not in state and (found := visit(v)):
            return found
    return []


def test_no_import_cycle_in_clavis_service() -> None:
    g = graph()
    assert {"api", "daemon", "store", "ingest", "classify"} <= set(g)
    assert cycle(g) == [], " -> ".join(cycle(g))


def test_pure_rules_import_no_edge_service_or_state() -> None:
    g = graph()
    for rule in PURE_RULES:
        assert g[rule].isdisjoint(EDGE_AND_STATE), (rule, sorted(g[rule] & set(EDGE_AND_STATE)))


def test_the_edge_names_no_composition_root() -> None:
    """api, reports and the routers reach the service through edge.Service; only the
    OpenAPI document's generator (a tool, not a layer) builds a daemon.Clavisd."""
    g = graph()
    assert [m for m, deps in sorted(g.items()) if "daemon" in deps] == ["openapi_doc"]


def test_the_walk_sees_cycles_and_type_only_imports() -> None:
    mods = {"a", "b"}
    src = "if TYPE_CHECKING:\n    from clavis.service.b import X\n"
    assert run_imports(src, mods) == {"b"}
    assert run_imports("def f():\n    from clavis.service import b\n", mods) == {"b"}
    assert run_imports("import clavis.service.a\n", mods) == {"a"}
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) == []
