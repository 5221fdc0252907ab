"""No pygit2 call that leaks its name argument outside server/git/lookup.py (issue 11).

pygit2 keeps the name or path given to a tree or reference lookup alive forever (lookup.py's
docstring says why and what leaks): `tree[name]`, `name in tree`, `tree / name`,
`TreeBuilder.get/remove`, `references[...]`, `references.get`, `lookup_reference`,
`create_blob_fromdisk`. lookup.py does each without the leak; this test reads every module
of server/ (its syntax tree, so comments and strings that mention the forms do not count)
and fails on a new leaking call. A tree is known by its name, as the house names them:
`tree`, `*_tree`, `.tree`; a builder by `builder`; a reference table by `references`.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

SERVER = Path(__file__).resolve().parents[2] / "server"
ALLOWED = {SERVER / "git" / "lookup.py"}  # the one place that makes these calls safely
LEAKING_CALLS = {"lookup_reference", "lookup_reference_dwim", "create_blob_fromdisk"}
TREE_NAME = re.compile(r"^(tree|\w+_tree)$")


def _name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _is_tree(node: ast.expr) -> bool:
    name = _name(node)
    return name is not None and bool(TREE_NAME.match(name))


def _by_index(node: ast.expr) -> bool:
    """A subscript by position (`tree[0]`, `tree[i]`), which takes no name."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int)
    if isinstance(node, ast.UnaryOp):
        return _by_index(node.operand)
    return isinstance(node, ast.Name) and node.id in {"i", "j", "k", "mid", "index", "pos"}


def leaking_lines(source: str) -> list[tuple[int, str]]:
    """(line, what) for each leaking call form in `source`."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Subscript):
            if _is_tree(node.value) and not _by_index(node.slice):
                found.append((node.lineno, "tree[name]"))
            elif _name(node.value) == "references":
                found.append((node.lineno, "references[name]"))
        elif isinstance(node, ast.Compare):
            if any(isinstance(op, ast.In | ast.NotIn) for op in node.ops) and \
                    any(_is_tree(c) for c in node.comparators):
                found.append((node.lineno, "name in tree"))
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and \
                _is_tree(node.left):
            found.append((node.lineno, "tree / name"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            method, owner = node.func.attr, _name(node.func.value)
            if method in LEAKING_CALLS:
                found.append((node.lineno, method))
            elif method == "get" and owner == "references":
                found.append((node.lineno, "references.get"))
            elif method in {"get", "remove"} and owner is not None and "builder" in owner:
                found.append((node.lineno, f"TreeBuilder.{method}"))
    return sorted(set(found))


def leaks_under(root: Path, allowed: set[Path] = ALLOWED) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        if path in allowed:
            continue
        for line, what in leaking_lines(path.read_text()):
            out.append(f"{path.relative_to(root.parent)}:{line}: {what}")
    return out


def test_no_leaking_pygit2_calls_in_server() -> None:
    leaks = leaks_under(SERVER)
    assert leaks == [], "use server/git/lookup.py instead:\n" + "\n".join(leaks)


def test_the_check_sees_each_form() -> None:
    """Each form is found (so the test above cannot pass by seeing nothing), and the safe
    ones are not."""
    source = "\n".join([
        "tree['a']", "commit.tree[rel]", "old_tree[name]", "'a' in tree", "x not in b.tree",
        "tree / 'a'", "repo.references['refs/x']", "repo.references.get(n)",
        "repo.lookup_reference(n)", "repo.create_blob_fromdisk(p)", "builder.get(n)",
        "builder.remove(n)",
        # safe forms
        "tree[0]", "tree[mid]", "trees[key]", "tree.id", "for e in tree: pass",
        "repo.lookup_branch(n)", "repo.revparse_single(n)", "index.remove(p)",
        "builder.insert(n, o, m)",
    ])
    assert [line for line, _ in leaking_lines(source)] == list(range(1, 13))
