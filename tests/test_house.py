"""The house rules of server/ (issue 8), read from the source: no import cycle between its
modules (lazy imports inside functions count; `if TYPE_CHECKING:` imports do not, they never
run), no private name (`_x`) used outside the module that defines it, and modules under the
size the house keeps (~400 lines)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "server"
MAX_LINES = 400


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def runtime_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import that can run: at the top, in functions, anywhere but under TYPE_CHECKING."""
    found: list[ast.Import | ast.ImportFrom] = []
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        children = list(ast.iter_child_nodes(node))
        if _type_checking(node):
            children = list(node.orelse)  # type: ignore[attr-defined]
        todo.extend(children)
    return found


def targets(module: str, node: ast.Import | ast.ImportFrom) -> list[tuple[str, str | None]]:
    """(module imported, name imported from it) for one import statement."""
    if isinstance(node, ast.Import):
        return [(alias.name, None) for alias in node.names]
    if node.level:
        base = module.split(".")
        path = MODULES.get(module)
        if path is None or path.name != "__init__.py":
            base = base[:-1]
        base = base[:len(base) - (node.level - 1)]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    return [(source, alias.name) for alias in node.names]


def import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        deps: set[str] = set()
        for node in runtime_imports(ast.parse(path.read_text())):
            for source, name in targets(module, node):
                if name and f"{source}.{name}" in MODULES:
                    deps.add(f"{source}.{name}")  # `from . import x`: the module x
                elif source in MODULES:
                    deps.add(source)
        graph[module] = deps - {module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_in_server() -> None:
    graph = import_graph()
    assert len(graph) > 50 and "server.core.turns" in graph["server.core.merge"]
    assert cycles(graph) == []


def defined_names(tree: ast.AST) -> set[str]:
    """Names a module defines: functions, classes, assigned names and attributes, arguments."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            out.add(node.attr)
        elif isinstance(node, ast.arg):
            out.add(node.arg)
    return out


def private_uses(source: str, module: str) -> list[str]:
    """`line: what` for each private name of another module used here."""
    tree = ast.parse(source)
    mine = defined_names(tree)
    out = []
    for node in runtime_imports(tree):
        for src, name in targets(module, node):
            if name and name.startswith("_") and not name.startswith("__"):
                out.append(f"{node.lineno}: imports {name} from {src}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") \
                and not node.attr.startswith("__") and node.attr not in mine:
            out.append(f"{node.lineno}: uses .{node.attr}")
    return sorted(out, key=lambda use: int(use.split(":", 1)[0]))


def test_the_private_name_finder_sees_imports_and_attributes() -> None:
    source = ("from .git_session import _nest\nfrom . import _x\nx = git._subtree\n"
              "self._mine = 1\ny = self._mine\n")
    found = private_uses(source, "server.core.turns")
    assert found == ["1: imports _nest from server.core.git_session",
                     "2: imports _x from server.core", "3: uses ._subtree"]


def test_no_private_name_used_outside_its_module() -> None:
    found = [f"{path.relative_to(ROOT)}:{use}" for module, path in MODULES.items()
             for use in private_uses(path.read_text(), module)]
    assert found == []


def test_modules_stay_under_the_house_size() -> None:
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in MODULES.values()}
    assert {path: n for path, n in sizes.items() if n > MAX_LINES} == {}
