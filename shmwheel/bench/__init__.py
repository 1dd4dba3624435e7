"""Benchmarks: ``python -m shmwheel.bench`` measures shmwheel beside its peers in one run."""
