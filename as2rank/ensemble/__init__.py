"""Combinations of fitted rankers: LinearEnsemble, the calibrated teacher logits that distillation reads, and the
calibration of scores into log-odds and probabilities that every estimator shares (:mod:`.calibration`)."""
