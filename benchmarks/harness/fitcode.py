"""Which of the library's code a fit ran: a stored fit, or scores computed from one, is reused only while that
code is unchanged, and an edit of code the fit never ran (the command line, saving and loading, another
estimator, the predict path of the same one) trains nothing again.

:func:`traced` records the ``as2rank`` functions that run inside a ``with`` block (a global trace function, set for
the calling thread and the threads started inside the block), by file and qualified name. :func:`code_record`
turns them into ``{entry: digest}``:

* ``path::Qualified.name``: a function or method that ran (a nested function, lambda or comprehension counts
  as the outermost function that holds it), decorators included;
* ``path::<module>``: the module-level code of each file that ran, without its functions' bodies (constants,
  class attributes, base classes), and of each ``as2rank`` module from which a file that ran imports a
  constant or a module;
* ``path::Class``: a class imported by a file that ran, without its methods (those that run have their own
  entries).

Digests are of syntax trees without docstrings (:func:`syntax`): comments, layout and docstrings are not code.
The trace calls a Python function for every new frame, so a traced fit takes longer than an untraced one: the
fit times the harness records are of traced fits (``"traced": true`` in the record), comparable with each other,
not with records made before tracing.
:func:`stale` says which entries of a record differ from the library as it is now.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib
import inspect
import sys
import threading
from pathlib import Path


def package_root() -> Path:
    import as2rank

    return Path(as2rank.__file__).resolve().parent


def syntax(source) -> str:
    """The syntax tree of Python ``source`` (text or bytes) without its docstrings, as text (comments and layout
    are not in the tree): two sources with the same ``syntax`` are the same code."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                node.body = node.body[1:] or [ast.Pass()]
    return ast.dump(tree)


@contextlib.contextmanager
def traced():
    """Yield a set that receives ``(absolute path, qualified name)`` of the ``as2rank`` code that runs in the block."""
    root = str(package_root()) + "/"
    files: set[tuple] = set()

    def trace(frame, event, arg):
        # The global trace function sees each new frame once ("call") and, returning None, traces none of its
        # lines: cheaper than a profile hook, which also sees every return and every call into C.
        code = frame.f_code
        if code.co_filename.startswith(root):
            files.add((code.co_filename, getattr(code, "co_qualname", None)))

    previous, previous_threads = sys.gettrace(), threading.gettrace()
    sys.settrace(trace)
    threading.settrace(trace)
    try:
        yield files
    finally:
        sys.settrace(previous)
        threading.settrace(previous_threads)


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _data_imports(path: Path, root: Path) -> set[str]:
    """What ``path`` imports from ``as2rank`` that is not a function: ``"rel/path.py::<module>"`` for a module or
    a constant, ``"rel/path.py::Class"`` for a class."""
    module = _module_name(path, root)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()

    def add(obj_file, name):
        file = Path(obj_file).resolve()
        if root in file.parents:
            found.add(f"{file.relative_to(root)}::{name}")

    for node in ast.walk(ast.parse(path.read_bytes())):
        if isinstance(node, ast.ImportFrom):
            base = importlib.util.resolve_name("." * node.level + (node.module or ""), package) if node.level else node.module
            if not base or not base.startswith("as2rank"):
                continue
            source = importlib.import_module(base)
            for alias in node.names:
                value = getattr(source, alias.name, None)
                if inspect.ismodule(value):
                    add(value.__file__, MODULE)
                elif inspect.isclass(value) and value.__module__.startswith("as2rank"):
                    add(inspect.getsourcefile(value), value.__qualname__)
                elif not inspect.isfunction(value):
                    add(source.__file__, MODULE)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("as2rank"):
                    add(importlib.import_module(alias.name).__file__, MODULE)
    return found


#: The entry of a file's module-level code.
MODULE = "<module>"


def _without_functions(node):
    """``node`` (a module or class) with every function and method reduced to its name and decorators, classes
    kept (recursively): a method added, removed or renamed changes what runs (an override), a body edited does
    not change this digest (the function's own entry says whether it ran)."""
    for child in node.body:
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            child.args = ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[])
            child.body, child.returns = [ast.Pass()], None
        elif isinstance(child, ast.ClassDef):
            _without_functions(child)
    return node


def _find(tree: ast.Module, qualname: str) -> list:
    """The definitions named ``qualname`` (``Class.method``, ``function``) at the top of ``tree``."""
    nodes = [tree]
    for part in qualname.split("."):
        nodes = [c for n in nodes for c in n.body if isinstance(c, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                 and c.name == part]
    return nodes


def _digest(root: Path, entry: str) -> str | None:
    """The digest of a record's entry (``file``, ``file::<module>``, ``file::Class`` or ``file::function``),
    None when it no longer exists."""
    rel, _, name = entry.partition("::")
    path = root / rel
    if not path.is_file():
        return None
    if not name:
        return hashlib.sha256(syntax(path.read_bytes()).encode()).hexdigest()
    tree = ast.parse(path.read_bytes())
    if name == MODULE:
        nodes = [_without_functions(tree)]
    else:
        nodes = [_without_functions(n) if isinstance(n, ast.ClassDef) else n for n in _find(tree, name)]
        if not nodes:
            return None
    return hashlib.sha256("\n".join(syntax(ast.unparse(n)) for n in nodes).encode()).hexdigest()


def _entry(root: Path, path: Path, qualname) -> str:
    rel = path.relative_to(root)
    if qualname is None:  # before Python 3.11: the whole file
        return str(rel)
    outer = qualname.split(".<locals>")[0]
    return f"{rel}::{MODULE if outer.startswith('<') else outer}"


def code_record(ran) -> dict:
    """``{entry: digest}`` of the code that ran (``(path, qualified name)`` pairs from :func:`traced`), the
    module-level code of its files, and what they import without calling it."""
    root = package_root()
    ran = {(Path(f).resolve(), q) for f, q in ran}
    files = {f for f, _ in ran}
    entries = {_entry(root, f, q) for f, q in ran} | {f"{f.relative_to(root)}::{MODULE}" for f in files}
    for path in files:
        entries |= _data_imports(path, root)
    return {e: _digest(root, e) for e in sorted(entries)}


def stale(record: dict | None) -> list[str]:
    """The files of ``record`` whose code differs from the library's now (missing files included); a record
    that is None or empty (a fit stored before records were kept) is stale as a whole."""
    if not record:
        return ["<no record of the code that ran>"]
    root = package_root()
    return [entry for entry, digest in record.items() if _digest(root, entry) != digest]
