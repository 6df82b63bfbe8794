"""The lexical baselines: word overlap, retrieval rank, their combination and a pointwise ranker on lexical features."""
