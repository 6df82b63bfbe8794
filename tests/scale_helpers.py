"""Helpers of ``tests/test_scale.py`` that worker and CLI subprocesses import (no test dependencies)."""

import time

import numpy as np

from as2rank.lexical.baselines import WordOverlapRanker

#: How many times this process unpickled a CountingRanker.
LOADS = 0


class CountingRanker(WordOverlapRanker):
    """Word overlap that counts its unpickling in each process (how often a model is shipped to a worker)."""

    def __setstate__(self, state):
        global LOADS
        LOADS += 1
        super().__setstate__(state)


class SlowRanker(WordOverlapRanker):
    """Word overlap that takes ``delay`` seconds per predict call, so a run can be killed halfway."""

    def __init__(self, delay=0.2, lowercase=True, drop_punct=False):
        super().__init__(lowercase=lowercase, drop_punct=drop_punct)
        self.delay = delay

    def predict(self, X):
        time.sleep(self.delay)
        return super().predict(X)


class InterruptingRanker(WordOverlapRanker):
    """Word overlap that raises KeyboardInterrupt on its ``stop_at``-th predict call (0-based)."""

    def __init__(self, stop_at=2, lowercase=True, drop_punct=False):
        super().__init__(lowercase=lowercase, drop_punct=drop_punct)
        self.stop_at = stop_at

    def predict(self, X):
        self.calls_ = getattr(self, "calls_", 0) + 1
        if self.calls_ > self.stop_at:
            raise KeyboardInterrupt
        return super().predict(X)


def asnq_rows(words, n_questions, seed=0, min_size=1, max_size=12):
    """ASNQ lines (question, sentence, label 1-4) from a word list, whole questions, distinct question texts;
    a positive (label 4) repeats question words."""
    rng = np.random.default_rng(seed)
    rows = []
    for q in range(n_questions):
        question = " ".join(rng.choice(words, 4)) + f" {words[q % len(words)]}"
        text = f"{question} {q}"
        for _ in range(int(rng.integers(min_size, max_size + 1))):
            positive = rng.random() < 0.3
            sentence = list(rng.choice(words, int(rng.integers(3, 10))))
            if positive:
                sentence += question.split()[:2]
            rows.append((text, " ".join(sentence), 4 if positive else int(rng.integers(1, 4))))
    return rows


def write_asnq(path, rows):
    path.write_text("".join(f"{q}\t{s}\t{label}\n" for q, s, label in rows), encoding="utf-8")
    return path
