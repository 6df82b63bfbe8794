"""The application layer: the command line, the benchmark runner and scale-out (files, Dask)."""
