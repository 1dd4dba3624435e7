"""The hierarchical timing wheel over one int64 array: the algorithm both the in-process
timer and the shared-memory service run."""
