"""Check NPU op calls in source files against the installed torch_npu / torchair schemas.

Part of :mod:`scaffold.npu_emulation`; import aliases are resolved with
:mod:`scaffold.hazards.astutil` (the same rules ``ascend-scaffold check`` uses).

:func:`check_npu_calls` parses ``.py`` files with :mod:`ast`, finds every call of
``torch_npu.X(...)``, ``torch.ops.npu.X(...)`` (also ``.default``), ``torchair.ops.X(...)`` and
``torch.ops.air.X(...)`` (aliases from ``import ... as`` and ``from torch_npu import X`` are
followed), resolves the op schema from the installed wheel (``torch.ops.npu.X.default._schema``,
``torch.ops.air.X.default._schema``; plain Python functions via ``inspect.signature``) and reports:

* unknown ops / attributes that the installed wheel does not have;
* keyword names that the schema does not have (note: the first argument of ``npu_rms_norm``,
  ``scatter_update_``, ``npu_scatter_nd_update_``, ``npu_rotary_mul`` is ``input``, not
  ``self``), too many positional arguments, missing required arguments, literal constants whose
  type does not fit the schema type;
* a per-step value passed to an ``int[]`` argument (not ``SymInt[]``): dynamo specialises on
  every element, so a value that changes between steps (e.g. ``npu_prompt_flash_attention(...,
  actual_seq_lengths=lens)``) recompiles every step even with ``dynamic=True``. Values fixed
  when the model is built are fine (:func:`fixed_at_construction`: literals, module constants,
  ``self`` attributes, tensor shapes, and local names assigned only from those, e.g.
  ``active_expert_range=[0, num_experts]`` with ``num_experts = w13.shape[0]``); a function
  parameter, or anything computed from one, may change every step and is flagged;
* literal values the device does not accept (``input_layout``, ``sparse_mode`` of the fused
  attention, ``layout`` / ``rotary_mode`` of the fused rotary; the accepted sets are
  :mod:`scaffold.device_limits`'s for the platform).

Calls through a local name are followed: ``fia = torchair.ops.X if c else torch_npu.X`` (or
``if``/``else`` assignments in the same function) then ``fia(...)`` is checked against every op
the name may hold. Literal values include both arms of a conditional expression
(``sparse_mode=3 if causal else 0``).

torch_npu must be importable: when it is not yet imported, :mod:`scaffold.npu_emulation.emulation`
is activated (CPU stand-ins for CANN).
"""

from __future__ import annotations

import ast
import functools
import inspect
import re
import sys
from collections.abc import Iterator
from pathlib import Path

from scaffold.hazards.astutil import canonical, import_aliases

from . import emulation


def _ensure_torch_npu() -> None:
    if "torch_npu" in sys.modules and "torchair" in sys.modules:
        return
    emulation.activate()
    import torchair.ops._npu_fused_infer_attention_score  # noqa: F401


def _target(func: ast.AST, aliases: dict[str, str]) -> tuple[str, str, str] | None:
    """(namespace, op name, shown name) for an NPU call, else None."""
    name = canonical(func, aliases)
    if name is None:
        return None
    full = tuple(name.split("."))
    if (
        full
        and full[-1] == "default"
        and full[:3] in (("torch", "ops", "npu"), ("torch", "ops", "air"))
    ):
        full = full[:-1]
    shown = ".".join(full)
    if len(full) == 2 and full[0] == "torch_npu":
        return "npu", full[1], shown
    if len(full) == 4 and full[:3] == ("torch", "ops", "npu"):
        return "npu!", full[3], shown
    if len(full) == 4 and full[:3] == ("torch", "ops", "air"):
        return "air!", full[3], shown
    if len(full) == 3 and full[:2] == ("torchair", "ops"):
        return "air", full[2], shown
    return None


def _schemas(ns: str, name: str):
    import torch

    packet_ns = torch.ops.npu if ns.startswith("npu") else torch.ops.air
    try:
        packet = getattr(packet_ns, name)
    except (AttributeError, RuntimeError):
        return None
    return [getattr(packet, o)._schema for o in packet.overloads()]


def _python_callable(ns: str, name: str):
    if ns == "npu":
        import torch_npu

        return getattr(torch_npu, name, None)
    if ns == "air":
        import torchair

        return getattr(torchair.ops, name, None)
    return None


def _declared_types(schema) -> dict[str, str]:
    """Argument name -> declared type as written (keeps SymInt[] vs int[])."""
    text = str(schema)
    args = text[text.index("(") + 1 : text.index(") ->")]
    out = {}
    for a in schema.arguments:
        m = re.search(r"(\S+) " + re.escape(a.name) + r"(?:=|,|$)", args)
        out[a.name] = m.group(1) if m else str(a.real_type)
    return out


def _literal(node: ast.AST):
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None


def _literal_values(node: ast.AST) -> list | None:
    """Every value a literal (or a conditional expression of literals) may take, else None."""
    if isinstance(node, ast.IfExp):
        body, orelse = _literal_values(node.body), _literal_values(node.orelse)
        return None if body is None or orelse is None else body + orelse
    ok, value = _literal(node)
    return [value] if ok else None


_SHAPE_ATTRIBUTES = ("shape", "ndim")
_SHAPE_METHODS = ("size", "dim")
_FIXED_BUILTINS = ("len", "int", "min", "max", "tuple", "list")


def _assigned_values(scope: ast.AST, name: str) -> list[ast.AST] | None:
    """The expressions `name` is assigned in `scope` (itself, not nested scopes); None when
    it is bound some other way (a loop target, a with/except name, augmented assignment)."""
    values: list[ast.AST] = []
    for node in _scope_nodes(scope):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id == name:
                    values.append(node.value)
                elif isinstance(target, ast.Tuple | ast.List) and any(
                    isinstance(e, ast.Name) and e.id == name for e in target.elts
                ):
                    values.append(node.value)  # unpacking: fixed if the whole value is
        elif isinstance(node, ast.AnnAssign | ast.NamedExpr):
            if isinstance(node.target, ast.Name) and node.target.id == name:
                if node.value is None:
                    continue
                values.append(node.value)
        elif isinstance(node, ast.AugAssign | ast.For | ast.comprehension | ast.withitem):
            target = getattr(node, "target", None) or getattr(node, "optional_vars", None)
            if any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(target or node)):
                return None
    return values


def _parameters(scope: ast.AST) -> set[str]:
    if not isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
        return set()
    a = scope.args
    names = [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]
    return {p.arg for p in names if p is not None}


def fixed_at_construction(node: ast.AST, scopes: list[ast.AST], _seen=frozenset()) -> bool:
    """Whether `node`'s value is fixed when the model is built, not per decode step.

    Fixed: literals; attributes of ``self`` (set in ``__init__``); tensor shapes (``x.shape``,
    ``x.shape[0]``, ``x.size(0)``, ``x.ndim``: static within one compiled graph); names assigned
    only fixed values in the enclosing function, or at module level; containers, arithmetic,
    subscripts, conditional expressions and ``len``/``int``/``min``/``max`` of fixed values.
    A parameter of the enclosing function is not: its caller may pass a per-step value.
    `scopes`: the enclosing scopes, innermost first, the module last.
    """
    ok = functools.partial(fixed_at_construction, scopes=scopes, _seen=_seen)
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return all(ok(e) for e in node.elts)
    if isinstance(node, ast.BinOp):
        return ok(node.left) and ok(node.right)
    if isinstance(node, ast.UnaryOp):
        return ok(node.operand)
    if isinstance(node, ast.IfExp):
        return ok(node.test) and ok(node.body) and ok(node.orelse)
    if isinstance(node, ast.Subscript):
        return ok(node.value) and ok(node.slice)
    if isinstance(node, ast.Attribute):
        if node.attr in _SHAPE_ATTRIBUTES:
            return True
        root = node
        while isinstance(root, ast.Attribute):
            root = root.value
        return isinstance(root, ast.Name) and root.id == "self"
    if isinstance(node, ast.Call):
        func = node.func
        args = [*node.args, *(k.value for k in node.keywords)]
        if isinstance(func, ast.Attribute) and func.attr in _SHAPE_METHODS:
            return all(ok(a) for a in args)
        if isinstance(func, ast.Name) and func.id in _FIXED_BUILTINS:
            return all(ok(a) for a in args)
        return False
    if isinstance(node, ast.Name):
        if node.id == "self" or node.id in _seen:
            return node.id == "self"
        for depth, scope in enumerate(scopes):
            if node.id in _parameters(scope):
                return False
            values = _assigned_values(scope, node.id)
            if values is None:
                return False
            if values:
                outer = scopes[depth:]
                seen = _seen | {node.id}
                return all(fixed_at_construction(v, outer, seen) for v in values)
        return False  # a global of another module, a builtin: not known here
    return False


def _accepted_values(op: str, bound: dict[str, ast.AST], platform: str) -> dict[str, tuple]:
    """Argument -> the values the device accepts (scaffold.device_limits)."""
    from scaffold.device_limits import LIMITS

    lim = LIMITS[platform]
    if op in ("npu_fused_infer_attention_score", "npu_fused_infer_attention_score_v2"):
        modes = lim.attention.sparse_modes
        if "query_rope" in bound:
            modes += lim.attention.mla_sparse_modes
        return {"input_layout": lim.attention.input_layouts, "sparse_mode": modes}
    if op == "npu_apply_rotary_pos_emb":
        return {"layout": lim.rotary.layouts, "rotary_mode": lim.rotary.rotary_modes}
    return {}


def _type_fits(declared: str, value) -> bool:
    t = declared.replace("(a!)", "").replace("(b!)", "")
    if value is None:
        return t.endswith("?")
    t = t.rstrip("?")
    if t.endswith("[]"):
        return isinstance(value, list | tuple) and all(_type_fits(t[:-2], v) for v in value)
    if t in ("int", "SymInt"):
        return isinstance(value, int) and not isinstance(value, bool)
    if t == "float":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if t == "bool":
        return isinstance(value, bool)
    if t == "str":
        return isinstance(value, str)
    if t == "Scalar":
        return isinstance(value, int | float | bool)
    if t.startswith("Tensor"):
        return False
    return True  # ScalarType, Layout, ...: not checked


def _check_schema(
    call: ast.Call, schema, platform: str = "A3", scopes: list[ast.AST] | None = None
) -> list[str]:
    problems = []
    args = list(schema.arguments)
    declared = _declared_types(schema)
    positional = [a for a in args if not a.kwarg_only]
    names = {a.name for a in args}
    sig = f"{schema.name}({', '.join(f'{declared[a.name]} {a.name}' for a in args)})"
    star = any(isinstance(a, ast.Starred) for a in call.args)
    bound: dict[str, ast.AST] = {}
    if not star:
        if len(call.args) > len(positional):
            problems.append(
                f"{len(call.args)} positional arguments, schema takes {len(positional)}: {sig}"
            )
        for a, node in zip(positional, call.args, strict=False):
            bound[a.name] = node
    for kw in call.keywords:
        if kw.arg is None:
            star = True
            continue
        if kw.arg not in names:
            problems.append(
                f"unknown keyword {kw.arg!r}; schema arguments: {', '.join(a.name for a in args)}"
            )
            continue
        if kw.arg in bound:
            problems.append(f"argument {kw.arg!r} given positionally and by keyword")
        bound[kw.arg] = kw.value
    if not star:
        for a in args:
            if a.name not in bound and not a.has_default_value():
                problems.append(f"required argument {a.name!r} missing: {sig}")
    accepted = _accepted_values(schema.name.split("::")[-1], bound, platform)
    for name, node in bound.items():
        typ = declared[name]
        values = _literal_values(node)
        if re.fullmatch(r"int\[\d*\]\??", typ) and values is None:
            if not fixed_at_construction(node, scopes or []):
                problems.append(
                    f"argument {name!r} is `{typ}` (not SymInt[]) but gets `{ast.unparse(node)}`, "
                    "a value that may change per step: dynamo specialises on it and recompiles "
                    "whenever it changes (every decode step), even with dynamic=True"
                )
            continue
        for value in values or ():
            if not _type_fits(typ, value):
                problems.append(f"argument {name!r}={value!r} does not fit schema type `{typ}`")
            elif name in accepted and value not in accepted[name]:
                problems.append(
                    f"argument {name!r}={value!r} is not accepted on {platform} (accepted: "
                    f"{', '.join(map(repr, accepted[name]))}; torch_npu's op docs, "
                    "scaffold/device_limits.py)"
                )
    return problems


def _check_signature(call: ast.Call, fn) -> list[str]:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return []
    params = sig.parameters.values()
    if any(p.kind == p.VAR_KEYWORD for p in params):
        return []
    fake_args = [object()] * len(call.args)
    fake_kw = {k.arg: object() for k in call.keywords if k.arg}
    if any(isinstance(a, ast.Starred) for a in call.args) or any(
        k.arg is None for k in call.keywords
    ):
        return []
    try:
        sig.bind(*fake_args, **fake_kw)
    except TypeError as exc:
        return [f"{exc} (signature {sig})"]
    return []


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _scope_nodes(scope: ast.AST) -> Iterator[ast.AST]:
    """Nodes of `scope` itself, not of the functions / classes nested in it."""
    todo = list(ast.iter_child_nodes(scope))
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, _SCOPES):
            todo.extend(ast.iter_child_nodes(node))


def _op_refs(value: ast.AST, aliases: dict[str, str]) -> list[tuple[str, str, str]]:
    """NPU ops an expression may evaluate to (both arms of a conditional expression)."""
    if isinstance(value, ast.IfExp):
        return _op_refs(value.body, aliases) + _op_refs(value.orelse, aliases)
    target = _target(value, aliases)
    return [target] if target else []


def local_op_aliases(scope: ast.AST, aliases: dict[str, str]) -> dict[str, list]:
    """Names assigned an NPU op in `scope` (``fia = torch_npu.X``, ``fia = A if c else B``,
    ``if c: fia = A`` / ``else: fia = B``, annotated and walrus assignments) -> the ops."""
    out: dict[str, list] = {}
    for node in _scope_nodes(scope):
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign | ast.NamedExpr) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        refs = _op_refs(value, aliases)
        for name in (t.id for t in targets if isinstance(t, ast.Name)):
            for ref in refs:
                if ref not in out.setdefault(name, []):
                    out[name].append(ref)
    return out


def _calls(tree: ast.Module, aliases: dict[str, str]) -> Iterator[tuple[ast.Call, list, str, list]]:
    """(call, candidate ops, how the name was reached, enclosing scopes innermost first) for
    every NPU call, scope by scope."""
    stack: list[tuple[ast.AST, list[dict[str, list]], list[ast.AST]]] = [(tree, [], [])]
    while stack:
        scope, outer, outer_scopes = stack.pop()
        chain = [local_op_aliases(scope, aliases), *outer]
        scopes = [scope, *outer_scopes]
        for node in _scope_nodes(scope):
            if isinstance(node, _SCOPES):
                # a class body is not an enclosing scope of its methods' names
                inner = scopes if not isinstance(scope, ast.ClassDef) else scopes[1:]
                stack.append((node, chain, inner))
            if not isinstance(node, ast.Call):
                continue
            target = _target(node.func, aliases)
            if target is not None:
                yield node, [target], "", scopes
            elif isinstance(node.func, ast.Name):
                name = node.func.id
                found = next((level[name] for level in chain if name in level), None)
                if found:
                    yield node, found, name, scopes


def _check_call(node: ast.Call, target, platform: str, scopes: list[ast.AST]) -> list[str]:
    ns, name, _ = target
    schemas = _schemas(ns, name)
    if schemas is None:
        # torchair.ops.X may be a plain Python helper; torch_npu.X a Python function
        fn = _python_callable(ns, name)
        if fn is None:
            where = "torchair" if ns.startswith("air") else "torch_npu"
            return [f"no such op/attribute in the installed {where}"]
        return _check_signature(node, fn)
    results = [_check_schema(node, s, platform, scopes) for s in schemas]
    return results[0] if all(results) else []  # no overload accepts the call


def check_npu_calls(source_paths, platform: str | None = None) -> list[str]:
    """Problems (``path:line: call: message``) of every NPU call in ``source_paths``, against
    the installed schemas and the accepted values of ``platform`` (default: the emulation's,
    ``$ASCEND_SCAFFOLD_NPU_PLATFORM`` or A3)."""
    _ensure_torch_npu()
    platform = platform or emulation.current_platform()
    problems: list[str] = []
    for path in map(Path, source_paths):
        tree = ast.parse(path.read_text(), filename=str(path))
        aliases = import_aliases(tree)
        found = sorted(_calls(tree, aliases), key=lambda item: (item[0].lineno, item[2]))
        for node, targets, via, scopes in found:
            for target in targets:
                shown = f"{via} (= {target[2]})" if via else target[2]
                where = f"{path}:{node.lineno}: {shown}"
                problems += [f"{where}: {m}" for m in _check_call(node, target, platform, scopes)]
    return problems


if __name__ == "__main__":
    found = check_npu_calls(sys.argv[1:])
    print("\n".join(found) or "ok")
    sys.exit(1 if found else 0)
