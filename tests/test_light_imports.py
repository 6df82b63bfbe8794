"""Importing as2rank and its estimators' modules loads neither torch nor transformers: they load when a neural
estimator first fits, predicts or loads. One fresh interpreter imports them all: a module that imported torch
alone would import it among the others too."""

import subprocess
import sys

#: The modules a user imports before any neural work: the package, its metrics and baselines, and the modules
#: that define each estimator family.
LIGHT = (
    "as2rank", "as2rank.metrics", "as2rank.lexical.baselines", "as2rank.cosinet.estimator",
    "as2rank.cosinet.word_vectors", "as2rank.transformer.ranker", "as2rank.transformer.cascade",
    "as2rank.transformer.cerberus", "as2rank.transformer.context.rankers", "as2rank.app.cli",
    "as2rank.answer", "as2rank.answer.ranker", "as2rank.model_selection",
)


def test_estimator_modules_import_without_torch_or_transformers():
    code = (f"import importlib, sys\nfor name in {LIGHT!r}: importlib.import_module(name)\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'transformers'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
