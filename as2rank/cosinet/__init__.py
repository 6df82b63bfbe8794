"""Cosinet: the estimator, its grid encoding of questions and candidates, word vectors, and the torch network."""
