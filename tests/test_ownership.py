"""Who sets and reads an estimator's attributes: only ``fit``-type methods and the state protocol set fitted
attributes (hooks return what they learned), and an estimator's private attributes and methods are read only in
the package that defines them."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "as2rank"

#: Methods that set fitted attributes (``name_``): training (and the training shell's fresh start, which ``fit``
#: and ``partial_fit`` call), and restoring a saved or pickled state.
SETTERS = {"fit", "partial_fit", "_start_fresh", "__setstate__", "_restore_fitted"}


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


def _declared(cls: ast.ClassDef) -> set:
    """The names a class statement declares: its class attributes and methods, and the attributes its methods
    set on ``self``."""
    names = set()
    for node in cls.body:
        if isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
    for node in ast.walk(cls):
        if (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and isinstance(node.value, ast.Name)
                and node.value.id == "self"):
            names.add(node.attr)
    return names


def _private_reads(cls: ast.ClassDef):
    """``(line, name)`` of every private name a class's code reads on the estimator it serves: ``self._x``,
    ``est._x`` or ``cls._x`` (a lambda's argument, as ``available_if`` takes it), and ``getattr``/``hasattr`` of
    ``"_x"`` on them."""
    hosts = ("self", "est", "cls")
    for node in ast.walk(cls):
        names = []
        if (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and isinstance(node.value, ast.Name)
                and node.value.id in hosts):
            names.append(node.attr)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
                and len(node.args) > 1 and isinstance(node.args[0], ast.Name) and node.args[0].id in hosts
                and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
            names.append(node.args[1].value)
        for name in names:
            if name.startswith("_") and not name.startswith("__"):
                yield node.lineno, name


def test_no_base_of_a_neural_estimator_reads_a_private_member_of_its_host():
    """The training shell (``neural.shell.NeuralEstimator``) and every other class a neural estimator is built from
    read, of the estimator that hosts them, only the private names that they or their own bases declare: what
    the shell needs of Cosinet or a transformer estimator comes through its public hooks and parameters, never
    through a private member of the host class (as a mixin of training steps once read six of them)."""
    classes = list(_classes())
    bases = {cls.name: [ast.unparse(b).rsplit(".", 1)[-1] for b in cls.bases] for _, cls in classes}
    declared = {}
    for _, cls in classes:
        declared.setdefault(cls.name, set()).update(_declared(cls))

    def ancestors(name, seen):
        for base in bases.get(name, []):
            if base not in seen:
                seen.add(base)
                ancestors(base, seen)
        return seen

    lineage = {name: ancestors(name, set()) for name in bases}
    hosts = {name for name, above in lineage.items() if "NeuralEstimator" in above}
    assert {"Cosinet", "TransformerRanker", "CascadeTransformer", "Cerberus", "DistilledRanker", "ContextConcat",
            "ContextEnsemble", "ContextMWA"} <= hosts, "the neural estimators are built on the training shell"
    found = []
    for path, cls in classes:
        served = {host for host in hosts if cls.name in lineage[host]}
        if not served:
            continue  # not a base of a neural estimator
        own = declared[cls.name].union(*(declared.get(base, set()) for base in lineage[cls.name]))
        of_hosts = set().union(*(declared[host] for host in served))
        found += [f"{path.relative_to(PACKAGE)}:{line} {cls.name} reads {name}"
                  for line, name in _private_reads(cls) if name in of_hosts and name not in own]
    assert not found, found


def test_the_training_shell_is_the_one_loop_driver():
    """Only the training shell calls the training loop (``neural.training.train``): no estimator drives it."""
    callers = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "train":
                callers.append(str(path.relative_to(PACKAGE)))
    assert callers == ["neural/shell.py"], callers
