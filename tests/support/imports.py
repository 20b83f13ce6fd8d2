"""The package's import graph, read from its source with :mod:`ast` (nothing is imported): which llmtap names
each module imports, from where, and how (at run time, or only for the type checker / inside a function).

``tests/test_public_api.py`` checks two contracts with it: every ``from llmtap.X import name`` takes a name
in X's ``__all__`` (or a submodule of X), and the core imports nothing above it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import llmtap

__all__ = ["SOURCE", "Import", "contract_violations", "cycles", "exported", "imports", "modules"]

SOURCE = Path(llmtap.__file__).parent
"""The installed package's directory (never a path pattern: the clone may be named anything)."""


@dataclass(frozen=True)
class Import:
    """One ``from module import name`` (``name`` ``None``: ``import module``) in ``importer``."""

    importer: str
    module: str
    name: str | None
    line: int
    runtime: bool
    """At module level and outside ``if TYPE_CHECKING:``: executed when the importer is imported."""


def modules(root: Path = SOURCE, package: str = "llmtap") -> dict[str, Path]:
    """Every module under ``root``, by dotted name (a package by its own name, for its ``__init__.py``)."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join([package, *parts])] = path
    return found


def exported(path: Path) -> tuple[str, ...] | None:
    """The names a module's literal ``__all__`` lists (``None``: it has none)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            return tuple(ast.literal_eval(value))
    return None


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(name: str, path: Path, package: str = "llmtap") -> list[Import]:
    """The imports of ``package``'s modules in module ``name`` (at ``path``), each marked run time or not."""
    is_package = path.name == "__init__.py"
    found: list[Import] = []

    def visit(node: ast.AST, runtime: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ImportFrom):
                module = child.module or ""
                if child.level:  # relative: resolved against the importer's package
                    base = name.split(".")
                    base = base if is_package else base[:-1]
                    base = base[: len(base) - child.level + 1]
                    module = ".".join([*base, module] if module else base)
                if module == package or module.startswith(package + "."):
                    found.extend(Import(name, module, alias.name, child.lineno, runtime) for alias in child.names)
            elif isinstance(child, ast.Import):
                found.extend(
                    Import(name, alias.name, None, child.lineno, runtime)
                    for alias in child.names
                    if alias.name == package or alias.name.startswith(package + ".")
                )
            elif isinstance(child, ast.If) and _type_checking(child.test):
                for part in child.body:
                    visit(ast.Module(body=[part], type_ignores=[]), False)
                for part in child.orelse:
                    visit(ast.Module(body=[part], type_ignores=[]), runtime)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(child, False)
            else:
                visit(child, runtime)

    visit(ast.parse(path.read_text()), True)
    return found


def contract_violations(root: Path = SOURCE, package: str = "llmtap") -> list[str]:
    """Every ``from X import name`` of a module under ``root`` whose X is one of its modules, ``name`` not in
    X's ``__all__`` and not a submodule of X: ``"importer:line: from X import name"``."""
    found = modules(root, package)
    bad = []
    for importer, path in found.items():
        for edge in imports(importer, path, package):
            if edge.name is None or edge.module not in found:
                continue
            if f"{edge.module}.{edge.name}" in found:
                continue  # a submodule
            names = exported(found[edge.module]) or ()
            if edge.name not in names:
                bad.append(f"{importer}:{edge.line}: from {edge.module} import {edge.name}")
    return bad


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of a graph (its strongly connected components of more than one module, or a
    module importing itself), each sorted, in sorted order (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(edges.get(node, ())):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in edges.get(node, ()):
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            connect(node)
    return sorted(found)
