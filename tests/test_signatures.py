"""Every public estimator's signature is the one written in its source: the class (or the base it inherits
``__init__`` from) writes out every parameter with its default and stores each one unchanged, as scikit-learn
asks; its constraint table names every parameter; its docstring documents each one exactly once. What a reader,
an IDE or a type checker sees is then the class that runs."""

import ast
import inspect
import textwrap
from collections import Counter

import pytest

import as2rank

ESTIMATORS = [getattr(as2rank, n) for n in as2rank.__all__
              if isinstance(getattr(as2rank, n), type) and hasattr(getattr(as2rank, n), "get_params")]
_NO_LITERAL = object()


def _init_owner(cls):
    """The class in ``cls``'s MRO whose body defines the ``__init__`` that runs."""
    return next(c for c in cls.__mro__ if "__init__" in c.__dict__)


def _source_init(owner):
    """The ``__init__`` of ``owner`` as written in its source file: its ``ast.FunctionDef``."""
    tree = ast.parse(inspect.getsource(inspect.getmodule(owner)))
    classes = [node for node in ast.walk(tree) if isinstance(node, ast.ClassDef) and node.name == owner.__name__]
    assert len(classes) == 1, f"{owner.__name__}: {len(classes)} class statements of that name in its module"
    inits = [node for node in classes[0].body if isinstance(node, ast.FunctionDef) and node.name == "__init__"]
    assert len(inits) == 1, f"{owner.__name__} does not write out its __init__ in its class statement"
    return inits[0]


def _literal(node):
    try:
        return ast.literal_eval(node)
    except ValueError:
        return _NO_LITERAL


def _documented(doc) -> list:
    """The names of the numpydoc Parameters section of ``doc``, in order (``a, b : type`` gives two)."""
    lines = inspect.cleandoc(doc or "").splitlines()
    def underlined(i):  # a section's title: the next line is dashes
        return bool(lines[i].strip()) and i + 1 < len(lines) and set(lines[i + 1].strip()) == {"-"}

    starts = [i for i in range(len(lines)) if lines[i].strip() == "Parameters" and underlined(i)]
    if not starts:
        return []
    names = []
    for i in range(starts[0] + 2, len(lines)):
        line = lines[i]
        if underlined(i):
            break  # the next section
        if line.strip() and not line[0].isspace():
            names += [name.strip() for name in line.split(" : ", 1)[0].split(",") if name.strip()]
    return names


def _difference(label_a, a, label_b, b) -> str:
    return (f"only in {label_a}: {[x for x in a if x not in b]}; only in {label_b}: {[x for x in b if x not in a]}; "
            f"{label_a}: {a}; {label_b}: {b}")


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_signature_is_the_init_written_in_the_source(cls):
    signature = inspect.signature(cls).parameters
    owner = _init_owner(cls)
    if owner is object:  # no parameters at all
        assert not signature
        return
    init = _source_init(owner)
    args = init.args
    assert not (args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs), (
        f"{owner.__name__}.__init__ takes only named parameters")
    written = [a.arg for a in args.args[1:]]
    assert list(signature) == written, _difference("signature", list(signature), "source", written)
    assert len(args.defaults) == len(written), f"{owner.__name__}.__init__: every parameter needs a default"
    for name, node in zip(written, args.defaults):
        default = signature[name].default
        value = _literal(node)
        if value is _NO_LITERAL:  # a name or an expression: evaluated in the module that writes it
            value = eval(compile(ast.Expression(node), "<default>", "eval"), vars(inspect.getmodule(owner)))
        assert type(value) is type(default) and value == default, (
            f"{cls.__name__}({name}=...): the source writes {ast.unparse(node)}, the signature has {default!r}")
    # The body runs no code but keeping its arguments (scikit-learn's estimator contract), and keeps each one
    # unchanged under its own name.
    assert [ast.unparse(statement) for statement in init.body] == ["self._keep_params(locals())"], (
        f"{owner.__name__}.__init__ should only keep its arguments")
    sentinels = {name: object() for name in written}
    est = cls(**sentinels)
    wrong = [name for name, value in sentinels.items() if vars(est).get(name) is not value]
    assert not wrong, f"{cls.__name__}(...) does not keep these arguments as attributes: {wrong}"
    assert set(vars(est)) == set(written), f"{cls.__name__}.__init__ sets more than its parameters"


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_every_parameter_has_constraints(cls):
    names = list(inspect.signature(cls).parameters)
    table = getattr(cls, "_parameter_constraints", {})
    missing = [name for name in names if name not in table]
    assert not missing, f"{cls.__name__}._parameter_constraints has no entry for {missing}"


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_docstring_documents_each_parameter_once(cls):
    names = list(inspect.signature(cls).parameters)
    documented = _documented(cls.__doc__)
    twice = sorted(name for name, n in Counter(documented).items() if n > 1)
    assert not twice, f"{cls.__name__}'s docstring documents {twice} more than once"
    assert sorted(documented) == sorted(names), _difference("docstring", documented, "signature", names)


def test_docstring_parser_reads_grouped_and_continued_names():
    doc = textwrap.dedent('''\
        Summary.

        Parameters
        ----------
        a : int, default=1
            Text: with a colon.
        b, c : float
        d
            Described below.

        Attributes
        ----------
        e_ : int
        ''')
    assert _documented(doc) == ["a", "b", "c", "d"]
    assert _documented("No sections.") == []
