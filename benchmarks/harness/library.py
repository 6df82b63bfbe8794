"""Every ``as2rank`` name the benchmarks and studies use, in one table: an experiment writes
``from harness.library import TransformerRanker, evaluate``, and when the library moves a name, this table is
the one place that follows it.

A name is imported when it is first asked for (``__getattr__``), so that a script that needs only the data
loaders does not import torch, and a subprocess round starts as light as before. An entry is
``"module:attribute"`` (``"module:"``: the attribute of the entry's name), the name's one home in the
library. A name of :data:`MODULES` is the module itself (for the few scripts that set a
module's attribute for a while, such as hiding ONNX Runtime from the int8 path).
"""

from __future__ import annotations

import importlib

NAMES = {
    # estimators and their parts
    "TransformerRanker": "as2rank.transformer.ranker:",
    "CascadeTransformer": "as2rank.transformer.cascade:",
    "Cerberus": "as2rank.transformer.cerberus:",
    "DistilledRanker": "as2rank.transformer.cerberus:",
    "LinearEnsemble": "as2rank.ensemble.linear:",
    "teacher_logits": "as2rank.ensemble.teachers:",
    "ContextConcat": "as2rank.transformer.context.rankers:",
    "ContextEnsemble": "as2rank.transformer.context.rankers:",
    "ContextExtractor": "as2rank.transformer.context.rankers:",
    "ContextMWA": "as2rank.transformer.context.rankers:",
    "context_rankers": "as2rank.transformer.context.rankers:",
    "ZeroShotRanker": "as2rank:",
    "AUTO_BATCH_TOKENS": "as2rank.transformer.scaffold:",
    "Cosinet": "as2rank.cosinet.estimator:",
    "PAPER_LEARNING_RATES": "as2rank.cosinet.estimator:",
    "CosinetNetwork": "as2rank.cosinet.network:",
    "OverlapRankRanker": "as2rank.lexical.baselines:",
    "ReciprocalRankRanker": "as2rank.lexical.baselines:",
    "WordOverlapRanker": "as2rank.lexical.baselines:",
    "LexicalFeatures": "as2rank.lexical.baselines:",
    "PointwiseRanker": "as2rank.lexical.baselines:",
    "CalibratedRanker": "as2rank.answer.ranker:",
    "create_app": "as2rank.serve.app:",
    "apply_calibration": "as2rank.ensemble.calibration:",
    "SequentialRanker": "as2rank.pruning.sequential:",
    "EXIT_GAP": "as2rank.pruning.rules:",
    "simulate_cascade": "as2rank.pruning.rules:",
    "tune_alpha": "as2rank.pruning.rules:",
    # data
    "GroupIndex": "as2rank.data:",
    "keep_answered": "as2rank.data:",
    "expand_candidates": "as2rank.datasets:",
    "load_asnq": "as2rank.datasets:",
    "load_sample": "as2rank.datasets:",
    "load_squad_sent": "as2rank.datasets:",
    "load_wikiqa": "as2rank.datasets:",
    "read_pairs": "as2rank.datasets:",
    "SAMPLE_PATH": "as2rank.datasets.sample:",
    "write_sample": "as2rank.datasets.sample:",
    "tokenize": "as2rank.text:",
    "AUTO_MIN_QUESTIONS": "as2rank.neural.early_stopping:",
    # measures
    "METRICS": "as2rank.metrics:",
    "compare": "as2rank.metrics:",
    "evaluate": "as2rank.metrics:",
    "per_question": "as2rank.metrics:",
    "get_scorer": "as2rank.metrics:",
    "mean_average_precision": "as2rank.metrics:",
    "paired_significance": "as2rank.metrics:",
    "ranking_report": "as2rank.metrics:",
    "answer_triggering": "as2rank.metrics:",
    "brier_score": "as2rank.metrics:",
    "expected_calibration_error": "as2rank.metrics:",
    "precision_at_coverage": "as2rank.metrics:",
    "precision_coverage_auc": "as2rank.metrics:",
    "precision_coverage_curve": "as2rank.metrics:",
    "wilson_interval": "as2rank.metrics:",
    # the neural machinery
    "autocast": "as2rank.neural:",
    "autocast_dtype": "as2rank.neural:",
    "cpu_bf16_supported": "as2rank.neural:",
    "int8_supported": "as2rank.neural:",
    "resolve_device": "as2rank.neural:",
    "to_device": "as2rank.neural:",
    "devices": "as2rank.neural.devices:",
    "encoder_states": "as2rank.neural.backbone:",
    "token_budget_batches": "as2rank.neural.batching:",
    "FIT_CACHE": "as2rank.neural.fitcache:",
    "source_digests": "as2rank.neural.fitcache:",
    "resolve_model": "as2rank.neural.models:",
    "predict_module": "as2rank.neural.predict:",
    "batch_tensors": "as2rank.neural.predict:",
    "no_progress": "as2rank.neural.predict:",
    "predict_logits": "as2rank.neural.predict:",
    "TOKEN_CACHE": "as2rank.neural.tokens:",
    "batching": "as2rank.neural.batching:",
    "onnx_runtime": "as2rank.neural.onnx.runtime:",
    "onnx_available": "as2rank.neural.onnx.runtime:",
    "DISABLED_FUSIONS": "as2rank.neural.onnx.runtime:",
    "INT8_COPIES": "as2rank.neural.onnx.copies:",
    "CALIBRATION_ROWS": "as2rank.neural.onnx.calibration:",
    "activation_ranges": "as2rank.neural.onnx.calibration:",
    "calibration_rows": "as2rank.neural.onnx.calibration:",
    "export_graph": "as2rank.neural.onnx.export:",
    "padded": "as2rank.neural.onnx.export:",
    "quiet": "as2rank.neural.onnx.export:",
    "atomic_file": "as2rank.files:",
    # the application: the suite, model selection, the command line
    "ENTRIES": "as2rank.model_selection.catalogue:",
    "SuiteEntry": "as2rank.model_selection.catalogue:",
    "load_benchmark_data": "as2rank.app.suite:",
    "run_suite": "as2rank.app.suite:",
    "select": "as2rank.app.suite:",
    "DEFAULT_CANDIDATES": "as2rank.model_selection.selector:",
    "GPU_CANDIDATES": "as2rank.model_selection.selector:",
    "choose": "as2rank.model_selection.report:",
    "plot_selection": "as2rank.model_selection.report:",
    "count_rows": "as2rank.app.scale:",
    "cli_main": "as2rank.app.cli:main",
    "as2rank": "as2rank:",
}
#: Modules given under another name than their last part.
MODULES = {"context_rankers", "devices", "batching", "onnx_runtime", "predict_module", "as2rank"}


def __getattr__(name: str):
    if name not in NAMES:
        raise AttributeError(f"harness.library has no {name!r}: add it to NAMES")
    module, _, attribute = NAMES[name].partition(":")
    loaded = importlib.import_module(module)
    return loaded if name in MODULES else getattr(loaded, attribute or name)
