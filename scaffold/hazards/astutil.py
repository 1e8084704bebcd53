"""Small AST helpers: dotted names, import aliases and which functions count as forward scope."""

from __future__ import annotations

import ast

# Names usable without an import in fixtures/snippets; real imports override them.
DEFAULT_ALIASES = {"F": "torch.nn.functional", "nn": "torch.nn"}
TOO_DEEP = "<expression nested too deeply>"
MAX_CODE = 200  # characters of source shown per hazard (code field, expressions in messages)


def clip(text: str, limit: int = MAX_CODE) -> str:
    """``text``, cut to ``limit`` characters with ``...``: one long line cannot flood a report."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def code(node: ast.AST) -> str:
    """``ast.unparse(node)`` (clipped) for messages; ``TOO_DEEP`` where the recursive unparser
    runs out of stack on an expression the parser accepted."""
    try:
        return clip(ast.unparse(node))
    except RecursionError:
        return TOO_DEEP


def dotted(node: ast.AST) -> str | None:
    """``torch.nn.functional.dropout`` for an Attribute/Name chain, else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def import_aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> fully qualified module/object name, from every import in the file."""
    aliases = dict(DEFAULT_ALIASES)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    aliases[a.asname] = a.name
                else:
                    head = a.name.split(".")[0]
                    aliases[head] = head
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    return aliases


def canonical(func: ast.AST, aliases: dict[str, str]) -> str | None:
    """Dotted name of ``func`` with its first component expanded through import aliases."""
    name = dotted(func)
    if name is None:
        return None
    head, _, rest = name.partition(".")
    if head in aliases:
        head = aliases[head]
    return f"{head}.{rest}" if rest else head


def is_self_attr(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    )


def identifiers(node: ast.AST) -> list[str]:
    """Every Name id and Attribute attr inside ``node``."""
    out: list[str] = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            out.append(sub.id)
        elif isinstance(sub, ast.Attribute):
            out.append(sub.attr)
    return out


def excluded_name(name: str) -> bool:
    low = name.lower()
    return name == "__init__" or "prefill" in low or low.startswith("test_")


def forward_name(name: str) -> bool:
    """forward, decode, _forward, eager_attention_forward, decode_step ... but not prefill."""
    low = name.lower()
    return not excluded_name(name) and ("forward" in low or "decode" in low)


def forward_functions(tree: ast.Module) -> set[ast.AST]:
    """Function nodes analysed as forward scope.

    Forward-named functions, plus methods of the same class reached from them through
    ``self.method(...)`` calls (transitively), except ``__init__`` and prefill-named methods,
    plus module-level functions they call by name (transitively).
    Nested functions and lambdas inherit the scope of their enclosing function.
    """
    funcs = (ast.FunctionDef, ast.AsyncFunctionDef)
    scope: set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, funcs) and forward_name(node.name):
            scope.add(node)
        if not isinstance(node, ast.ClassDef):
            continue
        methods = {m.name: m for m in node.body if isinstance(m, funcs)}
        todo = [m for m in methods.values() if forward_name(m.name)]
        seen = set(todo)
        while todo:
            for sub in ast.walk(todo.pop()):
                if not (isinstance(sub, ast.Call) and is_self_attr(sub.func)):
                    continue
                target = methods.get(sub.func.attr)
                if target is not None and target not in seen and not excluded_name(target.name):
                    seen.add(target)
                    todo.append(target)
        scope.update(seen)
    # module-level helpers called by name from forward scope (transitively): their body runs
    # in the graph too (a helper doing bincount().tolist() breaks it as surely)
    helpers = {n.name: n for n in tree.body if isinstance(n, funcs) and not excluded_name(n.name)}
    todo = list(scope)
    while todo:
        for sub in ast.walk(todo.pop()):
            if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name):
                target = helpers.get(sub.func.id)
                if target is not None and target not in scope:
                    scope.add(target)
                    todo.append(target)
    return scope
