"""Who sets and reads an estimator's attributes: only ``fit``-type methods and the state protocol set fitted
attributes (hooks return what they learned), and an estimator's private attributes and methods are read only in
the package that defines them."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "as2rank"

#: Methods that set fitted attributes (``name_``): training, and restoring a saved or pickled state.
SETTERS = {"fit", "partial_fit", "__setstate__", "_restore_fitted"}


def _classes():
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            yield path, cls


def test_only_fit_and_the_state_protocol_set_fitted_attributes():
    found = []
    for path, cls in _classes():
        for method in (f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name not in SETTERS):
            for node in ast.walk(method):
                targets = node.targets if isinstance(node, ast.Assign) else []
                for target in (t for tt in targets for t in ast.walk(tt)):
                    if (isinstance(target, ast.Attribute) and isinstance(target.ctx, ast.Store)
                            and isinstance(target.value, ast.Name) and target.value.id == "self"
                            and target.attr.endswith("_") and not target.attr.startswith("__")):
                        found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {cls.name}.{method.name} "
                                     f"sets {target.attr}")
    assert not found, found


def _package(path: Path) -> str:
    """The package a module serves: its folder under as2rank/ (a top module is its own)."""
    parts = path.relative_to(PACKAGE).parts
    return parts[0] if len(parts) > 1 else path.stem


def _estimator_classes():
    """The estimator classes (those deriving from ``BaseEstimator``) and the mixins they are made of."""
    classes = list(_classes())
    bases = {cls.name: [ast.unparse(b).rsplit(".", 1)[-1] for b in cls.bases] for _, cls in classes}
    estimators = {"BaseEstimator"}
    while True:
        grown = estimators | {name for name, parents in bases.items() if estimators & set(parents)}
        if grown == estimators:
            break
        estimators = grown
    parts = {parent for name in estimators for parent in bases.get(name, [])}
    return [(path, cls) for path, cls in classes if cls.name in estimators | parts]


def test_private_estimator_protocol_is_read_only_in_its_own_package():
    """The private class attributes and methods that estimators (and their mixins) declare are read, on
    anything other than ``self``/``cls``, only in the package of the class that declares them."""
    declared = {}  # private name -> packages whose estimator classes declare it
    for path, cls in _estimator_classes():
        for node in cls.body:
            names = ([t.id for t in node.targets if isinstance(t, ast.Name)] if isinstance(node, ast.Assign)
                     else [node.target.id] if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                     else [node.name] if isinstance(node, ast.FunctionDef) else [])
            for name in names:
                if name.startswith("_") and not name.startswith("__"):
                    declared.setdefault(name, set()).add(_package(path))
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            reads = []
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                    reads.append(node.attr)
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
                    and len(node.args) > 1 and isinstance(node.args[1], ast.Constant)
                    and not (isinstance(node.args[0], ast.Name) and node.args[0].id in ("self", "cls"))):
                reads.append(node.args[1].value)
            for name in reads:
                if name in declared and _package(path) not in declared[name]:
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} reads {name} "
                                 f"(declared in {sorted(declared[name])})")
    assert not found, found
