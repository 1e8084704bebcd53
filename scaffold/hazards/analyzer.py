"""AST visitor that finds graph-mode hazards in one Python source file (no import, no execution).

See ``rules.py`` for what each rule id means and the heuristics it uses.

The visitor is iterative: each ``visit_*`` method is a generator that yields the child nodes to
visit next and resumes once a child's whole subtree is done (scope state is pushed before and
popped after the ``yield``s). So no AST depth the parser accepts can exhaust the Python stack.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field

from .astutil import (
    TOO_DEEP,
    canonical,
    clip,
    code,
    dotted,
    excluded_name,
    forward_functions,
    identifiers,
    import_aliases,
    is_self_attr,
)
from .rules import RULES, Rule
from .shapes import dim_value, seq_len_hazards

HOST_METHODS = {"item", "tolist", "cpu", "numpy"}
SYNC_METHODS = {"synchronize", "wait_stream", "wait_event"}
VALUE_METHODS = {"any", "all", "item", "sum", "max", "min", "mean", "prod", "norm", "std", "var"}
VALUE_METHODS |= {"argmax", "argmin", "count_nonzero", "equal", "allclose", "nonzero"}
TORCH_VALUE = VALUE_METHODS | {"is_nonzero", "isnan", "isinf", "isfinite", "isclose", "isin"}
TORCH_VALUE |= {"eq", "ne", "gt", "ge", "lt", "le", "greater", "less", "logical_and", "logical_or"}
RANDOM_FUNCS = {"rand", "randn", "randint", "rand_like", "randn_like", "randint_like", "randperm"}
RANDOM_FUNCS |= {"bernoulli", "multinomial", "normal", "poisson", "dropout", "alpha_dropout"}
RANDOM_METHODS = {"bernoulli", "bernoulli_", "multinomial", "uniform_", "normal_", "random_"}
RANDOM_METHODS |= {"exponential_", "geometric_", "cauchy_", "log_normal_"}
DROPOUT_FUNCS = {"dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout"}
DROPOUT_FUNCS |= {"feature_alpha_dropout", "gumbel_softmax"}
DROPOUT_MODULES = {"Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout"}
DROPOUT_MODULES |= {"FeatureAlphaDropout"}
HOST_BUILTINS = {"int", "float", "bool", "complex"}  # of a tensor: its value on the host
NUMPY_CONVERSIONS = {"numpy.asarray", "numpy.array", "numpy.asanyarray", "numpy.ascontiguousarray"}
# Parameter names that hold tensors in transformers-style forward signatures (unannotated)
TENSOR_NAMES = {"input_ids", "position_ids", "attention_mask", "hidden_states", "cache_position"}
TENSOR_NAMES |= {"inputs_embeds", "token_type_ids", "encoder_hidden_states", "pixel_values"}
# Attributes of a tensor that are host values, not tensor values
HOST_ATTRIBUTES = {"shape", "ndim", "dtype", "device", "is_cuda", "requires_grad", "layout"}
SHAPE_FUNCS = {"nonzero", "argwhere", "masked_select", "unique", "unique_consecutive", "bincount"}
CAT_FUNCS = {"torch.cat", "torch.concat", "torch.concatenate"}
REALLOC_METHODS = {"clone", "to", "new_zeros", "new_ones", "new_empty", "new_full", "new_tensor"}
BAD_BACKENDS = {"aot_eager", "inductor", "cudagraphs"}
FA_LENGTH_KWARGS = {"actual_seq_lengths", "actual_seq_lengths_kv"}
KV_RE = re.compile(r"past|cache|present|key_value|(^|_)kv(_|$)", re.IGNORECASE)
SEQ_NAME_RE = re.compile(r"seq|len|past|kv|cache|step|token|offset|start|end", re.IGNORECASE)


@dataclass
class Hazard:
    rule: str
    path: str
    line: int
    col: int
    message: str
    code: str = ""
    function: str = "<module>"

    @property
    def info(self) -> Rule:
        return RULES[self.rule]

    def to_dict(self) -> dict:
        info = self.info
        data = asdict(self)
        data.update(name=info.slug, title=info.title, effect=info.effect)
        data.update(why=info.why, fix=info.fix)
        return data


@dataclass
class Facts:
    """What the cross-file rule (GM010) and the design document need to know."""

    list_fa: list[tuple[int, str]] = field(default_factory=list)
    static_compiles: list[Hazard] = field(default_factory=list)
    uses_torchair: bool = False
    uses_npugraph_ex: bool = False


@dataclass
class _Frame:
    name: str
    forward: bool
    excluded: bool
    lists: set[str] = field(default_factory=set)
    tensors: set[str] = field(default_factory=set)  # names known to hold tensors


class AnalysisError(ValueError):
    """Source the checker cannot analyse although it may be valid Python (nested too deeply)."""


def _is_training_test(test: ast.AST) -> bool:
    """``self.training``, possibly and-ed with other conditions (at any nesting)."""
    todo = [test]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Attribute) and node.attr == "training":
            return True
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
            todo.extend(node.values)
    return False


def _is_training_name(node: ast.AST) -> bool:
    """`training`/`train`/`is_training` or `<x>.training` (nn.Module.eval() turns it off)."""
    if isinstance(node, ast.Name):
        return node.id in ("training", "train", "is_training")
    return isinstance(node, ast.Attribute) and node.attr == "training"


def _returns_at_inference(stmt: ast.AST) -> bool:
    """``if not training: return ...`` (also or-ed: ``if p == 0.0 or not training: return x``,
    timm's and transformers' drop_path): what follows it runs only while training."""
    if not isinstance(stmt, ast.If) or stmt.orelse or not stmt.body:
        return False
    if not isinstance(stmt.body[0], ast.Return):
        return False
    tests = stmt.test.values if isinstance(stmt.test, ast.BoolOp) else [stmt.test]
    if isinstance(stmt.test, ast.BoolOp) and not isinstance(stmt.test.op, ast.Or):
        return False
    return any(
        isinstance(t, ast.UnaryOp) and isinstance(t.op, ast.Not) and _is_training_name(t.operand)
        for t in tests
    )


def _none_test_name(test: ast.AST) -> str | None:
    """``X`` for ``if X is None:``."""
    if (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.Is)
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value is None
    ):
        return test.left.id
    return None


def _is_tensor_annotation(ann: ast.AST | None) -> bool:
    return ann is not None and any(n.endswith("Tensor") for n in identifiers(ann))


def _training_flag(node: ast.AST | None) -> bool:
    """A dropout's `training` argument that is off at inference: False, `self.training`,
    `module.training`, ... (nn.Module.eval() sets it)."""
    if isinstance(node, ast.Constant):
        return node.value is False
    if isinstance(node, ast.Name):  # passed down: dropout_add(x, ..., training=self.training)
        return node.id in ("training", "train", "is_training")
    return isinstance(node, ast.Attribute) and node.attr == "training"


def _is_list_annotation(ann: ast.AST | None) -> bool:
    return ann is not None and any(n in ("list", "List") for n in identifiers(ann))


def _is_mask_index(index: ast.AST) -> bool:
    """A comparison, ``~x``, a ``*mask`` name, or any ``&`` / ``|`` combination of those."""
    todo = [index]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Compare):
            return True
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Invert):
            return True
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.BitAnd, ast.BitOr)):
            todo += [node.right, node.left]
            continue
        name = dotted(node)
        if name is not None and name.split(".")[-1].lower().endswith("mask"):
            return True
    return False


def _root_name(node: ast.AST) -> str | None:
    """``past_key_value`` for ``past_key_value[0].to(x)``, ``cache`` for ``self.cache[:, :n]``."""
    while True:
        if isinstance(node, (ast.Subscript, ast.Starred)):
            node = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            node = node.func.value
        else:
            break
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else None


def _on_self(node: ast.AST) -> bool:
    """``self.x`` / ``self.x[i]``: module state that outlives one call."""
    while isinstance(node, ast.Subscript):
        node = node.value
    return is_self_attr(node)


def _dynamic_arg(arg: ast.AST) -> bool:
    """Involves a non-batch shape (.shape[i]/.size(i), i != 0), len(), .numel() or a
    length-like name (seq_len, kv_len, past, cache, offset, start, end, ...)."""
    for sub in ast.walk(arg):
        if isinstance(sub, ast.Subscript) and isinstance(sub.value, ast.Attribute):
            if sub.value.attr == "shape" and dim_value(sub.slice) != 0:
                return True
        elif isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute):
            if sub.func.attr == "numel" or (
                sub.func.attr == "size" and not (sub.args and dim_value(sub.args[0]) == 0)
            ):
                return True
        elif isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name):
            if sub.func.id == "len":
                return True
        elif isinstance(sub, ast.Name) and SEQ_NAME_RE.search(sub.id):
            return True
    return False


class _Visitor:
    def __init__(self, tree: ast.Module, path: str, lines: list[str]) -> None:
        self.aliases = import_aliases(tree)
        self.forward = forward_functions(tree)
        self.path, self.lines = path, lines
        self.snippets: dict[int, str] = {}
        self.hazards: list[Hazard] = []
        self.facts = Facts()
        self.frames: list[_Frame] = []
        self.classes: list[str] = []
        self.training = 0
        self.fallback: list[str] = []
        self.fallback_assign = 0
        self.assign_targets: list[list[str]] = []

    # -- traversal ---------------------------------------------------------------------------
    def visit(self, root: ast.AST) -> None:
        """Depth-first, with an explicit stack of the ``visit_*`` generators in progress."""
        stack = [self._steps(root)]
        while stack:
            child = next(stack[-1], None)
            if child is None:
                stack.pop()
            else:
                stack.append(self._steps(child))

    def _steps(self, node: ast.AST) -> Iterator[ast.AST]:
        method = getattr(self, f"visit_{type(node).__name__}", self.generic_visit)
        return method(node)

    def generic_visit(self, node: ast.AST) -> Iterator[ast.AST]:
        yield from ast.iter_child_nodes(node)

    # -- helpers -----------------------------------------------------------------------------
    @property
    def in_forward(self) -> bool:
        return bool(self.frames) and self.frames[-1].forward

    def make(self, rule: str, node: ast.AST, message: str) -> Hazard:
        line = getattr(node, "lineno", 1)
        if line not in self.snippets:  # once per line: a long line may carry many hazards
            text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
            self.snippets[line] = clip(text.strip())
        func = self.frames[-1].name if self.frames else "<module>"
        return Hazard(
            rule, self.path, line, node.col_offset + 1, message, self.snippets[line], func
        )

    def add(self, rule: str, node: ast.AST, message: str) -> None:
        self.hazards.append(self.make(rule, node, message))

    def name_of(self, func: ast.AST) -> str:
        return canonical(func, self.aliases) or ""

    def is_method(self, func: ast.AST, names: set[str]) -> bool:
        """``<expr>.m(...)`` with m in names, unless <expr> is rooted at a non-torch import
        (``np.zeros(1).item()``, ``math.x``); ``torch.npu.synchronize()`` counts."""
        if not isinstance(func, ast.Attribute) or func.attr not in names:
            return False
        node = func.value
        while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
            node = node.func if isinstance(node, ast.Call) else node.value
        if isinstance(node, ast.Name) and node.id in self.aliases:
            return self.aliases[node.id].split(".")[0] in ("torch", "torch_npu")
        return True

    def torch_func(self, func: ast.AST, names: set[str]) -> bool:
        name = self.name_of(func)
        head, _, last = name.rpartition(".")
        return last in names and head in ("torch", "torch.nn.functional", "torch.Tensor")

    def tensorish(self, node: ast.AST) -> bool:
        """A tensor value, as far as the source says: a name known to hold a tensor (a
        Tensor-annotated or well-known parameter, a torch call's result, a loop over a
        tensor) or an element/slice/method result of one, or a reducing call; not its
        shape, dtype or device."""
        if not self.frames:
            return False
        if isinstance(node, ast.Name):
            return node.id in self.frames[-1].tensors
        if isinstance(node, ast.Subscript):
            return self.tensorish(node.value)
        if isinstance(node, ast.Attribute):
            return (
                node.attr not in HOST_ATTRIBUTES
                and node.attr != "training"
                and (self.tensorish(node.value))
            )
        if isinstance(node, ast.Call):
            func = node.func
            if self.is_method(func, HOST_METHODS):
                return False  # already on the host (GM002 flags the copy itself)
            if self.is_method(func, VALUE_METHODS) or self.torch_func(func, TORCH_VALUE):
                return True
            if isinstance(func, ast.Attribute) and func.attr not in ("size", "dim", "numel"):
                return self.tensorish(func.value) and func.attr not in HOST_METHODS
            return False
        if isinstance(node, ast.BinOp):
            return self.tensorish(node.left) or self.tensorish(node.right)
        if isinstance(node, ast.UnaryOp):
            return self.tensorish(node.operand)
        return False

    def check_test(self, test: ast.AST, what: str) -> None:
        if not self.in_forward or self.training:  # under `if self.training`: not inference
            return
        for sub in ast.walk(test):
            if isinstance(sub, ast.Call) and (
                self.is_method(sub.func, VALUE_METHODS) or self.torch_func(sub.func, TORCH_VALUE)
            ):
                called = code(sub.func)
                self.add("GM003", test, f"{what} depends on a tensor value ({called}(...))")
                return
        for sub in ast.walk(test):
            operands = []
            if isinstance(sub, ast.Compare) and not all(
                isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in sub.ops
            ):
                operands = [sub.left, *sub.comparators]
            elif sub is test or (isinstance(test, ast.BoolOp) and sub in test.values):
                operands = [sub] if isinstance(sub, (ast.Name, ast.Subscript)) else []
            if any(self.tensorish(o) for o in operands):
                shown = code(next(o for o in operands if self.tensorish(o)))
                self.add("GM003", test, f"{what} depends on a tensor value (`{shown}`)")
                return

    # -- scopes ------------------------------------------------------------------------------
    def visit_ClassDef(self, node: ast.ClassDef) -> Iterator[ast.AST]:
        yield from node.decorator_list
        self.classes.append(node.name)
        yield from node.body
        self.classes.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[ast.AST]:
        for dec in node.decorator_list:
            if not isinstance(dec, ast.Call) and self.name_of(dec) == "torch.compile":
                self.add("GM008", dec, "bare @torch.compile uses the default inductor backend")
            yield dec
        yield node.args
        parent = self.frames[-1] if self.frames else None
        excluded = excluded_name(node.name) or (parent is not None and parent.excluded)
        forward = (node in self.forward and not excluded) or (parent is not None and parent.forward)
        qual = (
            ".".join([*self.classes, node.name]) if parent is None else f"{parent.name}.{node.name}"
        )
        frame = _Frame(qual, forward, excluded)
        all_args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
        frame.lists = {a.arg for a in all_args if _is_list_annotation(a.annotation)}
        frame.tensors = {
            a.arg
            for a in all_args
            if _is_tensor_annotation(a.annotation)
            or (a.annotation is None and a.arg in TENSOR_NAMES)
        }
        self.frames.append(frame)
        saved = self.classes
        self.classes = []
        training_only = 0  # after `if not training: return`, the rest runs only in training
        for stmt in node.body:
            yield stmt
            if not training_only and _returns_at_inference(stmt):
                training_only = 1
                self.training += 1
        self.training -= training_only
        self.classes = saved
        if forward:
            for anchor, message in seq_len_hazards(node):
                self.add("GM006", anchor, message)
        self.frames.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    # -- control flow ------------------------------------------------------------------------
    def _visit_branches(self, node: ast.If | ast.IfExp, body: list[ast.AST]) -> Iterator[ast.AST]:
        training = _is_training_test(node.test)
        fallback = _none_test_name(node.test)
        self.training += training
        if fallback:
            self.fallback.append(fallback)
        yield from body
        self.training -= training
        if fallback:
            self.fallback.pop()

    def visit_If(self, node: ast.If) -> Iterator[ast.AST]:
        self.check_test(node.test, "`if`")
        yield node.test
        yield from self._visit_branches(node, node.body)
        yield from node.orelse

    def visit_IfExp(self, node: ast.IfExp) -> Iterator[ast.AST]:
        self.check_test(node.test, "conditional expression")
        yield node.test
        yield from self._visit_branches(node, [node.body])
        yield node.orelse

    def visit_While(self, node: ast.While) -> Iterator[ast.AST]:
        self.check_test(node.test, "`while`")
        yield from self.generic_visit(node)

    def visit_Assert(self, node: ast.Assert) -> Iterator[ast.AST]:
        self.check_test(node.test, "`assert`")
        yield from self.generic_visit(node)

    # -- assignments -------------------------------------------------------------------------
    def visit_Assign(self, node: ast.Assign | ast.AnnAssign) -> Iterator[ast.AST]:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        value = node.value
        if value is None:
            return
        names = {t.id for t in targets if isinstance(t, ast.Name)}
        if self.frames and self._listish(value):
            self.frames[-1].lists |= names
        if self.frames and self._tensor_value(value):
            self.frames[-1].tensors |= names
        if self.in_forward and isinstance(value, ast.Call):
            for target in targets:
                if is_self_attr(target) and self._allocates(value):
                    self.add(
                        "GM007",
                        target,
                        f"`{code(target)}` is re-allocated in forward ({code(value.func)}(...))",
                    )
        fallback = bool(names & set(self.fallback))
        self.fallback_assign += fallback
        self.assign_targets.append([code(t) for t in targets])
        for target in targets:
            yield target
        yield value
        self.assign_targets.pop()
        self.fallback_assign -= fallback

    visit_AnnAssign = visit_Assign

    def _tensor_value(self, value: ast.AST) -> bool:
        """An assignment's value that is a tensor: a torch.* call (not torch.Size, dtypes),
        or a tensor-valued expression (see tensorish)."""
        if isinstance(value, ast.Call):
            name = self.name_of(value.func)
            if name.startswith(("torch.", "torch_npu.")) and name.split(".")[1] not in (
                "Size", "device", "dtype", "finfo", "iinfo", "compile", "jit", "cuda", "npu"
            ):  # fmt: skip
                return True
        return self.tensorish(value)

    def visit_For(self, node: ast.For) -> Iterator[ast.AST]:
        if self.frames and self.tensorish(node.iter) and isinstance(node.target, ast.Name):
            self.frames[-1].tensors.add(node.target.id)  # a row of a tensor
        yield from self.generic_visit(node)

    def _allocates(self, value: ast.Call) -> bool:
        name = self.name_of(value.func)
        return name.startswith("torch.") or self.is_method(value.func, REALLOC_METHODS)

    def _listish(self, value: ast.AST) -> bool:
        if isinstance(value, (ast.List, ast.ListComp)):
            return True
        if isinstance(value, ast.Call):
            if isinstance(value.func, ast.Name) and value.func.id == "list":
                return True
            return isinstance(value.func, ast.Attribute) and value.func.attr == "tolist"
        return (
            isinstance(value, ast.Name)
            and bool(self.frames)
            and (value.id in self.frames[-1].lists)
        )

    # -- expressions -------------------------------------------------------------------------
    def visit_Subscript(self, node: ast.Subscript) -> Iterator[ast.AST]:
        if self.in_forward and isinstance(node.ctx, ast.Load) and _is_mask_index(node.slice):
            self.add(
                "GM005",
                node,
                f"boolean-mask indexing `{code(node)}` has a data-dependent shape",
            )
        elif self.in_forward:
            parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            bounds = [
                b
                for part in parts
                if isinstance(part, ast.Slice)
                for b in (part.lower, part.upper, part.step)
                if b is not None
            ]
            bound = next((b for b in bounds if self.tensorish(b)), None)
            if bound is not None:
                self.add(
                    "GM005", node, f"slice bound `{code(bound)}` is a tensor value: the shape "
                    "depends on it"
                )  # fmt: skip
        yield from self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> Iterator[ast.AST]:
        self._check_call(node)
        yield from self.generic_visit(node)

    def _check_call(self, node: ast.Call) -> None:
        func = node.func
        name = self.name_of(func)
        self._compile_rules(node, name)
        self._fa_lengths(node, name)
        if name in CAT_FUNCS and self._cache_scope():
            self._kv_cat(node)
        if not self.in_forward:
            return
        if self.is_method(func, HOST_METHODS) or self._to_cpu(node):
            shown = code(node) if func.attr == "to" else f"{code(func)}()"
            self.add("GM002", node, f"`{shown}` copies a tensor value to the host")
        if isinstance(func, ast.Name) and func.id in HOST_BUILTINS and func.id not in self.aliases:
            if node.args and self.tensorish(node.args[0]):
                shown = f"{func.id}({code(node.args[0])})"
                self.add("GM002", node, f"`{shown}` copies a tensor value to the host")
        if name in NUMPY_CONVERSIONS and node.args and self.tensorish(node.args[0]):
            self.add("GM002", node, f"`{code(func)}(...)` of a tensor copies it to the host")
        if isinstance(func, ast.Name) and func.id == "print" and "print" not in self.aliases:
            self.add("GM002", node, "`print(...)` in forward breaks the graph (and copies any "
                     "tensor it prints to the host)")  # fmt: skip
        if self.is_method(func, SYNC_METHODS):
            self.add("GM009", node, f"`{code(func)}()` synchronises a stream/device in forward")
        if is_self_attr(func) and func.attr in ("register_buffer", "register_parameter"):
            self.add("GM007", node, f"`{code(func)}` is called in forward")
        self._random(node, name)
        self._dynamic_shape(node, name)
        if name == "torch.arange" and not self.fallback_assign:
            args = [*node.args, *(k.value for k in node.keywords if k.arg in ("start", "end"))]
            if any(_dynamic_arg(a) for a in args):
                self.add("GM006", node, f"`{code(node)}` is computed inside forward")

    def _cache_scope(self) -> bool:
        """Forward scope, or a cache-update method (update, append_to_cache, ...)."""
        if not self.frames or self.frames[-1].excluded:
            return False
        last = self.frames[-1].name.rpartition(".")[2].lower()
        return self.in_forward or "update" in last or "cache" in last

    def _to_cpu(self, node: ast.Call) -> bool:
        if not self.is_method(node.func, {"to"}):
            return False
        values = [*node.args[:1], *(k.value for k in node.keywords if k.arg == "device")]
        return any(isinstance(v, ast.Constant) and v.value == "cpu" for v in values)

    def _random(self, node: ast.Call, name: str) -> None:
        if self.training:
            return
        if self.torch_func(node.func, DROPOUT_FUNCS):
            # F.dropout(input, p, training, ...) / torch.dropout(input, p, train): off in eval
            # mode when `training` follows the module (self.training) or is False
            training = next(
                (k.value for k in node.keywords if k.arg in ("training", "train")), None
            )
            if training is None and len(node.args) >= 3:
                training = node.args[2]
            if _training_flag(training):
                return
            self.add("GM004", node, f"`{code(node.func)}(...)` in the inference forward")
        elif self.torch_func(node.func, RANDOM_FUNCS) or (
            self.is_method(node.func, RANDOM_METHODS) and not name.startswith("torch.nn.init")
        ):
            self.add("GM004", node, f"`{code(node.func)}(...)` is a random op")

    def _dynamic_shape(self, node: ast.Call, name: str) -> None:
        if self.torch_func(node.func, SHAPE_FUNCS) or self.is_method(node.func, SHAPE_FUNCS):
            self.add("GM005", node, f"`{code(node.func)}(...)` has a data-dependent output shape")
        elif name == "torch.where" and len(node.args) + len(node.keywords) == 1:
            self.add("GM005", node, "one-argument torch.where(cond) is nonzero(as_tuple=True)")

    def _kv_cat(self, node: ast.Call) -> None:
        seq = node.args[0] if node.args else next((k.value for k in node.keywords), None)
        if seq is None:
            return
        elts = seq.elts if isinstance(seq, (ast.List, ast.Tuple)) else [seq]
        targets = self.assign_targets[-1] if self.assign_targets else []
        grows = any(_on_self(e) and code(e) in targets and code(e) != TOO_DEEP for e in elts)
        named = [n for n in map(_root_name, elts) if n and KV_RE.search(n)]
        if grows or named:
            why = "module state re-assigned with itself" if grows else f"input `{named[0]}`"
            self.add("GM001", node, f"`{code(node.func)}` grows a KV cache ({why})")

    def _compile_rules(self, node: ast.Call, name: str) -> None:
        kws = {k.arg: k.value for k in node.keywords}
        if name == "torch.compile":
            backend = kws.get("backend")
            if backend is None and None not in kws:
                self.add("GM008", node, "torch.compile without backend= defaults to inductor")
            elif isinstance(backend, ast.Constant) and backend.value in BAD_BACKENDS:
                self.add("GM008", backend, f"backend={backend.value!r} is not an NPU backend")
            dynamic = kws.get("dynamic")
            if isinstance(dynamic, ast.Constant) and dynamic.value is False:
                hazard = self.make("GM010", node, "compiled with dynamic=False")
                self.facts.static_compiles.append(hazard)
        elif name == "torch._dynamo.optimize":
            backend = node.args[0] if node.args else kws.get("backend")
            if isinstance(backend, ast.Constant) and backend.value in BAD_BACKENDS:
                self.add("GM008", backend, f"backend={backend.value!r} is not an NPU backend")

    def _fa_lengths(self, node: ast.Call, name: str) -> None:
        for kw in node.keywords:
            if kw.arg not in FA_LENGTH_KWARGS:
                continue
            literal = self._listish(kw.value)
            if literal or (name.startswith("torch_npu.") and not name.startswith("torchair")):
                self.facts.list_fa.append((node.lineno, code(node.func)))


def normalize_newlines(source: str) -> str:
    """CRLF and lone CR as LF, as Python's tokenizer reads them; lines are then split at LF only
    (not str.splitlines, which also splits at form feeds and other separators that do not end
    a Python line and would shift the code shown for a hazard)."""
    return source.replace("\r\n", "\n").replace("\r", "\n")


def analyze_source(source: str, path: str = "<string>") -> tuple[list[Hazard], Facts]:
    """Hazards (unsuppressed, unsorted, without the cross-file GM010) and facts for one file.

    Raises SyntaxError if the source does not parse (null bytes included), AnalysisError if it
    is nested too deeply for the parser (RecursionError/MemoryError inside ``ast.parse``).
    """
    source = normalize_newlines(source)
    try:
        tree = ast.parse(source, filename=path)
    except ValueError as exc:  # null bytes, on Pythons that do not make it a SyntaxError
        raise SyntaxError(str(exc)) from None
    except (RecursionError, MemoryError):
        raise AnalysisError("expression nested too deeply") from None
    visitor = _Visitor(tree, path, source.split("\n"))
    try:
        visitor.visit(tree)
    except (RecursionError, MemoryError):  # a helper recursing; the traversal itself is iterative
        raise AnalysisError("expression nested too deeply") from None
    facts = visitor.facts
    facts.uses_torchair = any(v.split(".")[0] == "torchair" for v in visitor.aliases.values())
    facts.uses_npugraph_ex = any(
        isinstance(n, ast.Constant) and n.value == "npugraph_ex" for n in ast.walk(tree)
    )
    return visitor.hazards, facts
