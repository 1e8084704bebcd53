"""Fuzz `ascend-scaffold check` (hypothesis): whatever is in a .py file or a directory tree,
``check_paths`` and the CLI return within a time bound, never raise, exit 0/1/2 and print no
traceback; sources that parse are analysed without an error line.

Deterministic (``derandomize=True``, no example database) and small (about 150 examples in
all) so it runs in seconds in CI. A module-level CliRunner is used instead of the ``cli``
fixture because hypothesis runs many examples per test function.
"""

from __future__ import annotations

import ast
import json
import os
import tempfile
import threading
from datetime import timedelta
from pathlib import Path

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from scaffold.cli import app
from scaffold.hazards import check_paths

TIME_LIMIT = 30  # seconds per call; normal examples take milliseconds
FUZZ = settings(
    deadline=timedelta(seconds=5),
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
FORMATS = st.sampled_from(["text", "json", "markdown"])
runner = CliRunner()


def within(seconds: float, fn, *args):
    """``fn(*args)`` in a thread: its result or exception, or a failure if it runs too long."""
    box: dict = {}

    def target():
        try:
            box["value"] = fn(*args)
        except BaseException as exc:  # re-raised below, in the test's thread
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"{getattr(fn, '__name__', fn)} did not return in {seconds}s"
    if "error" in box:
        raise box["error"]
    return box["value"]


def assert_check_is_robust(paths: list[Path], fmt: str) -> list[str]:
    """Check ``paths`` in-process and through the CLI; the in-process error lines."""
    result = within(TIME_LIMIT, check_paths, paths)
    for line in result.errors:
        assert line and "\n" not in line and "Traceback" not in line, line
    expected = 2 if result.errors or not result.files else (1 if result.hazards else 0)
    cli = within(TIME_LIMIT, runner.invoke, app, ["check", *map(str, paths), "--format", fmt])
    assert cli.exception is None or isinstance(cli.exception, SystemExit), cli.exc_info
    assert cli.exit_code in (0, 1, 2)
    event(f"exit {cli.exit_code}")  # pytest --hypothesis-show-statistics shows the mix
    assert cli.exit_code == expected, (cli.exit_code, result.errors, cli.stderr)
    assert "Traceback" not in cli.stdout and "Traceback" not in cli.stderr
    assert cli.stderr.splitlines()[: len(result.errors)] == result.errors
    if fmt == "json":
        assert len(json.loads(cli.stdout)) == len(result.hazards)
    return result.errors


def check_one_file(data: bytes, fmt: str) -> list[str]:
    """Write ``data`` to m.py, check it both ways; the in-process error lines."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "m.py")
        path.write_bytes(data)
        return assert_check_is_robust([path], fmt)


# -- (a) bytes ----------------------------------------------------------------------------------
COOKIES = [
    b"",
    b"# -*- coding: latin-1 -*-\n",
    b"# vim: set fileencoding=cp1252 :\n",
    b"#!/usr/bin/env python\n# coding: utf-8\n",
    b"# coding: utf-16\n",
    b"# coding: rot13\n",
    b"# coding: no-such-codec\n",
    b"\xef\xbb\xbf",
    b"\xef\xbb\xbf# coding: latin-1\n",
]
CHUNKS = [
    b"def forward(self, x):\n",
    b"    return x.item()\n",
    b"    if x.sum() > 0:\n",
    b"        y = torch.cat([past_key_value, x], dim=1)\n",
    b"class M(nn.Module):\n",
    b"# graph-ok: GM002\n",
    b"(",
    b")",
    b"[",
    b"'''",
    b'"',
    b"f'{",
    b"}'",
    b"\\\n",
    b"\x00",
    b"\r",
    b"\r\n",
    b"\x0c",
    b"\t",
    b"    ",
    b"\xe9",
    b"\xff\xfe",
    b"\xc3\xa9",
    b"-" * 3000,
    b"(" * 300,
]
CHUNK = st.sampled_from(CHUNKS)
NOISE = st.lists(CHUNK | CHUNK | st.binary(max_size=16), max_size=24).map(b"".join)


@settings(FUZZ, max_examples=45)
@given(st.sampled_from(COOKIES), NOISE | st.binary(max_size=2048), FORMATS)
def test_fuzz_random_bytes(cookie, body, fmt):
    check_one_file(cookie + body, fmt)


# -- (b) generated Python sources ---------------------------------------------------------------
NAMES = ["x", "y", "mask", "kv_len", "seq_len", "past_key_value", "hidden_states", "i", "n"]
NAMES += ["self.cache", "self.k_cache", "self.training", "position_ids", "attn_mask"]
CALLS = ["torch.cat", "torch.arange", "torch.where", "torch.zeros", "torch.randn", "F.dropout"]
CALLS += ["torch.nonzero", "torch.compile", "torch._dynamo.optimize", "len", "list", "print"]
CALLS += [
    "torch_npu.npu_fused_infer_attention_score",
    "self.register_buffer",
    "torch.npu.synchronize",
]
METHODS = ["item", "tolist", "cpu", "numpy", "sum", "any", "to", "clone", "nonzero", "size"]
METHODS += ["synchronize", "bernoulli_", "new_zeros", "unique", "masked_select", "view", "max"]
KWARGS = ["dim", "backend", "dynamic", "training", "actual_seq_lengths", "device", "end", "out"]
CONSTANTS = ["0", "1", "-2", "1.5", "None", "True", "False", "...", '"cpu"', '"inductor"']
CONSTANTS += ['"npugraph_ex"', '"aot_eager"', "0x1F", "1_000", "3j", 'b"raw"']
SIMPLE = ["x", "y", "n", "i"]

atom = st.sampled_from(NAMES + CONSTANTS) | st.text("abc xyz_", max_size=6).map('"{}"'.format)
fstring = st.tuples(st.sampled_from(NAMES + CONSTANTS), st.sampled_from(SIMPLE)).map(
    lambda t: f"f'{{{t[0]}}} {{{t[1]}!r:>{{n}}}}'"
)


def _args(expr: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    positional = st.lists(expr | expr.map("*{}".format), max_size=3)
    keywords = st.lists(
        st.tuples(st.sampled_from(KWARGS), expr), max_size=2, unique_by=lambda k: k[0]
    )
    return st.tuples(positional, keywords).map(
        lambda t: ", ".join([*t[0], *(f"{k}={v}" for k, v in t[1])])
    )


def _receiver(expr: str) -> str:
    """``(1).item()``, not ``1.item()`` (an invalid decimal literal)."""
    return f"({expr})" if expr[0] in "0123456789-." else expr


def _extend(expr: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    binops = st.sampled_from(["+", "-", "*", "/", "//", "%", "**", "@", "&", "|", "^", "<<"])
    compares = st.sampled_from(["<", ">", "==", "!=", "is", "is not", "in", "not in", "<="])
    return st.one_of(
        st.tuples(expr, binops, expr).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(st.sampled_from(["-", "+", "~", "not "]), expr).map(lambda t: f"({t[0]}{t[1]})"),
        st.tuples(expr, compares, expr).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(expr, st.sampled_from(["and", "or"]), expr).map(" ".join).map("({})".format),
        st.tuples(st.sampled_from(CALLS), _args(expr)).map(lambda t: f"{t[0]}({t[1]})"),
        st.tuples(expr, st.sampled_from(METHODS), _args(expr)).map(
            lambda t: f"{_receiver(t[0])}.{t[1]}({t[2]})"
        ),
        st.tuples(expr, st.sampled_from(["shape", "training", "T", "data"])).map(
            lambda t: f"{_receiver(t[0])}.{t[1]}"
        ),
        st.tuples(expr, expr).map(lambda t: f"{t[0]}[{t[1]}]"),
        st.tuples(expr, expr).map(lambda t: f"{t[0]}[:, :{t[1]}]"),
        st.tuples(expr, expr).map(lambda t: f"{_receiver(t[0])}.shape[{t[1]}:]"),
        st.lists(expr, max_size=3).map(lambda xs: f"[{', '.join(xs)}]"),
        st.lists(expr, max_size=3).map(lambda xs: f"({''.join(x + ', ' for x in xs)})"),
        st.tuples(expr, expr).map(lambda t: f"{{{t[0]}: {t[1]}}}"),
        st.tuples(st.sampled_from(["", "x", "x, y=1", "*a, **k"]), expr).map(
            lambda t: f"(lambda {t[0]}: {t[1]})"
        ),
        st.tuples(expr, expr, expr).map(lambda t: f"[{t[0]} for i in {t[1]} if {t[2]}]"),
        st.tuples(expr, expr).map(lambda t: f"{{i: {t[0]} for i, n in {t[1]}}}"),
        st.tuples(expr, expr).map(lambda t: f"sum({t[0]} for n in {t[1]})"),
        st.tuples(st.sampled_from(SIMPLE), expr).map(lambda t: f"({t[0]} := {t[1]})"),
        st.tuples(expr, expr, expr).map(lambda t: f"({t[0]} if {t[1]} else {t[2]})"),
        fstring,
    )


expressions = st.recursive(atom | fstring, _extend, max_leaves=12)
# Deep nesting: some parse (the analysis must cope), some exceed the parser's limits.
deep_expr = st.tuples(
    st.sampled_from(["-", "not ", "~", "(", "x + ", "x[", "lambda: ", "x.item() if x.sum() else "]),
    st.sampled_from([20, 150, 500, 1500, 4000, 20000]),  # 20000: too deep for any parser
    expressions,
).map(
    lambda t: {
        "(": f"{'(' * t[1]}{t[2]}{')' * t[1]}",
        "x[": f"{'x[' * t[1]}{t[2]}{']' * t[1]}",
    }.get(t[0], t[0] * t[1] + t[2])
)


TARGETS = ["x", "y", "self.cache", "self.k_cache", "position_ids", "x[0]", "self.k_cache[:, :n]"]
TARGETS += ["a, b", "(seq_len, kv_len)", "*rest, last"]


def _simple_statement() -> st.SearchStrategy[list[str]]:
    target = st.sampled_from(TARGETS)
    return st.one_of(
        st.tuples(target, expressions).map(lambda t: f"{t[0]} = {t[1]}"),
        st.tuples(
            st.sampled_from(SIMPLE), st.sampled_from(["list[int]", "torch.Tensor"]), expressions
        ).map(lambda t: f"{t[0]}: {t[1]} = {t[2]}"),
        st.tuples(st.sampled_from(SIMPLE), expressions).map(lambda t: f"{t[0]} += {t[1]}"),
        st.tuples(target, st.sampled_from(["x.size(1)", "x.shape[1]", "x.size()"])).map(
            lambda t: f"{t[0]} = {t[1]}"
        ),
        expressions.map("return {}".format),
        expressions.map("assert {}".format),
        expressions.map("yield {}".format),
        expressions,
        st.sampled_from(["pass", "del x", "return", "x = y = 0  # graph-ok", "import torch"]),
        st.sampled_from(["import torch_npu as npu", "from torch import cat as c", "global n"]),
        st.sampled_from(["import torchair", "from . import x", "raise ValueError(x)", "break"]),
    ).map(lambda line: [line])


def _indent(lines: list[str]) -> list[str]:
    return ["    " + line for line in lines]


def _block(body: st.SearchStrategy[list[str]]) -> st.SearchStrategy[list[str]]:
    return st.lists(body, min_size=1, max_size=3).map(lambda parts: _indent(sum(parts, [])))


FUNC_NAMES = ["forward", "decode", "prefill", "_helper", "update", "__init__", "decode_step"]
FUNC_NAMES += ["eager_attention_forward", "test_x", "append_to_cache"]
PARAMS = ["self, x", "self, x, kv_len: list[int], mask=None", "x, /, *args, **kw", "", "self"]
DECORATORS = ["", "@torch.compile\n", '@torch.compile(backend="inductor")\n', "@staticmethod\n"]
DECORATORS += ["@torch.no_grad()\n", "@functools.lru_cache(maxsize=None)\n"]


def _compound(body: st.SearchStrategy[list[str]]) -> st.SearchStrategy[list[str]]:
    block = _block(body)
    header = st.one_of(
        expressions.map("if {}:".format),
        expressions.map("while {}:".format),
        expressions.map("for i in {}:".format),
        expressions.map("with {} as y:".format),
        st.sampled_from(["if self.training:", "if x is None:", "if is_prefill:"]),
        st.sampled_from(["else:", "async with lock:", "async for i in it:"]),  # may not parse
    )
    func = st.tuples(
        st.sampled_from(DECORATORS),
        st.sampled_from(["def", "async def"]),
        st.sampled_from(FUNC_NAMES),
        st.sampled_from(PARAMS),
    ).map(lambda t: f"{t[0]}{t[1]} {t[2]}({t[3]}):")
    klass = st.tuples(st.sampled_from(DECORATORS), st.sampled_from(["M", "Attention"])).map(
        lambda t: f"{t[0]}class {t[1]}(nn.Module):"
    )
    cases = st.lists(
        st.tuples(
            st.sampled_from(["0", "[a, *rest]", '{"k": v}', "Point(x=0)", "str() | None", "_"]),
            block,
        ),
        min_size=1,
        max_size=3,
    ).map(lambda cs: sum((_indent([f"case {pat}:", *b]) for pat, b in cs), []))
    return st.one_of(
        st.tuples(header | func | klass, block).map(lambda t: [*t[0].split("\n"), *t[1]]),
        st.tuples(expressions, cases).map(lambda t: [f"match {t[0]}:", *t[1]]),
        st.tuples(block, block).map(lambda t: ["try:", *t[0], "except Exception as e:", *t[1]]),
        st.tuples(expressions, block, block).map(lambda t: [f"if {t[0]}:", *t[1], "else:", *t[2]]),
    )


statements = st.recursive(_simple_statement(), _compound, max_leaves=10)
deep_blocks = st.sampled_from([5, 40, 98, 120]).map(
    lambda n: (
        ["def forward(x):", *("    " * (i + 1) + "if x.sum():" for i in range(n))]
        + ["    " * (n + 1) + "return x.item()"]
    )
)
functions = st.tuples(
    st.sampled_from(DECORATORS),
    st.sampled_from(FUNC_NAMES),
    st.sampled_from(PARAMS),
    _block(statements),
).map(lambda t: [*f"{t[0]}def {t[1]}({t[2]}):".split("\n"), *t[3]])
classes = st.tuples(
    st.sampled_from(["M", "Attention"]), st.lists(functions, min_size=1, max_size=3)
)
classes = classes.map(lambda t: [f"class {t[0]}(nn.Module):", *_indent(sum(t[1], []))])
deep_statement = deep_expr.map(lambda e: ["def forward(x):", f"    return {e}"])
sources = st.lists(
    st.one_of(statements, functions, functions, classes, classes, deep_blocks, deep_statement),
    max_size=4,
).map(lambda parts: "\n".join(sum(parts, [])) + "\n")


def _parses(source: str) -> bool:
    try:
        ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


@settings(FUZZ, max_examples=80)
@given(sources, FORMATS)
def test_fuzz_generated_sources(source, fmt):
    errors = check_one_file(source.encode("utf-8"), fmt)
    event("parses" if _parses(source) else "does not parse")
    if _parses(source):  # parsed here, deeper in the stack than the checker runs: must analyse
        assert errors == [], (errors, source[:2000])


# -- (c) directory trees ------------------------------------------------------------------------
ENTRY_NAMES = ["a.py", "b.py", "x.py", ".hidden", "__pycache__", "sub", "odd.py", "a\nb.py", "é.py"]
ENTRY_KINDS = ["file", "bad_file", "dir", "fifo", "dir_link", "file_link", "broken_link", "loop"]


def _make(root: Path, entries: list[tuple[int, str, str]]) -> None:
    dirs = [root]
    for parent, name, kind in entries:
        path = dirs[parent % len(dirs)] / name
        if os.path.lexists(path):
            continue
        if kind == "file":
            path.write_text("def forward(x):\n    return x.item()\n")
        elif kind == "bad_file":
            path.write_bytes(b"def forward(:\n\xff")
        elif kind == "dir":
            path.mkdir()
            dirs.append(path)
        elif kind == "fifo" and hasattr(os, "mkfifo"):
            os.mkfifo(path)
        elif kind == "dir_link":
            os.symlink(dirs[0], path)  # points back up: a loop if followed
        elif kind == "file_link":
            os.symlink(root / "a.py", path)
        elif kind == "broken_link":
            os.symlink(root / "missing", path)
        elif kind == "loop":
            os.symlink(path, path)


@settings(FUZZ, max_examples=25)
@given(
    st.lists(
        st.tuples(st.integers(0, 5), st.sampled_from(ENTRY_NAMES), st.sampled_from(ENTRY_KINDS)),
        max_size=12,
    ),
    st.lists(st.sampled_from(["", "a.py", "sub", "x.py", "missing.py", "sub/a.py"]), min_size=1),
    FORMATS,
)
def test_fuzz_directory_trees(entries, args, fmt):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _make(root, entries)
        assert_check_is_robust([root / a for a in args], fmt)
