"""The house rules of server/ (issues 8 and 22), read from the source: the layers hold
(`lint-imports`, the contract in pyproject.toml), no import cycle between its modules (lazy
imports inside functions and `if TYPE_CHECKING:` imports count too: a lower layer names a
higher one through a Protocol), no re-export (a name is imported from the module that
defines it), no private name (`_x`) used outside the module that defines it, every package
says what it owns, and no folder holds more than 15 modules."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "server"
MAX_MODULES = 15  # in one folder: more, and the folder hides its layers again


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


def import_graph(finder: Callable[[ast.AST], list[ast.Import | ast.ImportFrom]]
                 ) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        deps: set[str] = set()
        for node in finder(ast.parse(path.read_text())):
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


def all_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import, `if TYPE_CHECKING:` ones too."""
    return [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]


def test_no_import_cycle_in_server() -> None:
    graph = import_graph(all_imports)
    assert len(graph) > 50 and "server.agent.turns" in graph["server.features.merge"]
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
    source = ("from .session import _nest\nfrom . import _x\nx = git._subtree\n"
              "self._mine = 1\ny = self._mine\n")
    found = private_uses(source, "server.git.trees")
    assert found == ["1: imports _nest from server.git.session",
                     "2: imports _x from server.git", "3: uses ._subtree"]


def test_no_private_name_used_outside_its_module() -> None:
    found = [f"{path.relative_to(ROOT)}:{use}" for module, path in MODULES.items()
             for use in private_uses(path.read_text(), module)]
    assert found == []


def test_the_layers_hold() -> None:
    """The `layers` and `forbidden` contracts of pyproject.toml, by import-linter (CI runs it
    too, in scripts/test): each layer imports only the ones below it."""
    command = [str(Path(sys.executable).with_name("lint-imports")), "--no-cache", "--no-logo"]
    out = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-3000:]
    assert "0 broken" in out.stdout and "layers KEPT" in out.stdout


def test_no_folder_holds_more_than_the_house_keeps() -> None:
    folders: dict[str, int] = {}
    for path in MODULES.values():  # __init__.py counts: a module too
        key = str(path.parent.relative_to(ROOT))
        folders[key] = folders.get(key, 0) + 1
    assert len(folders) >= 8
    assert {f: n for f, n in folders.items() if n > MAX_MODULES} == {}


def test_every_package_says_what_it_owns_and_may_import() -> None:
    packages = [p for p in MODULES.values() if p.name == "__init__.py"]
    assert len(packages) >= 8
    for path in packages:
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        assert len(doc) > 80, f"{path.relative_to(ROOT)} has no docstring worth the name"
        if path.parent != PACKAGE:
            assert "import" in doc, f"{path.relative_to(ROOT)} does not say what it may import"


def top_level_names(tree: ast.Module) -> set[str]:
    """What a module defines itself (not what it imports): functions, classes, assignments,
    at the top or in a top-level if/try."""
    out: set[str] = set()
    todo: list[ast.stmt] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets_ = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets_:
                out.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, ast.If | ast.Try):
            todo.extend(node.body + node.orelse + getattr(node, "finalbody", []))
            for handler in getattr(node, "handlers", []):
                todo.extend(handler.body)
    return out


def re_exports(path: Path, module: str) -> list[str]:
    """`line: name from module` for each name imported from a server module that does not
    define it (it only imports it)."""
    out = []
    for node in all_imports(ast.parse(path.read_text())):
        if not isinstance(node, ast.ImportFrom):
            continue
        for source, name in targets(module, node):
            if not source.startswith("server") or name is None or name == "*":
                continue
            if f"{source}.{name}" in MODULES or source not in MODULES:
                continue  # a module of a package, or not ours
            if name not in top_level_names(ast.parse(MODULES[source].read_text())):
                out.append(f"{node.lineno}: {name} from {source}")
    return out


def test_the_re_export_finder_finds_one() -> None:
    assert re_exports(MODULES["server.git.trees"], "server.git.trees") == []
    fake = ROOT / "tests" / "_fake_re_export.py"
    fake.write_text("from server.git.session import Path\nfrom server.git import session\n")
    try:
        assert re_exports(fake, "tests._fake_re_export") == ["1: Path from server.git.session"]
    finally:
        fake.unlink()


def test_no_re_exports() -> None:
    """One name, one home: `from server.X import name` only where X defines name (in
    server/, the tests, benches and browser tests)."""
    files = [*PACKAGE.rglob("*.py"), *(ROOT / "tests").rglob("*.py"),
             *(ROOT / "playwright").rglob("*.py"), *(ROOT / "bench").rglob("*.py"),
             ROOT / "conftest.py"]
    found = [f"{p.relative_to(ROOT)}:{use}" for p in files
             for use in re_exports(p, module_name(p))]
    assert found == []


def test_no_module_declares_a_name_it_does_not_define() -> None:
    """`__all__` lists only what a module defines: a re-export declared is one too."""
    found = []
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
                listed = [e.value for e in getattr(node.value, "elts", [])
                          if isinstance(e, ast.Constant)]
                defined = top_level_names(tree)
                found += [f"{module}: {name}" for name in listed if name not in defined]
    assert found == []


def test_no_two_test_files_share_a_name() -> None:
    # The tests are not packages (pytest's rootdir import): two files of one name in two
    # folders stop the collection of the whole suite.
    seen: dict[str, Path] = {}
    clashes = []
    for path in sorted([*ROOT.glob("tests/**/test_*.py"), *ROOT.glob("playwright/**/test_*.py")]):
        if path.name in seen:
            clashes.append(f"{seen[path.name].relative_to(ROOT)} and {path.relative_to(ROOT)}")
        seen.setdefault(path.name, path)
    assert not clashes, clashes
