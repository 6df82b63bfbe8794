"""The application layer: the command line, the benchmark suite, model selection (RankerSelector) and scale-out (files, Dask)."""
