"""Combinations of fitted rankers: LinearEnsemble and the calibrated teacher logits that distillation reads."""
