"""Context-aware AS2: the context extractor, the concatenation, multi-way-attention and ensemble rankers, their segment encoding and torch network."""
