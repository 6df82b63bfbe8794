"""Pruning of candidate lists: the drop rule, its simulation and tuning (tune_alpha), and SequentialRanker, a cascade of fitted rankers."""
