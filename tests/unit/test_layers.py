"""The layers of ``memoryd.layers`` hold: read from the source, every import of the
package (module level, inside functions, under ``if TYPE_CHECKING:``) stays in its
layer or goes down, and no modules import each other in a circle."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import memoryd
from memoryd.layers import LAYERS, THIN, THIN_LAYERS

PACKAGE = Path(memoryd.__file__).parent
MIGRATIONS = PACKAGE / "db" / "migrations"  # run by Alembic, never imported by memoryd


@dataclass(frozen=True)
class Import:
    source: str
    target: str
    line: int
    kind: str  # "module", "function" or "type-checking"

    def __str__(self) -> str:
        return f"{self.source}:{self.line} -> {self.target} ({self.kind})"


def module_names() -> dict[str, Path]:
    names = {}
    for path in PACKAGE.rglob("*.py"):
        if MIGRATIONS in path.parents:
            continue
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


MODULES = module_names()


def owning_module(name: str) -> str | None:
    """The memoryd module an imported name loads (``memoryd.a.b.C`` -> ``memoryd.a.b``)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


class _Imports(ast.NodeVisitor):
    def __init__(self, module: str) -> None:
        self.module = module
        self.package = module if MODULES[module].name == "__init__.py" else \
            module.rpartition(".")[0]
        self.found: list[Import] = []
        self._functions = 0
        self._type_checking = 0

    def _add(self, name: str, line: int) -> None:
        target = owning_module(name)
        if target is None or target == self.module:
            return
        kind = ("type-checking" if self._type_checking
                else "function" if self._functions else "module")
        self.found.append(Import(self.module, target, line, kind))

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        if getattr(test, "id", None) == "TYPE_CHECKING" or \
                getattr(test, "attr", None) == "TYPE_CHECKING":
            self._type_checking += 1
            for child in node.body:
                self.visit(child)
            self._type_checking -= 1
            for child in node.orelse:
                self.visit(child)
        else:
            self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self._functions += 1
        self.generic_visit(node)
        self._functions -= 1

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name, node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = node.module or ""
        if node.level:
            parts = self.package.split(".")
            parts = parts[:len(parts) - node.level + 1]
            base = ".".join([*parts, base] if base else parts)
        for alias in node.names:  # ``from memoryd.a import b`` may load module ``a.b``
            self._add(f"{base}.{alias.name}", node.lineno)


def imports() -> list[Import]:
    found = []
    for module, path in MODULES.items():
        visitor = _Imports(module)
        visitor.visit(ast.parse(path.read_text(), str(path)))
        found.extend(visitor.found)
    return found


IMPORTS = list(dict.fromkeys(imports()))  # one per source line and target


def layer_of(module: str) -> int | None:
    """The index in ``LAYERS`` of the most specific entry naming ``module``."""
    best: tuple[int, int] | None = None
    for index, (_, entries) in enumerate(LAYERS):
        for entry in entries:
            exact = module == entry
            under = entry != "memoryd" and module.startswith(entry + ".")
            if (exact or under) and (best is None or len(entry) > best[0]):
                best = (len(entry), index)
    return None if best is None else best[1]


def cycles(edges: list[Import]) -> Iterator[list[str]]:
    """Each strongly connected component of more than one module (Tarjan's algorithm)."""
    graph: dict[str, set[str]] = {module: set() for module in MODULES}
    for edge in edges:
        graph[edge.source].add(edge.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()

    def visit(node: str) -> Iterator[list[str]]:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                yield from visit(nxt)
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
                yield sorted(component)

    for module in sorted(graph):
        if module not in index:
            yield from visit(module)


def _describe(component: list[str], edges: list[Import]) -> str:
    inside = [str(e) for e in edges if e.source in component and e.target in component]
    return "\n  ".join([" <-> ".join(component), *inside])


def test_every_module_of_memoryd_belongs_to_a_layer() -> None:
    assert [module for module in MODULES if layer_of(module) is None] == []


def test_no_import_goes_up_the_layer_order() -> None:
    upward = [edge for edge in IMPORTS
              if (layer_of(edge.target) or 0) > (layer_of(edge.source) or 0)]
    names = [name for name, _ in LAYERS]
    assert not upward, "imports up the layers:\n" + "\n".join(
        f"{edge}: {names[layer_of(edge.source) or 0]} -> {names[layer_of(edge.target) or 0]}"
        for edge in upward)


@pytest.mark.parametrize("counted", [("module", "function"),
                                     ("module", "function", "type-checking")],
                         ids=["at-run-time", "with-type-checking-imports"])
def test_no_modules_import_each_other_in_a_circle(counted: tuple[str, ...]) -> None:
    edges = [edge for edge in IMPORTS if edge.kind in counted]
    found = [_describe(component, edges) for component in cycles(edges)]
    assert not found, "import cycles:\n" + "\n".join(found)


def test_the_thin_client_and_the_adapters_load_nothing_of_the_server() -> None:
    runtime: dict[str, set[str]] = {}
    for edge in IMPORTS:
        if edge.kind != "type-checking":
            runtime.setdefault(edge.source, set()).add(edge.target)
    thin = [m for m in MODULES if any(m == t or m.startswith(t + ".") for t in THIN)]
    loaded, todo = set(thin), list(thin)
    while todo:
        for target in runtime.get(todo.pop(), ()):
            if target not in loaded:
                loaded.add(target)
                todo.append(target)
    allowed = {index for index, (name, _) in enumerate(LAYERS) if name in THIN_LAYERS}
    assert sorted(m for m in loaded if layer_of(m) not in allowed) == []


def test_the_reader_sees_the_imports_the_tests_judge() -> None:
    """The graph is read correctly: relative, function-level and TYPE_CHECKING imports
    all count (a reader that missed them would let every layer pass)."""
    seen = {(edge.source, edge.target, edge.kind) for edge in IMPORTS}
    assert ("memoryd.worker", "memoryd.worker.signals", "module") in seen
    assert ("memoryd.cli", "memoryd.cli.services", "function") in seen
    assert any(kind == "type-checking" for _, _, kind in seen)
