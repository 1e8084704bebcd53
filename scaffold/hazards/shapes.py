"""GM006 helper: sequence lengths read from tensor shapes inside forward and then used as data.

``q_len = hidden_states.size(1)`` alone is harmless (decode is static); it becomes a hazard when
the value drives slicing, ``torch.arange`` or a length/position keyword, i.e. when it is a fact
the seed says to pass in (kv_len, actual_seq_lengths, position_ids).
"""

from __future__ import annotations

import ast
import re

from .astutil import dotted

SEQ_DIMS = (1, -2)
SEQ_VAR_RE = re.compile(r"seq|len|past|kv|cache|token", re.IGNORECASE)
SEQ_KWARG_RE = re.compile(r"seq|len|pos|kv|cache", re.IGNORECASE)


def dim_value(node: ast.AST) -> int | None:
    """``1`` for ``1``, ``-2`` for ``-2`` (any number of unary minus signs), else None."""
    sign = 1
    while isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        sign, node = -sign, node.operand
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return sign * node.value
    return None


def _is_seq_dim(value: ast.AST) -> bool:
    """``x.size(1)``, ``x.size(-2)``, ``x.shape[1]``, ``x.shape[-2]``."""
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
        return (
            value.func.attr == "size"
            and len(value.args) == 1
            and dim_value(value.args[0]) in SEQ_DIMS
        )
    if isinstance(value, ast.Subscript) and isinstance(value.value, ast.Attribute):
        return value.value.attr == "shape" and dim_value(value.slice) in SEQ_DIMS
    return False


def _is_whole_shape(value: ast.AST) -> bool:
    """``x.size()`` or ``x.shape``."""
    if isinstance(value, ast.Attribute):
        return value.attr == "shape"
    return (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and value.func.attr == "size"
        and not value.args
    )


def _names(node: ast.AST | None) -> set[str]:
    if node is None:
        return set()
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _sources(func: ast.AST) -> dict[str, tuple[ast.AST, str]]:
    found: dict[str, tuple[ast.AST, str]] = {}
    for node in ast.walk(func):
        if not isinstance(node, ast.Assign):
            continue
        for t in node.targets:
            if isinstance(t, ast.Name) and _is_seq_dim(node.value):
                found.setdefault(t.id, (t, ast.unparse(node.value)))
            elif isinstance(t, ast.Tuple) and len(t.elts) >= 2 and _is_whole_shape(node.value):
                elt = t.elts[1]
                if isinstance(elt, ast.Name):
                    found.setdefault(elt.id, (elt, f"{ast.unparse(node.value)}[1]"))
    return found


def _uses(func: ast.AST) -> list[tuple[int, str, set[str]]]:
    out: list[tuple[int, str, set[str]]] = []
    for node in ast.walk(func):
        if isinstance(node, ast.Slice):
            parts = (node.lower, node.upper, node.step)
            line = getattr(node, "lineno", 0)
            out.append((line, "a slice bound", set().union(*map(_names, parts))))
        elif isinstance(node, ast.Call):
            name = dotted(node.func) or ""
            if name == "arange" or name.endswith(".arange"):
                out.append((node.lineno, "a torch.arange argument", _names(node)))
            for kw in node.keywords:
                if kw.arg and SEQ_KWARG_RE.search(kw.arg):
                    out.append((node.lineno, f"the `{kw.arg}=` argument", _names(kw.value)))
    return sorted(out, key=lambda u: u[0])


def seq_len_hazards(func: ast.AST) -> list[tuple[ast.AST, str]]:
    """(anchor node, message) for each shape-derived length used as data in ``func``."""
    sources = _sources(func)
    if not sources:
        return []
    uses = _uses(func)
    out: list[tuple[ast.AST, str]] = []
    for name, (anchor, src) in sources.items():
        if not SEQ_VAR_RE.search(name):
            continue
        use = next((u for u in uses if name in u[2] and u[0] >= anchor.lineno), None)
        if use is not None:
            message = (
                f"`{name}` = {src} is computed inside forward and used as {use[1]} "
                f"(line {use[0]}); pass it in"
            )
            out.append((anchor, message))
    return out
