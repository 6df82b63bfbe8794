"""The house's layering: every import (module level or inside a function) goes to a module of the same or a
lower floor, never back up; at most 15 modules at the top of the package."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "as2rank"

#: Floors, lowest first: a module may import its own floor and those below. A prefix names a package's modules.
FLOORS = [
    ("core", ["version", "data", "params", "text", "digest", "files", "logistic"]),
    ("measures", ["metrics", "datasets"]),
    ("contract", ["base"]),
    ("neural machinery", ["neural"]),
    ("persistence", ["persistence"]),
    ("rankers without torch", ["lexical", "pruning", "ensemble", "answer"]),
    ("model families", ["cosinet", "transformer"]),
    ("model selection", ["model_selection"]),
    ("application", ["app", "serve"]),
]
#: The package's facade imports lazily from every floor; ``python -m as2rank`` runs the command line.
FACADE = {"as2rank", "as2rank.__main__"}


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), path


def _floor(module: str) -> int:
    name = module.removeprefix("as2rank.")
    for level, (_, prefixes) in enumerate(FLOORS):
        if any(name == p or name.startswith(p + ".") for p in prefixes):
            return level
    raise AssertionError(f"{module} is on no floor: add it to FLOORS")


def _imports(module: str, path: Path):
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("as2rank"):
                continue
            if node.module is None:  # ``from .. import datasets``: the names are modules
                for alias in node.names:
                    yield node.lineno, f"{target}.{alias.name}"
            else:
                yield node.lineno, target
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("as2rank"):
                    yield node.lineno, alias.name


MODULES = [(m, p) for m, p in _modules() if m not in FACADE]


@pytest.mark.parametrize("module,path", MODULES, ids=[m for m, _ in MODULES])
def test_no_import_runs_back_up(module, path):
    floor = _floor(module)
    above = [
        f"line {line}: {target} ({FLOORS[_floor(target)][0]})"
        for line, target in _imports(module, path)
        if target != "as2rank" and _floor(target) > floor
    ]
    assert not above, f"{module} ({FLOORS[floor][0]}) imports from above: {above}"
    assert all(target != "as2rank" for _, target in _imports(module, path)), f"{module} imports the facade"


def test_at_most_fifteen_modules_at_the_top():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 15, top


def _resolve(target: str, modules: set) -> str | None:
    """The module of ``target`` (``from .x import name`` names a module or an object in one)."""
    while target and target not in modules:
        target = target.rpartition(".")[0]
    return target or None


def test_no_import_circle():
    """No module reaches itself through imports, those inside functions included (a circle broken only by
    importing inside a function is still a circle)."""
    paths = dict(MODULES)
    modules = set(paths)
    graph = {m: {t for _, target in _imports(m, p) if (t := _resolve(target, modules)) and t != m
                 and not m.startswith(t + ".")}  # a module's own package is its parent, not a dependency
             for m, p in paths.items()}
    # Tarjan's strongly connected components: any with two or more modules is a circle.
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for m in graph:
        if m not in index:
            visit(m)
    assert not circles, f"import circles: {circles}"


def test_modules_hold_at_most_600_lines():
    """A module longer than 600 lines holds more than one concern: split it by what its parts serve."""
    roots = (PACKAGE, PACKAGE.parent / "benchmarks")
    long = {str(p.relative_to(PACKAGE.parent)): n for root in roots for p in sorted(root.rglob("*.py"))
            if "cache" not in p.relative_to(root).parts and (n := len(p.read_text().splitlines())) > 600}
    assert not long, long
