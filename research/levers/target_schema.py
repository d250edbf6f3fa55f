"""The memory-config keys a memsys tree declares, read from its source without running it.

The lever catalogue (research/levers/catalogue.py) is this checkout's schema, but a run evaluates the memsys/ of its
own repo: older when the run is resumed after an upgrade or ``research.repo`` names an older tree, or edited
by the researcher. The trusted side must not import that code, so the keys are read from the syntax tree
of its ``memsys/config.py``: each annotated field of ``MemoryConfig``, and of every config class a field is
annotated with, recursively. Nothing is executed; a tree that does not parse, or whose schema lives
elsewhere, gives None (nothing is then known to be absent).
"""

from __future__ import annotations

import ast

CONFIG_SOURCE = "memsys/config.py"
ROOT_CLASS = "MemoryConfig"


def _annotation_name(node: ast.expr) -> str | None:
    """``AnswerConfig``, ``"AnswerConfig"`` or ``mod.AnswerConfig`` -> "AnswerConfig"; else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.rsplit(".", 1)[-1].strip()
    return None


def schema_paths(source: str, root: str = ROOT_CLASS) -> set[str] | None:
    """Every dotted key of ``root`` as the source declares it (inner nodes included), or None."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    if root not in classes:
        return None
    paths: set[str] = set()

    def walk(name: str, prefix: str, seen: tuple[str, ...]) -> None:
        for stmt in classes[name].body:
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                continue
            if _annotation_name(stmt.annotation) == "ClassVar" or (
                    isinstance(stmt.annotation, ast.Subscript) and _annotation_name(stmt.annotation.value) == "ClassVar"):
                continue
            path = prefix + stmt.target.id
            paths.add(path)
            inner = _annotation_name(stmt.annotation)
            if inner in classes and inner not in seen:
                walk(inner, path + ".", (*seen, inner))

    walk(root, "", (root,))
    return paths
