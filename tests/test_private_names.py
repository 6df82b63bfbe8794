"""No private name crosses a package: what two packages share is public in the lower one (DESIGN.md §4).

A module imports from another package (a subpackage of ``as2rank`` or a top-level module is one package) only
names without a leading underscore, and reads no underscored attribute of a module it imported from another
package. Inside one package, private names are shared freely."""

import ast
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "as2rank"


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_of(module: str) -> str:
    """The package a module belongs to: ``as2rank.x`` for everything under ``as2rank/x/`` and for the top-level
    module ``as2rank/x.py``; the facade ``as2rank`` is its own."""
    return ".".join(module.split(".")[:2])


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def crossings(source: str, module: str, *, init: bool = False) -> list:
    """``(line, what)`` for each private name that ``source``, the module ``module`` (a package's
    ``__init__`` when ``init``), takes from another package."""
    package = module if init else module.rpartition(".")[0]
    home = package_of(module)
    found, modules = [], {}
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = importlib.util.resolve_name("." * node.level + (node.module or ""), package) if node.level \
                else (node.module or "")
            if base.split(".")[0] != "as2rank":
                continue
            for alias in node.names:
                target = f"{base}.{alias.name}"
                is_module = (ROOT / Path(*target.split("."))).is_dir() or \
                    (ROOT / Path(*target.split("."))).with_suffix(".py").exists()
                owner = package_of(target if is_module else base)
                hidden = [p for p in target.split(".") if _private(p)]
                if owner != home and hidden:
                    found.append((node.lineno, f"from {base} import {alias.name}"))
                if is_module:
                    modules[alias.asname or alias.name] = target
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "as2rank":
                    if package_of(alias.name) != home and any(_private(p) for p in alias.name.split(".")):
                        found.append((node.lineno, f"import {alias.name}"))
                    if alias.asname:
                        modules[alias.asname] = alias.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules \
                and _private(node.attr) and package_of(modules[node.value.id]) != home:
            found.append((node.lineno, f"{node.value.id}.{node.attr}"))
    return found


FILES = sorted([p for p in PACKAGE.rglob("*.py")] + [p for p in (ROOT / "benchmarks").rglob("*.py")])


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
def test_no_private_name_from_another_package(path):
    module = _module(path) if PACKAGE in path.parents else "benchmarks"
    found = crossings(path.read_text(), module, init=path.name == "__init__.py")
    assert not found, f"{path.relative_to(ROOT)} takes private names from another package: {found}"


def test_the_check_sees_each_kind_of_crossing():
    source = (
        "from ..data import _plain, check_labels\n"  # a private helper of another package, and a public one
        "from .. import params as p\n"
        "x = p._hidden\n"  # read through a module alias
        "from .baselines import _own\n"  # its own package: allowed
        "import as2rank._version\n"  # a private module of another package
    )
    found = [what for _, what in crossings(source, "as2rank.lexical.features")]
    assert found == ["from as2rank.data import _plain", "import as2rank._version", "p._hidden"]
