"""Acceptance checks written as data: each is a table of an experiment's configuration (``[[checks]]``),
evaluated against the run's results by one generic checker.

A check has

- ``check`` and ``measured``: Jinja templates of what is checked and of what was measured;
- ``pass``: a Jinja expression, true when the check passes;
- optionally ``for`` (``"name in expression"``, ``"a, b in expression"``, or a list of them, nested: one check per
  item), ``if`` (an expression: the check is left out when it is false) and ``let`` (a table of names and
  expressions, evaluated in order after ``if``, visible to what follows); a check with ``each`` (a list of checks)
  instead of ``check``, ``measured`` and ``pass`` gives those checks for each item of its ``for``.

The names visible are the context the experiment gives (its results ``res``, its configuration ``config``, values
it computed), Python's ``abs``, ``all``, ``any``, ``len``, ``max``, ``min``, ``round``, ``sorted``, ``sum``,
``tuple``, ``zip``, ``median``, and the filters of the pages (``pct``, ``pval``, ``num``) with ``f`` (``x|f('.2f')``
is ``format(x, '.2f')``), ``fs`` (each item of a list formatted, joined by ``", "``), ``keyed`` (a list of dicts
as a dict by one of their keys) and ``repr``.
"""

from __future__ import annotations

import math
import statistics


def _keyed(rows, key):
    return {r[key]: r for r in rows}


def _fs(values, spec="", sep=", ", suffix=""):
    return sep.join(format(v, spec) + suffix for v in values)


def environment():
    from harness.pages import environment as pages_environment

    env = pages_environment()
    env.filters.update(f=format, fs=_fs, keyed=_keyed, repr=repr)
    env.globals.update(abs=abs, all=all, any=any, len=len, max=max, min=min, round=round, sorted=sorted, sum=sum,
                       tuple=tuple, zip=zip, list=list, str=str, float=float, int=int, isnan=math.isnan,
                       median=statistics.median)
    return env


def evaluate(specs, context: dict, names: dict | None = None) -> list[dict]:
    """``[{"check", "measured", "pass"}]``: every check of ``specs`` evaluated with the names of ``context`` and
    ``names`` (expressions evaluated in order, each seeing those before it)."""
    env = environment()

    def expression(source, scope):
        return env.compile_expression(source, undefined_to_none=False)(**scope)

    def scopes(clauses, scope):
        if not clauses:
            yield scope
            return
        names, _, source = clauses[0].partition(" in ")
        names = [n.strip() for n in names.split(",")]
        for item in expression(source, scope):
            yield from scopes(clauses[1:], {**scope, **(dict(zip(names, item)) if len(names) > 1 else {names[0]: item})})

    def checks(specs, context):
        for spec in specs:
            clauses = spec.get("for", [])
            for scope in scopes([clauses] if isinstance(clauses, str) else clauses, dict(context)):
                if "if" in spec and not expression(spec["if"], scope):
                    continue
                for name, source in spec.get("let", {}).items():
                    scope[name] = expression(source, scope)
                if "each" in spec:
                    yield from checks(spec["each"], scope)
                    continue
                yield {"check": env.from_string(spec["check"]).render(scope),
                       "measured": env.from_string(spec["measured"]).render(scope),
                       "pass": bool(expression(spec["pass"], scope))}

    context = dict(context)
    for name, source in (names or {}).items():
        context[name] = expression(source, context)
    return list(checks(specs, context))
