"""No import cycles in clavis.service (issue 15: a core that is easy to change).

Every import a module runs, at its top or inside a function, is read from its source
with ast; imports under ``if TYPE_CHECKING:`` never run and are left out (the HTTP
edge names the composition root, daemon.Clavisd, in its annotations only). The graph
of clavis.service's modules must have no cycle, and the pure rules (docs/clavisd.md,
"Layers") import nothing of the service's edge, services or state."""

from __future__ import annotations

import ast
from pathlib import Path

import clavis.service

PACKAGE = "clavis.service"
SERVICE = Path(clavis.service.__file__).parent
PURE_RULES = ("classify", "plan", "power", "snapshot", "advice", "replay")
EDGE_AND_STATE = ("api", "reports", "auth", "limits", "schemas", "daemon", "store", "tables",
                  "ingest", "writer", "repack", "maintenance", "agents")  # fmt: skip


def _type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def run_imports(source: str, modules: set[str]) -> set[str]:
    """The modules of ``modules`` that ``source`` imports when it runs."""
    found: set[str] = set()
    todo: list[ast.AST] = [ast.parse(source)]
    while todo:
        node = todo.pop()
        if _type_checking(node):
            assert isinstance(node, ast.If)
            todo.extend(node.orelse)
            continue
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


def test_the_walk_sees_cycles_and_skips_type_checking() -> None:
    mods = {"a", "b"}
    src = "if TYPE_CHECKING:\n    from clavis.service.b import X\n"
    assert run_imports(src, mods) == set()
    assert run_imports("def f():\n    from clavis.service import b\n", mods) == {"b"}
    assert run_imports("import clavis.service.a\n", mods) == {"a"}
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) == []
