"""Benchmarks and load drivers for function-model-serving (`make bench`, `make load`)."""
